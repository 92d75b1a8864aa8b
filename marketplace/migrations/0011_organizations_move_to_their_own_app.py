"""Marketplace forgets Organization, Membership and Invitation (now organizations'), after its
own foreign keys and every other app's point to organizations.Organization. State only: the
tables and rows stay."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0010_organization_moves_to_organizations'),
        ('marketplace', '0010_capacity_idle_and_track_record'),
        ('notifications', '0003_organization_moves_to_organizations'),
        ('organizations', '0001_organizations_memberships_invitations_from_marketplace'),
        ('scheduler_bridge', '0008_organization_moves_to_organizations'),
        ('webhooks', '0002_organization_moves_to_organizations'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='membership',
                    name='added_by',
                ),
                migrations.RemoveField(
                    model_name='membership',
                    name='organization',
                ),
                migrations.RemoveField(
                    model_name='membership',
                    name='user',
                ),
                migrations.RemoveField(
                    model_name='organization',
                    name='members',
                ),
                migrations.AlterField(
                    model_name='allocation',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='allocations', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='cluster',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='clusters', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='bid',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='bids', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='tenantlease',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='tenant_leases', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='slurmaccount',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='slurm_accounts', to='organizations.organization'),
                ),
                migrations.DeleteModel(
                    name='Invitation',
                ),
                migrations.DeleteModel(
                    name='Membership',
                ),
                migrations.DeleteModel(
                    name='Organization',
                ),
            ],
        ),
    ]
