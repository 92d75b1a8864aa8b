"""Idle time and the track record against the real Slurm test cluster: the poll samples idle
CPUs with one sinfo per interval and the market keeps it per partition and hour; the offer
suggested from those samples is sized from them; a poll that cannot reach the cluster opens an
outage and the next that can closes it, counted while hours were sold; a verification that
finds other hardware than the one before records the change. What the samples must say is read
from the cluster itself with `scontrol`, never copied from the parser."""

import socket
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from hpc.ssh import SSHConnection
from marketplace import capacity, selectors, services
from marketplace.models import ClusterOutage, HardwareChange, Partition, PartitionIdleHour
from scheduler_bridge.models import ClusterPoll
from scheduler_bridge.services import cluster_poll
from scheduler_bridge.services.idle import cluster_idle_sample
from tests.conftest import client_for
from tests.factories import MembershipFactory, allocation_bought

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]

HOUR = timedelta(hours=1)


def idle_cpus_by_scontrol(testcluster) -> tuple[int, int]:
    """(total, idle) CPUs of the test partition's node as slurmctld reports it."""
    with SSHConnection(testcluster.ssh_settings()) as connection:
        line = connection.run(["scontrol", "--oneliner", "show", "node"], timeout=30).stdout
    fields = dict(token.partition("=")[::2] for token in line.split())
    total, allocated = int(fields["CPUTot"]), int(fields["CPUAlloc"])
    state = fields["State"].split("+")[0]
    return total, (total - allocated if state in ("IDLE", "MIXED") else 0)


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def sample_due(cluster) -> None:
    ClusterPoll.objects.filter(cluster=cluster).update(idle_sampled_at=None)


def test_the_poll_samples_idle_time_once_per_interval_and_an_idle_window_is_suggested(
    on_testcluster, testcluster, settings
):
    settings.IDLE_SAMPLE_SECONDS = 300
    cluster = on_testcluster(pool="fixed")
    partition = Partition.objects.get(cluster=cluster)

    first = cluster_poll(cluster_id=cluster.pk)
    again = cluster_poll(cluster_id=cluster.pk)

    total, idle = idle_cpus_by_scontrol(testcluster)
    assert (first.error, first.backend_calls, again.backend_calls) == ("", ["idle"], [])
    [row] = PartitionIdleHour.objects.filter(partition=partition)
    assert (row.hour, row.samples, row.cpus, row.idle_cpus, row.min_idle_cpus) == (
        capacity.hour_floor(timezone.now()),
        1,
        total,
        idle,
        idle,
    )

    # Samples as the poll took them in four hours a week ago, three to seven hours on from now
    # (each a real sinfo): the coming week's same hours are suggested, sized from them.
    start = capacity.hour_floor(timezone.now()) + 3 * HOUR
    for index in range(4):
        sample_due(cluster)
        assert (
            cluster_idle_sample(
                cluster=cluster, now=start + index * HOUR - timedelta(days=7, minutes=-5)
            )
            == 1
        )
    suggestion = selectors.offer_suggestion(partition, "cpu")

    sampled = list(
        PartitionIdleHour.objects.filter(partition=partition, hour__lt=start - timedelta(days=6))
        .order_by("hour")
        .values_list("idle_cpus", flat=True)
    )
    assert len(sampled) == 4
    if min(sampled) * 4 < total:  # the node was busy (a quarter idle at least is needed)
        assert suggestion is None or suggestion.window_start != start
        return
    assert suggestion is not None
    assert (suggestion.window_start, suggestion.window_end) == (start, start + 4 * HOUR)
    assert (suggestion.per_hour, suggestion.quantity) == (min(sampled), 4 * min(sampled))
    owner = MembershipFactory(organization=cluster.organization, role="admin")
    offer = services.offer_create(
        actor=owner,
        cluster=cluster,
        partition=partition.name,
        resource="cpu",
        quantity=suggestion.quantity,
        window_start=suggestion.window_start,
        window_end=suggestion.window_end,
        auction_closes_at=suggestion.auction_closes_at,
        reserve_price="0.50",
    )
    hours = selectors.partition_calendar(partition, "cpu", offer.window_start, offer.window_end)
    assert [hour.sold for hour in hours] == [min(sampled)] * 4


def test_the_track_record_counts_what_the_poll_and_verification_saw(
    on_testcluster, testcluster, settings
):
    settings.IDLE_SAMPLE_SECONDS = 300
    cluster = on_testcluster(pool="fixed")
    partition = Partition.objects.get(cluster=cluster)
    # A team holds hours on the cluster now.
    allocation_bought(partition=partition, quantity=10, price="1.00")
    port = cluster.ssh_port

    cluster.__class__.objects.filter(pk=cluster.pk).update(ssh_port=free_loopback_port())
    refused = cluster_poll(cluster_id=cluster.pk)
    time.sleep(1.2)
    cluster.__class__.objects.filter(pk=cluster.pk).update(ssh_port=port)
    sample_due(cluster)
    answered = cluster_poll(cluster_id=cluster.pk)

    assert refused.error and not answered.error
    [outage] = ClusterOutage.objects.filter(cluster=cluster)
    assert (outage.source, outage.ended_at is not None) == ("poll", True)
    # The previous verification had read 4 CPUs where the real node has its own.
    total, _ = idle_cpus_by_scontrol(testcluster)
    Partition.objects.filter(pk=partition.pk).update(cpus=total + 2)
    cluster.refresh_from_db()
    services.cluster_verify(actor=None, cluster=cluster)

    [change] = HardwareChange.objects.filter(cluster=cluster)
    assert (change.partition, change.before, change.after) == (
        partition.name,
        {"nodes": 1, "cpus": total + 2, "gpus": 0},
        {"nodes": 1, "cpus": total, "gpus": 0},
    )
    record = selectors.track_record(cluster)
    down = int((outage.ended_at - outage.started_at).total_seconds())
    assert down >= 1
    assert (
        record.run_ends,
        record.outages,
        record.unreachable_seconds,
        record.unreachable_while_sold_seconds,
        record.hardware_changes,
        record.is_clean,
    ) == ({}, 1, down, down, 1, False)
    viewer = MembershipFactory().user
    answer = client_for(viewer).get(f"/api/v1/clusters/{cluster.uuid}/track-record/").json()
    assert {
        key: answer[key]
        for key in (
            "runs_ended_by_owner",
            "outages",
            "unreachable_while_sold_seconds",
            "hardware_changes",
        )
    } == {
        "runs_ended_by_owner": 0,
        "outages": 1,
        "unreachable_while_sold_seconds": down,
        "hardware_changes": 1,
    }
