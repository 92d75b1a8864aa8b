"""Idle time and reachability, seen by the poll: every `IDLE_SAMPLE_SECONDS`, one `sinfo` per
online Slurm cluster reads what each partition has idle (the market keeps it per hour, for the
owner's idle pattern and suggested offers); and every poll that reached the cluster, or failed
to, tells the market, which keeps the times it could not be reached for the track record."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from hpc.errors import (
    BridgeError,
    ClusterUnreachable,
    RemoteCommandTimeout,
    SchedulerUnavailable,
)
from hpc.pool import default_pool
from hpc.slurm.inventory import idle_read
from marketplace import services as market
from marketplace.models import Cluster
from scheduler_bridge.models import ClusterPoll
from scheduler_bridge.selectors.jobs import is_idle_sampling_on

logger = logging.getLogger(__name__)


def cluster_idle_sample(*, cluster: Cluster, now: datetime | None = None) -> int | None:
    """One sinfo on the cluster, recorded per partition and hour: how many partitions were
    sampled, or None when no sample was due (or sampling is off). Raises the bridge's error
    when the cluster did not answer; the poll reports it."""
    now = now or timezone.now()
    if (
        not is_idle_sampling_on()
        or cluster.backend != Cluster.Backend.SLURM
        or cluster.status != Cluster.Status.ONLINE
    ):
        return None
    due = timezone.now() - timedelta(seconds=settings.IDLE_SAMPLE_SECONDS)
    sampled_at = (
        ClusterPoll.objects.filter(cluster=cluster)
        .values_list("idle_sampled_at", flat=True)
        .first()
    )
    if sampled_at is not None and sampled_at > due:
        return None
    # Set first: a cluster whose sinfo fails is asked again at the next interval, not at every
    # poll.
    ClusterPoll.objects.update_or_create(cluster=cluster, defaults={"idle_sampled_at": now})
    connection = default_pool.connection(market.ssh_settings_for(cluster))
    idle = idle_read(connection, timeout=settings.JOBS_COMMAND_TIMEOUT_SECONDS)
    return market.partition_idle_record(cluster=cluster, idle=idle, at=now)


def is_unreachable(error: BridgeError) -> bool:
    """Whether a failed call means the cluster could not be reached or its Slurm did not answer
    (what the track record counts), rather than a command refused or misread."""
    return isinstance(error, ClusterUnreachable | RemoteCommandTimeout | SchedulerUnavailable)


def cluster_reachability_seen(*, cluster: Cluster, error: BridgeError | None) -> None:
    """Tells the market what a poll that talked to a Slurm cluster found: it answered (`error`
    None), or it could not be reached."""
    if cluster.backend != Cluster.Backend.SLURM:
        return
    if error is None:
        market.cluster_reachability_record(cluster=cluster, is_reachable=True, source="poll")
    elif is_unreachable(error):
        market.cluster_reachability_record(
            cluster=cluster, is_reachable=False, source="poll", detail=str(error)
        )
