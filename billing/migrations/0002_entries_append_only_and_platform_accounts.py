"""Ledger entries are append-only in the database itself, and the platform's accounts and every
existing organization's wallet exist before the first money moves."""

from django.conf import settings
from django.db import migrations

POSTGRESQL_FORWARD = """
CREATE FUNCTION billing_entry_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'billing_entry is append-only: post a correcting transaction';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER billing_entry_append_only
    BEFORE UPDATE OR DELETE ON billing_entry
    FOR EACH ROW EXECUTE FUNCTION billing_entry_refuse_change();
"""
POSTGRESQL_BACKWARD = """
DROP TRIGGER IF EXISTS billing_entry_append_only ON billing_entry;
DROP FUNCTION IF EXISTS billing_entry_refuse_change();
"""
SQLITE_FORWARD = [
    """CREATE TRIGGER billing_entry_no_update BEFORE UPDATE ON billing_entry
       BEGIN SELECT RAISE(ABORT, 'billing_entry is append-only'); END;""",
    """CREATE TRIGGER billing_entry_no_delete BEFORE DELETE ON billing_entry
       BEGIN SELECT RAISE(ABORT, 'billing_entry is append-only'); END;""",
]
SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS billing_entry_no_update;",
    "DROP TRIGGER IF EXISTS billing_entry_no_delete;",
]


def append_only(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_FORWARD)
    elif vendor == "sqlite":
        for statement in SQLITE_FORWARD:
            schema_editor.execute(statement)


def append_only_backward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_BACKWARD)
    elif vendor == "sqlite":
        for statement in SQLITE_BACKWARD:
            schema_editor.execute(statement)


def open_accounts(apps, schema_editor):
    Account = apps.get_model("billing", "Account")
    Organization = apps.get_model("marketplace", "Organization")
    currency = settings.PLATFORM_CURRENCY
    accounts = [
        Account(organization=None, kind=kind, currency=currency)
        for kind in ("fees", "stripe_clearing", "adjustments")
    ]
    for organization in Organization.objects.all():
        accounts += [
            Account(organization=organization, kind=kind, currency=currency)
            for kind in ("available", "held", "earnings")
        ]
    Account.objects.bulk_create(accounts, ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0001_ledger_wallets_holds_budgets_top_ups"),
        ("marketplace", "0001_organizations_and_memberships"),
    ]

    operations = [
        migrations.RunPython(append_only, append_only_backward),
        migrations.RunPython(open_accounts, migrations.RunPython.noop),
    ]
