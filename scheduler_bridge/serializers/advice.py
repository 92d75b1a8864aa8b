"""An ended job's right-sizing advice as the API shows it (`scheduler_bridge.sizing`)."""

from __future__ import annotations

from rest_framework import serializers

from billing.serializers import Money
from computeshare.output_serializers import OutputSerializer
from marketplace.serializers.fields import Units


class CoresAdviceSerializer(OutputSerializer):
    asked = serializers.IntegerField(help_text="Cores of one task: ntasks x cpus_per_task.")
    used = serializers.DecimalField(
        max_digits=12, decimal_places=2, help_text="Cores busy on average: CPU time / elapsed."
    )
    suggested_cpus_per_task = serializers.IntegerField(allow_null=True)
    suggested = serializers.IntegerField(allow_null=True, help_text="Cores of one task.")
    cost = Money(help_text="What the runs were charged.")
    cost_if_suggested = Money(
        allow_null=True, help_text="What they would have been charged with the suggested cores."
    )
    text = serializers.CharField()


class TimeAdviceSerializer(OutputSerializer):
    limit_minutes = serializers.IntegerField()
    longest_run_seconds = serializers.IntegerField(help_text="sacct's Elapsed of its longest run.")
    suggested_limit_minutes = serializers.IntegerField(allow_null=True)
    reserved_units = Units(help_text="What the job reserved of its allocation.")
    reserved_units_if_suggested = Units(allow_null=True)
    reservation_ratio = serializers.DecimalField(
        max_digits=12,
        decimal_places=1,
        allow_null=True,
        help_text="How many times less the suggested limit reserves (below 1: more).",
    )
    text = serializers.CharField()


class MemoryAdviceSerializer(OutputSerializer):
    asked_mib = serializers.IntegerField(
        allow_null=True, help_text="Per task: mem_per_cpu x cpus_per_task; null when not asked."
    )
    max_rss_mib = serializers.DecimalField(max_digits=14, decimal_places=2)
    suggested_mem_per_cpu = serializers.IntegerField(allow_null=True)
    text = serializers.CharField()


class SizingAdviceSerializer(OutputSerializer):
    cores = CoresAdviceSerializer()
    time = TimeAdviceSerializer()
    memory = MemoryAdviceSerializer(
        allow_null=True, help_text="Null when accounting recorded no MaxRSS."
    )
    currency = serializers.CharField()
    suggested_sizes = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="The sizes to ask for next time (`cpus_per_task`, `time_limit_minutes`, "
        "`mem_per_cpu`), only those the advice changes.",
    )
