"""State only: the organization foreign keys point to organizations.Organization, the same
table as before (marketplace_organization)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0002_notice_batches'),
        ('organizations', '0001_organizations_memberships_invitations_from_marketplace'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='notification',
                    name='organization',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='organizations.organization'),
                ),
            ],
        ),
    ]
