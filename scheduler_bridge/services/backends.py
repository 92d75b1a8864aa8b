"""Which scheduler a cluster's jobs go to: Slurm over a pooled SSH connection, or the local
backend of the demo. The services ask for a backend here and never build one themselves."""

from __future__ import annotations

from django.conf import settings

from marketplace.models import Cluster
from marketplace.services import cluster_host_key_refused, ssh_settings_for
from scheduler_bridge.backends.local import LocalBackend
from scheduler_bridge.backends.slurm import SlurmBackend
from scheduler_bridge.backends.types import Backend
from scheduler_bridge.slurm.errors import BridgeError, HostKeyMismatch
from scheduler_bridge.slurm.pool import default_pool


def backend_for(cluster: Cluster) -> Backend:
    """A backend for the cluster, over this process's pooled connection to it."""
    if cluster.backend == Cluster.Backend.LOCAL:
        return LocalBackend(settings.LOCAL_CLUSTER_ROOT)
    connection = default_pool.connection(ssh_settings_for(cluster))
    return SlurmBackend(connection, command_timeout=settings.JOBS_COMMAND_TIMEOUT_SECONDS)


def backend_failed(cluster: Cluster, error: BridgeError) -> None:
    """What a failed call to the cluster leaves behind: a connection that broke is forgotten,
    so that the next use opens a new one; a host that offered another key than the pinned one
    marks the cluster (bridge rule 1), so that nothing more is sent to it."""
    if isinstance(error, HostKeyMismatch):
        cluster_host_key_refused(cluster=cluster, error=error)
    if error.is_transient and cluster.backend == Cluster.Backend.SLURM:
        default_pool.discard(ssh_settings_for(cluster))
