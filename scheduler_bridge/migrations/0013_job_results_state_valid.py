"""A job's `results_state` is guarded like its `state`: only the states of
`Job.ResultsState` (the moves between them are `Job.RESULTS_STATE_TRANSITIONS`)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_bridge", "0012_short_runs_keep_their_start"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "results_state__in",
                        ["waiting", "collecting", "ready", "failed", "expired", "not_kept"],
                    )
                ),
                name="job_results_state_valid",
            ),
        ),
    ]
