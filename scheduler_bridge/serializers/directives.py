"""What became of a script's #SBATCH lines, as a job, its quote and its page show it
(`job_requests.DirectiveReport`)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from computeshare.output_serializers import OutputSerializer


class DirectiveHonouredSerializer(OutputSerializer):
    option = serializers.CharField(help_text="As written in the script: `-c`, `--time`.")
    value = serializers.CharField()
    line = serializers.IntegerField()
    note = serializers.CharField(
        help_text="How it was read, when that needs saying (a path kept in the job's folder)."
    )


class DirectiveOverriddenSerializer(OutputSerializer):
    option = serializers.CharField(help_text="As written in the script.")
    value = serializers.CharField()
    line = serializers.IntegerField()
    why = serializers.CharField()


class EffectiveValueSerializer(OutputSerializer):
    field = serializers.CharField(
        help_text="`name`, `time_limit_minutes`, `nodes`, `ntasks`, `cpus_per_task`, `gpus`, "
        "`memory`, `array`, and the options the job runs with (`output`, `error`, `input`, "
        "`open_mode`, `signal`, `requeue`, `constraint`, `hint`, `comment`, `exclusive`, "
        "`dependency`, `nice`, `time_min_minutes`, `ntasks_per_node`, `cpus_per_gpu`)."
    )
    value = serializers.CharField()
    # DRF takes the declared field off the class, so the name is free at run time; the stubs
    # see Field.source.
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=["request", "script", "default"]
    )
    option = serializers.CharField(help_text="The script's directive that gave it, if it did.")
    line = serializers.IntegerField(allow_null=True)


class DirectivesSerializer(OutputSerializer):
    honoured = DirectiveHonouredSerializer(many=True)
    overridden = DirectiveOverriddenSerializer(
        many=True,
        help_text="Directives the job runs without, each with why: those that would reach "
        "outside what the team bought, those the request's fields replace, and earlier values "
        "of an option given again.",
    )
    effective = EffectiveValueSerializer(
        many=True, help_text="Every value the job runs with, and where it came from."
    )


def directives_data(report: dict[str, Any] | None) -> dict[str, Any]:
    empty: dict[str, Any] = {"honoured": [], "overridden": [], "effective": []}
    return DirectivesSerializer({**empty, **(report or {})}).data
