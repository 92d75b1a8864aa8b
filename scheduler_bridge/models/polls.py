"""The poll's own record of each cluster."""

from __future__ import annotations

from django.db import models

from marketplace.models import Cluster


class ClusterPoll(models.Model):
    """The poll's own record per cluster: who holds it now (a lease, so that two workers never
    poll one cluster at once and a dead worker's lease runs out), and how the last one went."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="poll")
    lease_until = models.DateTimeField(null=True, blank=True)
    last_polled_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    commands_last_poll = models.PositiveIntegerField(default=0)
    # Until when the tenants' accounting was read for jobs the platform did not submit.
    tenant_runs_read_until = models.DateTimeField(null=True, blank=True)
    # What the last poll noticed without failing: states it does not know, runs of no lease.
    last_notice = models.CharField(max_length=500, blank=True)
    # When the poll last sampled the cluster's idle CPUs and GPUs (one sinfo).
    idle_sampled_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"poll of {self.cluster_id}"
