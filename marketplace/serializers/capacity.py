"""Output shapes of a partition's calendar and idle time and a cluster's track record, and
the filters of those reads (docs/api.md)."""

from rest_framework import serializers

from computeshare.moments import BoundedDateTimeField
from marketplace.models import Resource


class CalendarFilterSerializer(serializers.Serializer):
    resource = serializers.ChoiceField(choices=Resource.choices, required=False, default="cpu")
    start = BoundedDateTimeField(
        required=False,
        help_text="The first hour (rounded down to the hour), from 2000 to 2999; now by default.",
    )
    hours = serializers.IntegerField(
        required=False, default=168, min_value=1, max_value=24 * 35, help_text="1 to 840."
    )


class CalendarHourSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    sold = serializers.CharField(help_text="Units the partition's offers take in this hour.")
    free = serializers.CharField(help_text="Units of this hour no offer takes yet.")


class CalendarSerializer(serializers.Serializer):
    cluster = serializers.UUIDField()
    partition = serializers.CharField()
    resource = serializers.ChoiceField(choices=Resource.choices)
    capacity_per_hour = serializers.IntegerField(
        help_text="What the partition has in each hour: its CPUs (core-hours) or GPUs."
    )
    hours = CalendarHourSerializer(many=True)


TRACK_RECORD_HOW = (
    "Counted by the platform over the last `days` days from what it saw itself; the owner types "
    "nothing in. `run_ends`: runs of teams' jobs that Slurm's accounting ended as NODE_FAIL, "
    "PREEMPTED or BOOT_FAIL (not charged). `unreachable_seconds`: from the first poll or "
    "verification that could not reach the cluster over SSH (or whose Slurm did not answer) to "
    "the next that did; `unreachable_while_sold_seconds`: the part of it inside the window of "
    "hours sold on the cluster. `hardware_changes`: verifications that found a partition's "
    "nodes, CPUs or GPUs other than the verification before, or the partition gone."
)


class TrackRecordSerializer(serializers.Serializer):
    cluster = serializers.UUIDField()
    days = serializers.IntegerField()
    since = serializers.DateTimeField()
    runs_ended_by_owner = serializers.IntegerField()
    run_ends = serializers.DictField(
        child=serializers.IntegerField(), help_text="Slurm's end state: how many runs."
    )
    outages = serializers.IntegerField()
    unreachable_seconds = serializers.IntegerField()
    unreachable_while_sold_seconds = serializers.IntegerField()
    hardware_changes = serializers.IntegerField()
    how_computed = serializers.CharField()


class IdleHourSerializer(serializers.Serializer):
    weekday = serializers.IntegerField(help_text="0 is Monday.")
    hour = serializers.IntegerField(help_text="UTC.")
    samples = serializers.IntegerField()
    mean_idle = serializers.CharField(help_text="Mean idle CPUs (or GPUs) in this hour.")
    share = serializers.CharField(help_text="Mean share of the partition idle, 0 to 1.")


class SuggestionSerializer(serializers.Serializer):
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    per_hour = serializers.IntegerField()
    quantity = serializers.IntegerField()
    auction_closes_at = serializers.DateTimeField()
    reserve_price = serializers.CharField(
        allow_null=True, help_text="Null when no auction has cleared on the market yet."
    )
    price_basis = serializers.CharField()


class IdleTimeSerializer(serializers.Serializer):
    cluster = serializers.UUIDField()
    partition = serializers.CharField()
    resource = serializers.ChoiceField(choices=Resource.choices)
    days = serializers.IntegerField()
    hours = IdleHourSerializer(many=True, help_text="Only the hours of the week with samples.")
    suggestion = SuggestionSerializer(allow_null=True)


class IdleFilterSerializer(serializers.Serializer):
    resource = serializers.ChoiceField(choices=Resource.choices, required=False, default="cpu")
