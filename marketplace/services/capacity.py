"""What the platform records about a cluster as it works with it, for the owners' idle time and
track record: idle samples (one sinfo per cluster with the poll), times the cluster could not be
reached, hardware that changed between verifications, runs the owner's side ended. Each is
written by the part of the platform that saw it (the poll, verification, settlement); nothing
here takes the owner's word for anything."""

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Least
from django.utils import timezone

from hpc.slurm.inventory import PartitionIdle, PartitionInfo
from marketplace.capacity import hour_floor
from marketplace.models import (
    Cluster,
    ClusterOutage,
    HardwareChange,
    OwnerSideRunEnd,
    Partition,
    PartitionIdleHour,
)

# --- Idle time -----------------------------------------------------------------------------------


@transaction.atomic
def partition_idle_record(
    *, cluster: Cluster, idle: Iterable[PartitionIdle], at: datetime | None = None
) -> int:
    """Adds one sample of each partition's idle CPUs and GPUs to the partition's row for the
    hour (made by the hour's first sample). Partitions verification does not know are left out.
    When an hour's row is made, the partition's rows older than `IDLE_HISTORY_DAYS` go: the
    history stays a few weeks of hours. Returns how many partitions were sampled."""
    at = at or timezone.now()
    hour = hour_floor(at)
    known = {partition.name: partition for partition in cluster.partitions.all()}
    sampled = 0
    for figures in idle:
        partition = known.get(figures.name)
        if partition is None:
            continue
        sampled += 1
        if _idle_add(partition, hour, figures):
            continue
        try:
            with transaction.atomic():
                PartitionIdleHour.objects.create(
                    partition=partition,
                    hour=hour,
                    samples=1,
                    idle_cpus=figures.idle_cpus,
                    idle_gpus=figures.idle_gpus,
                    min_idle_cpus=figures.idle_cpus,
                    min_idle_gpus=figures.idle_gpus,
                    cpus=figures.cpus,
                    gpus=figures.gpus,
                )
        except IntegrityError:
            # Another sample made the hour's row first: add to it.
            _idle_add(partition, hour, figures)
            continue
        PartitionIdleHour.objects.filter(
            partition=partition,
            hour__lt=hour - timedelta(days=settings.IDLE_HISTORY_DAYS),
        ).delete()
    return sampled


def _idle_add(partition: Partition, hour: datetime, figures: PartitionIdle) -> bool:
    return bool(
        PartitionIdleHour.objects.filter(partition=partition, hour=hour).update(
            samples=F("samples") + 1,
            idle_cpus=F("idle_cpus") + figures.idle_cpus,
            idle_gpus=F("idle_gpus") + figures.idle_gpus,
            min_idle_cpus=Least(F("min_idle_cpus"), Value(figures.idle_cpus)),
            min_idle_gpus=Least(F("min_idle_gpus"), Value(figures.idle_gpus)),
            cpus=figures.cpus,
            gpus=figures.gpus,
        )
    )


# --- Reachability --------------------------------------------------------------------------------


def cluster_reachability_record(
    *, cluster: Cluster, is_reachable: bool, source: str, detail: str = ""
) -> None:
    """Opens an outage at the first failure to reach the cluster (`source`: `poll` or
    `verification`) and closes it at the next success; at most one is open per cluster."""
    now = timezone.now()
    if is_reachable:
        ClusterOutage.objects.filter(cluster=cluster, ended_at__isnull=True).update(
            ended_at=now, updated_at=now
        )
        return
    if ClusterOutage.objects.filter(cluster=cluster, ended_at__isnull=True).exists():
        return
    try:
        with transaction.atomic():
            ClusterOutage.objects.create(
                cluster=cluster, started_at=now, source=source, detail=detail[:500]
            )
    except IntegrityError:
        pass  # another worker opened it at the same moment


# --- Hardware ------------------------------------------------------------------------------------


def _figures(nodes: int, cpus: int, gpus: int) -> dict[str, int]:
    return {"nodes": nodes, "cpus": cpus, "gpus": gpus}


def hardware_changes_record(
    *, cluster: Cluster, before: Mapping[str, Partition], after: Iterable[PartitionInfo]
) -> list[HardwareChange]:
    """Records each partition a verification found with other nodes, CPUs or GPUs than the
    one before it, and each that is gone. A partition seen for the first time is no change."""
    found = {info.name: info for info in after}
    changes = []
    for name, partition in sorted(before.items()):
        was = _figures(partition.nodes, partition.cpus, partition.gpus)
        info = found.get(name)
        now = {} if info is None else _figures(info.nodes, info.cpus, info.gpus)
        if now == was or (info is None and not partition.is_up):
            continue
        changes.append(HardwareChange(cluster=cluster, partition=name, before=was, after=now))
    return HardwareChange.objects.bulk_create(changes)


# --- Runs ----------------------------------------------------------------------------------------


def owner_side_run_end_record(
    *,
    cluster: Cluster,
    raw_job_id: str,
    submit_time: datetime,
    scheduler_state: str,
    ended_at: datetime,
) -> None:
    """Counts a run the owner's side ended, once per run (keyed like the run's charge)."""
    OwnerSideRunEnd.objects.bulk_create(
        [
            OwnerSideRunEnd(
                cluster=cluster,
                raw_job_id=raw_job_id,
                submit_time=submit_time,
                scheduler_state=(scheduler_state.split() or ["UNKNOWN"])[0][:32],
                ended_at=ended_at,
            )
        ],
        ignore_conflicts=True,
    )
