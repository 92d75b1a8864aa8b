"""State only: the organization foreign keys point to organizations.Organization, the same
table as before (marketplace_organization)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('organizations', '0001_organizations_memberships_invitations_from_marketplace'),
        ('scheduler_bridge', '0007_job_sizes_memory_and_templates'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='job',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='jobs', to='organizations.organization'),
                ),
                migrations.AlterField(
                    model_name='sweep',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='sweeps', to='organizations.organization'),
                ),
            ],
        ),
    ]
