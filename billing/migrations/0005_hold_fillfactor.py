from django.db import migrations


def hold_fillfactor(apps, schema_editor):
    # Half of each page left free, so that settling a hold (amount, released, status: none of them
    # indexed) stays on its page as a heap-only update, without touching the indexes. An
    # auction's clearing settles every bid's hold at once.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE billing_hold SET (fillfactor = 50)")


class Migration(migrations.Migration):
    dependencies = [("billing", "0004_hold_check_tolerates_sqlite_floats")]

    operations = [migrations.RunPython(hold_fillfactor, migrations.RunPython.noop)]
