"""Which scheduler a cluster's work goes to: Slurm over a pooled SSH connection, or the local
backend of the demo. The services of every app ask for a backend here and never build one
themselves: the market holds reserved capacity with it, the bridge runs jobs with it."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings

from hpc.backends.local import LocalBackend, SandboxStatus, local_sandbox_status
from hpc.backends.slurm import SlurmBackend
from hpc.errors import BridgeError, HostKeyMismatch
from hpc.pool import default_pool
from hpc.types import Backend
from marketplace.models import Cluster
from marketplace.services.clusters import cluster_host_key_refused, ssh_settings_for


def backend_for(cluster: Cluster) -> Backend:
    """A backend for the cluster, over this process's pooled connection to it."""
    if cluster.backend == Cluster.Backend.LOCAL:
        return local_backend()
    connection = default_pool.connection(ssh_settings_for(cluster))
    return SlurmBackend(
        connection,
        command_timeout=settings.JOBS_COMMAND_TIMEOUT_SECONDS,
        record_grace=timedelta(seconds=settings.JOBS_RUN_RECORD_GRACE_SECONDS),
        submit_lanes=settings.JOBS_SUBMIT_LANES,
    )


def local_backend() -> LocalBackend:
    """The demo's scheduler, as this deployment's settings have it (production refuses it:
    `LocalBackendRefused`)."""
    return LocalBackend(
        settings.LOCAL_CLUSTER_ROOT,
        sandbox=settings.LOCAL_BACKEND_SANDBOX,
        bwrap=settings.LOCAL_BACKEND_BWRAP,
        allowed=settings.LOCAL_BACKEND_ALLOWED,
    )


def local_sandbox() -> SandboxStatus:
    """How this deployment runs local jobs: sandboxed with bubblewrap or not, and why not."""
    return local_sandbox_status(
        allowed=settings.LOCAL_BACKEND_ALLOWED,
        mode=settings.LOCAL_BACKEND_SANDBOX,
        bwrap=settings.LOCAL_BACKEND_BWRAP,
    )


def backend_failed(cluster: Cluster, error: BridgeError) -> None:
    """What a failed call to the cluster leaves behind: a connection that broke is forgotten, so
    that the next use opens a new one; a host that offered another key than the pinned one marks the
    cluster (docs/design.md, Scheduler bridge rules), so that nothing more is sent to it."""
    if isinstance(error, HostKeyMismatch):
        cluster_host_key_refused(cluster=cluster, error=error)
    if error.is_transient and cluster.backend == Cluster.Backend.SLURM:
        default_pool.discard(ssh_settings_for(cluster))
