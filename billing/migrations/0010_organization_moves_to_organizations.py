"""State only: the organization foreign keys point to organizations.Organization, the same
table as before (marketplace_organization)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0009_top_up_expired'),
        ('organizations', '0001_organizations_memberships_invitations_from_marketplace'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='account',
                    name='organization',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='accounts', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='budget',
                    name='organization',
                    field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='budget', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='budgetalert',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='budget_alerts', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='connectedaccount',
                    name='organization',
                    field=models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='connected_account', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='hold',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='holds', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='payout',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='payouts', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='topup',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='top_ups', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='transaction',
                    name='organization',
                    field=models.ForeignKey(help_text='The organization whose wallet this is about.', on_delete=django.db.models.deletion.PROTECT, related_name='transactions', to='organizations.organization'),
                ),
            ],
        ),
    ]
