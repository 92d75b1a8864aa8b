from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler_bridge', '0009_jobs_qos_and_reservation'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='results_skipped',
            field=models.JSONField(blank=True, default=list),
        ),
    ]
