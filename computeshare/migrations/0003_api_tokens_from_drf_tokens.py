"""The keys of DRF's token table (rest_framework.authtoken, kept in clear) become hashed API
tokens named "migrated", and the table goes: clients keep their keys, the database keeps none.

The table is read with SQL rather than through authtoken's model, so that the app can leave
INSTALLED_APPS; a database that never had it (a new one) has nothing to move. The old keys are
40 hexadecimal characters: their first 15 are the lookup prefix, as for new keys."""

import hashlib

from django.db import migrations

DRF_TOKEN_TABLE = "authtoken_token"
LOOKUP_LENGTH = 15


def tokens_from_drf_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if DRF_TOKEN_TABLE not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("computeshare", "ApiToken")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, user_id, created FROM {DRF_TOKEN_TABLE}")
        rows = cursor.fetchall()
    tokens = ApiToken.objects.bulk_create(
        ApiToken(
            user_id=user_id,
            name="migrated",
            prefix=key[:LOOKUP_LENGTH],
            digest=hashlib.sha256(key.encode()).hexdigest(),
        )
        for key, user_id, _ in rows
    )
    # bulk_create stamps them now; keep when each key was really made.
    for token, (_, _, created) in zip(tokens, rows, strict=True):
        token.created_at = created
    ApiToken.objects.bulk_update(tokens, ["created_at"])
    schema_editor.execute(f"DROP TABLE {DRF_TOKEN_TABLE}")


class Migration(migrations.Migration):
    dependencies = [
        ("computeshare", "0002_api_tokens"),
    ]

    # Backwards there is nothing to restore: the keys themselves are gone.
    operations = [
        migrations.RunPython(tokens_from_drf_tokens, migrations.RunPython.noop, elidable=False),
    ]
