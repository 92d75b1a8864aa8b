from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler_bridge', '0008_organization_moves_to_organizations'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='results_skipped',
            field=models.JSONField(blank=True, default=list),
        ),
    ]
