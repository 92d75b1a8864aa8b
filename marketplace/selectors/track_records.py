"""The owners' track record: computed from what the platform saw, never typed in."""

import dataclasses
import datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from marketplace.models import Allocation, Cluster, ClusterOutage, HardwareChange, OwnerSideRunEnd


@dataclasses.dataclass(frozen=True)
class TrackRecord:
    """What a cluster's owners' side did over the last `days` days (since `since`): runs of
    teams' jobs it ended, by Slurm's state; the time the platform could not reach the cluster,
    and how much of it fell while some team had hours bought there; hardware that changed
    between verifications."""

    cluster_id: int
    since: datetime.datetime
    days: int
    run_ends: dict[str, int]
    outages: int
    unreachable_seconds: int
    unreachable_while_sold_seconds: int
    hardware_changes: int

    @property
    def runs_ended_by_owner(self) -> int:
        return sum(self.run_ends.values())

    @property
    def is_clean(self) -> bool:
        return not (self.runs_ended_by_owner or self.outages or self.hardware_changes)

    @property
    def run_ends_in_words(self) -> list[tuple[str, int]]:
        """The runs it ended by how, in words rather than Slurm's state names."""
        return [
            (RUN_ENDS_IN_WORDS.get(state, state), count) for state, count in self.run_ends.items()
        ]


# How each state the owner's side ends a run in reads on the pages.
RUN_ENDS_IN_WORDS = {
    "NODE_FAIL": "a node failed",
    "BOOT_FAIL": "a node did not boot",
    "PREEMPTED": "preempted",
}


def _overlap_seconds(
    start: datetime.datetime, end: datetime.datetime, windows: list[tuple[Any, Any]]
) -> int:
    """Seconds of [start, end) covered by the union of `windows`."""
    covered = 0.0
    cursor = start
    for window_start, window_end in sorted(windows):
        lower, upper = max(window_start, cursor), min(window_end, end)
        if upper > lower:
            covered += (upper - lower).total_seconds()
            cursor = upper
    return int(covered)


def track_records(
    cluster_ids: set[int], now: datetime.datetime | None = None
) -> dict[int, TrackRecord]:
    """The track record of each cluster, in a few queries however many clusters (the offers
    page shows one per offer)."""
    now = now or timezone.now()
    days = settings.TRACK_RECORD_DAYS
    since = now - datetime.timedelta(days=days)
    if not cluster_ids:
        return {}
    run_ends = _run_ends_by_cluster(cluster_ids, since)
    changes = _hardware_changes_by_cluster(cluster_ids, since)
    outages = _outages_since(cluster_ids, since, now)
    sold = _sold_windows_during(outages)
    unreachable = dict.fromkeys(cluster_ids, 0)
    while_sold = dict.fromkeys(cluster_ids, 0)
    counted = dict.fromkeys(cluster_ids, 0)
    for cluster_id, start, end in outages:
        counted[cluster_id] += 1
        unreachable[cluster_id] += int((end - start).total_seconds())
        while_sold[cluster_id] += _overlap_seconds(start, end, sold.get(cluster_id, []))
    return {
        cluster_id: TrackRecord(
            cluster_id=cluster_id,
            since=since,
            days=days,
            run_ends=dict(sorted(run_ends.get(cluster_id, {}).items())),
            outages=counted[cluster_id],
            unreachable_seconds=unreachable[cluster_id],
            unreachable_while_sold_seconds=while_sold[cluster_id],
            hardware_changes=changes.get(cluster_id, 0),
        )
        for cluster_id in cluster_ids
    }


def _run_ends_by_cluster(
    cluster_ids: set[int], since: datetime.datetime
) -> dict[int, dict[str, int]]:
    """How many runs the owner's side of each cluster ended since `since`, by Slurm's state."""
    run_ends: dict[int, dict[str, int]] = {}
    for cluster_id, state, count in (
        OwnerSideRunEnd.objects.filter(cluster_id__in=cluster_ids, ended_at__gte=since)
        .values("cluster_id", "scheduler_state")
        .annotate(count=Count("pk"))
        .values_list("cluster_id", "scheduler_state", "count")
        .order_by()
    ):
        run_ends.setdefault(cluster_id, {})[state] = count
    return run_ends


def _hardware_changes_by_cluster(cluster_ids: set[int], since: datetime.datetime) -> dict[int, int]:
    return dict(
        HardwareChange.objects.filter(cluster_id__in=cluster_ids, created_at__gte=since)
        .values("cluster_id")
        .annotate(count=Count("pk"))
        .values_list("cluster_id", "count")
        .order_by()
    )


def _outages_since(
    cluster_ids: set[int], since: datetime.datetime, now: datetime.datetime
) -> list[tuple[int, datetime.datetime, datetime.datetime]]:
    """Each cluster's outages as (cluster id, start, end), cut to the time since `since`; one
    still going ends `now`."""
    return [
        (cluster_id, max(started, since), ended or now)
        for cluster_id, started, ended in ClusterOutage.objects.filter(
            Q(ended_at__isnull=True) | Q(ended_at__gt=since), cluster_id__in=cluster_ids
        ).values_list("cluster_id", "started_at", "ended_at")
    ]


def _sold_windows_during(
    outages: list[tuple[int, datetime.datetime, datetime.datetime]],
) -> dict[int, list[tuple[Any, Any]]]:
    """The windows of the allocations on each cluster that overlap one of its outages."""
    sold: dict[int, list[tuple[Any, Any]]] = {}
    if not outages:
        return sold
    overlapping = Q()
    for cluster_id, start, end in outages:
        overlapping |= Q(cluster_id=cluster_id, window_start__lt=end, window_end__gt=start)
    for cluster_id, window_start, window_end in Allocation.objects.filter(overlapping).values_list(
        "cluster_id", "window_start", "window_end"
    ):
        sold.setdefault(cluster_id, []).append((window_start, window_end))
    return sold


def track_record(cluster: Cluster, now: datetime.datetime | None = None) -> TrackRecord:
    return track_records({cluster.pk}, now)[cluster.pk]


def hardware_change_list(cluster: Cluster, limit: int = 10) -> list[HardwareChange]:
    return list(HardwareChange.objects.filter(cluster=cluster).order_by("-created_at")[:limit])


def outage_list(cluster: Cluster, limit: int = 10) -> list[ClusterOutage]:
    return list(ClusterOutage.objects.filter(cluster=cluster).order_by("-started_at")[:limit])
