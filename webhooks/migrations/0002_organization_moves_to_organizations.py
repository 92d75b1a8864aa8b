"""State only: the organization foreign keys point to organizations.Organization, the same
table as before (marketplace_organization)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('organizations', '0001_organizations_memberships_invitations_from_marketplace'),
        ('webhooks', '0001_endpoints_events_deliveries'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='webhookendpoint',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='webhook_endpoints', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='webhookevent',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='webhook_events', to='organizations.organization'),
                ),
            ],
        ),
    ]
