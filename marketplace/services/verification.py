"""Verifying a cluster: every capability the bridge will use, checked before the first job.

A cluster that verifies is one the bridge can work on: the pinned host key, the partitions,
squeue and sacct for every tenant, the pool of tenant accounts, sudo to each of them and to
nobody else, homes only their owners can read, SFTP as a tenant, `sbatch --test-only` as a
tenant, and, in managed mode, the Slurm settings that make limits hold at the cluster. Each
check is a step with its outcome and, when it fails, the reason in words an owner can act on;
the owner's page shows them as they run and the API returns them. Nothing is written unless
every step passed: the stored inventory and pool are always ones a whole verification read.

The checks are in `verification_checks`, one function a step, and the steps' bookkeeping in
`verification_steps`. The `nodes` step runs a tiny job as a tenant on each compute node it can
reach: the tenant must have the login node's uid there, the shared home, and see nobody else's
processes (`verification_nodes`).

The last two steps are the two kinds of capacity (docs/design.md, The product): `preemption` (the
owner's QOS preempt the market's, whose jobs are requeued: `hpc.slurm.preemption`) and
`reservations` (the service user may make Slurm reservations). Either may fail while the other
passes: the cluster is then online and sells the other kind only, and the failed step's reason is
what the owner reads on the cluster's card. Only when neither kind can be sold is the cluster
misconfigured.

Every verification runs in a Celery worker (`cluster_verification_start` queues it), never in a
web process: connecting can take as long as the connect timeout, and a web process waiting on
an owner's cluster serves nobody else meanwhile.

Whatever keeps the platform from reaching a cluster (a closed port, a port where something
other than sshd answers, no answer at all, an address the outbound rules deny), the owner reads
one and the same reason: telling those apart would make verification a port scanner of any
network the platform can reach. The real reason goes to the operators' log.

No transaction is open while SSH talks to the cluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from computeshare.errors import Throttled
from computeshare.queue import enqueue_after_commit
from computeshare.ratelimit import rate_limit_hit
from computeshare.states import status_move_all
from hpc.errors import BridgeError
from hpc.errors import HostKeyMismatch as BridgeHostKeyMismatch
from marketplace import errors, selectors
from marketplace.models import Cluster, ClusterVerification
from marketplace.services.capacity import cluster_reachability_record
from marketplace.services.clusters import (
    cluster_host_key_refused,
    cluster_inventory_store,
    cluster_status_mark,
    local_inventory,
    require_admin,
)
from marketplace.services.tenants import tenant_accounts_record
from marketplace.services.verification_checks import Findings, cluster_checks_run
from marketplace.services.verification_steps import CheckFailed, Steps, step_reason
from organizations.models import Membership


def cluster_verify(
    *,
    actor: Membership | None,
    cluster: Cluster,
    progress: Callable[[list[dict[str, str]]], None] | None = None,
) -> tuple[Cluster, list[dict[str, str]]]:
    """Checks every capability the bridge uses (see the module) and, when all pass, stores the
    partitions and the pool of tenant accounts and makes the cluster `online`. Returns the
    cluster and the steps. A different host key marks the cluster `host_key_mismatch`
    (`errors.HostKeyMismatch`); a cluster that cannot be reached is `unreachable`
    (`errors.ClusterUnreachable`); one that answers but fails a check is `misconfigured`
    (`errors.ClusterMisconfigured`, with the steps in `extra`)."""
    if actor is not None:
        require_admin(actor)
    if cluster.status == Cluster.Status.SUSPENDED:
        raise errors.ClusterSuspended()
    steps = Steps(on_change=progress)
    if cluster.backend == Cluster.Backend.LOCAL:
        with steps.check("partitions", "Read this machine's CPUs"):
            pass
        return _local_verification_store(cluster), steps.as_list()
    findings = Findings()
    try:
        cluster_checks_run(cluster, steps, findings)
    except BridgeHostKeyMismatch as error:
        detail = cluster_host_key_refused(cluster=cluster, error=error)
        raise errors.HostKeyMismatch(
            detail,
            extra={
                "offered_fingerprint": error.offered_fingerprint,
                "pinned_fingerprint": cluster.host_key_fingerprint,
                "steps": steps.as_list(),
            },
        ) from error
    except CheckFailed as error:
        cluster_reachability_record(cluster=cluster, is_reachable=True, source="verification")
        failed = steps.failed
        title = failed.title if failed else "A check"
        detail = f"{title}: {error}"
        cluster_status_mark(cluster, Cluster.Status.MISCONFIGURED, detail)
        raise errors.ClusterMisconfigured(
            f"The cluster answered, but a check failed. {detail}",
            extra={"failed_step": failed.key if failed else "", "steps": steps.as_list()},
        ) from error
    except (BridgeError, ValueError) as error:
        raise _bridge_failure(cluster, steps, error) from error
    assert findings.inventory is not None
    cluster_reachability_record(cluster=cluster, is_reachable=True, source="verification")
    return _verification_store(cluster, findings), steps.as_list()


def _bridge_failure(
    cluster: Cluster, steps: Steps, error: BridgeError | ValueError
) -> errors.ClusterUnreachable | errors.ClusterMisconfigured:
    """What a bridge error during the steps makes of the cluster, and the error to answer: a
    connection that could not be opened, or was lost or timed out midway, is the network's doing
    (`unreachable`); any other failure of a step is the cluster's setup (`misconfigured`)."""
    failed = steps.failed
    reason = step_reason(error)
    unreachable = (
        failed is None
        or failed.key == "connect"
        or (isinstance(error, BridgeError) and error.is_transient)
    )
    cluster_reachability_record(
        cluster=cluster, is_reachable=not unreachable, source="verification", detail=reason
    )
    extra: dict[str, Any] = {"reason": reason, "steps": steps.as_list()}
    if unreachable or failed is None:
        cluster_status_mark(cluster, Cluster.Status.UNREACHABLE, reason)
        return errors.ClusterUnreachable(
            f"The cluster could not be verified: {reason}", extra=extra
        )
    cluster_status_mark(cluster, Cluster.Status.MISCONFIGURED, f"{failed.title}: {reason}")
    return errors.ClusterMisconfigured(
        f"The cluster answered, but a check failed. {failed.title}: {reason}",
        extra={"failed_step": failed.key, **extra},
    )


CAPACITY_FIELDS = [
    "sells_preemptible",
    "preemptible_refusal",
    "market_qos",
    "owner_qos",
    "preemption_grace_seconds",
    "sells_reserved",
    "reserved_refusal",
]


@transaction.atomic
def _verification_store(cluster: Cluster, findings: Findings) -> Cluster:
    assert findings.inventory is not None
    cluster = cluster_inventory_store(cluster, findings.inventory)
    tenant_accounts_record(cluster=cluster, accounts=findings.pool)
    cluster.tenant_idle_account = findings.idle_account
    cluster.tracks_gpus = findings.tracks_gpus
    preemption = findings.preemption
    cluster.sells_preemptible = preemption is not None
    cluster.preemptible_refusal = findings.preemptible_refusal[:500]
    cluster.market_qos = findings.market_qos
    cluster.owner_qos = list(preemption.owner_qos) if preemption else []
    cluster.preemption_grace_seconds = preemption.grace_seconds if preemption else None
    cluster.sells_reserved = not findings.reserved_refusal
    cluster.reserved_refusal = findings.reserved_refusal[:500]
    cluster.save(
        update_fields=["tenant_idle_account", "tracks_gpus", *CAPACITY_FIELDS, "updated_at"]
    )
    if preemption is not None and cluster.account_mode == Cluster.AccountMode.MANAGED:
        # The teams' QOS made before preemption was set up (or before the owner QOS changed)
        # become preemptable now rather than at the next reconciliation.
        enqueue_after_commit(
            "marketplace.tasks.slurm_accounts_sync_task",
            cluster.pk,
            recovered_by="the periodic reconciliation of Slurm accounts syncs them",
        )
    return cluster


@transaction.atomic
def _local_verification_store(cluster: Cluster) -> Cluster:
    """The `local` backend sells both kinds: its jobs are the demo's, and its reservations
    the backend's own bookkeeping."""
    cluster = cluster_inventory_store(cluster, local_inventory())
    cluster.sells_preemptible = cluster.sells_reserved = True
    cluster.preemptible_refusal = cluster.reserved_refusal = cluster.market_qos = ""
    cluster.owner_qos = []
    cluster.preemption_grace_seconds = None
    cluster.save(update_fields=[*CAPACITY_FIELDS, "updated_at"])
    return cluster


# --- Verification from the web page, in a Celery task ------------------------------------------


@transaction.atomic
def cluster_verification_start(*, actor: Membership, cluster: Cluster) -> ClusterVerification:
    """Records a verification request and runs it in a worker after the commit. One at a time
    per cluster: a request while one runs returns the running one (and is not counted). An
    organization asks for at most `CLUSTER_VERIFY_RATE` new verifications (`Throttled`); a
    suspended cluster is not verified (`ClusterSuspended`)."""
    require_admin(actor)
    locked = Cluster.objects.select_for_update().filter(pk=cluster.pk).first()
    if locked is not None and locked.status == Cluster.Status.SUSPENDED:
        raise errors.ClusterSuspended()
    running = cluster.verifications.filter(
        status=ClusterVerification.Status.RUNNING,
        created_at__gte=timezone.now() - ClusterVerification.STALE_AFTER,
    ).first()
    if running is not None:
        return running
    wait = rate_limit_hit(f"cluster-verify:{actor.organization.uuid}", settings.CLUSTER_VERIFY_RATE)
    if wait is not None:
        raise Throttled(
            "Your organization has asked for as many cluster verifications as it may in this "
            f"period; try again in {wait} s.",
            retry_after_seconds=wait,
        )
    verification = ClusterVerification.objects.create(
        cluster=cluster, requested_by=actor.user, step="Waiting for a worker"
    )
    enqueue_after_commit(
        "marketplace.tasks.cluster_verification_run_task",
        verification.pk,
        recovered_by="it is stale after STALE_AFTER, and the owner may ask again",
    )
    return verification


def cluster_verification_run(*, verification_id: int) -> ClusterVerification | None:
    verification = (
        ClusterVerification.objects.select_related("cluster")
        .filter(pk=verification_id, status=ClusterVerification.Status.RUNNING)
        .first()
    )
    if verification is None:
        return None

    def progress(steps: list[dict[str, str]]) -> None:
        current = steps[-1]["title"] if steps else ""
        ClusterVerification.objects.filter(pk=verification.pk).update(
            step=current[:200], steps=steps, updated_at=timezone.now()
        )

    status, code, detail = ClusterVerification.Status.SUCCEEDED, "", ""
    try:
        cluster, _ = cluster_verify(actor=None, cluster=verification.cluster, progress=progress)
        count = cluster.partitions.filter(is_up=True).count()
        accounts = selectors.tenant_account_totals(cluster)["tenant_accounts"]
        detail = (
            f"Online: {count} partition{'' if count == 1 else 's'}, "
            f"{accounts} tenant account{'' if accounts == 1 else 's'}."
        )
    except (
        errors.HostKeyMismatch,
        errors.ClusterUnreachable,
        errors.ClusterMisconfigured,
        errors.ClusterSuspended,
    ) as error:
        status, code, detail = ClusterVerification.Status.FAILED, error.code, error.detail
    except BaseException:
        # A bug or the task's time limit: the row must not stay `running`, or the page would
        # wait on it. The error itself goes on to the worker's log.
        _verification_finish(
            verification,
            ClusterVerification.Status.FAILED,
            "internal_error",
            "The verification stopped on an internal error; try again.",
        )
        raise
    _verification_finish(verification, status, code, detail)
    verification.refresh_from_db()
    return verification


def _verification_finish(
    verification: ClusterVerification, status: str, code: str, detail: str
) -> None:
    status_move_all(
        ClusterVerification.objects.filter(pk=verification.pk),
        status,
        error_code=code,
        detail=detail[:1000],
        step="Done",
        finished_at=timezone.now(),
        updated_at=timezone.now(),
    )
