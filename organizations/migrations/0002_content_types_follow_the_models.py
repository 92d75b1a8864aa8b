"""The content types of Organization, Membership and Invitation move with them from marketplace
to organizations, so that their permissions (and users' and groups' grants of them) and the admin's
log entries keep pointing at them. On a fresh database there is nothing to move: the content
types are created under organizations after the migrations."""

from django.db import migrations

MODELS = ["organization", "membership", "invitation"]


def _move(apps, schema_editor, source, target):
    content_types = apps.get_model("contenttypes", "ContentType")
    database = schema_editor.connection.alias
    for model in MODELS:
        # If the target exists already (a run of the app before this migration), the old
        # content type stays as it was: renaming it would break the unique key.
        if content_types.objects.using(database).filter(app_label=target, model=model).exists():
            continue
        content_types.objects.using(database).filter(app_label=source, model=model).update(
            app_label=target
        )


def forwards(apps, schema_editor):
    _move(apps, schema_editor, "marketplace", "organizations")


def backwards(apps, schema_editor):
    _move(apps, schema_editor, "organizations", "marketplace")


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("organizations", "0001_organizations_memberships_invitations_from_marketplace"),
        ("marketplace", "0011_organizations_move_to_their_own_app"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
