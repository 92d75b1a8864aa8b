"""Reserved capacity: the scheduler's reservation behind every reserved allocation.

A reserved block is whole cores (or, for GPUs, the whole nodes that carry them) for the whole
window, held by the scheduler for the team's tenant alone (`hpc.slurm.reservations`). No
reserved allocation exists without its reservation (a check constraint says so), so a sale of
one runs in three steps, and no transaction is open while the scheduler is asked:

1. in a transaction: the sale's checks, the team's tenant lease, and a `PendingReservation`
   row naming the reservation, committed;
2. no transaction: the scheduler is asked to hold the block (`block_hold`); a refusal ends the
   sale before any money moves (409 `reservation_refused`, or a bid skipped at clearing);
3. in a transaction: the money and the allocation, which names the reservation and deletes
   the pending row. If it fails, the block is taken back (`block_release`).

A crash between 1 and 3 leaves a pending row and perhaps a reservation without an allocation:
`reservations_check`, run periodically per cluster, takes such a reservation back once the row
is older than `PendingReservation.STALE_AFTER`. It also finds reservations that drifted from
their allocations (deleted by hand, shrunk, given to other users) and repairs them, or tells
the owners and the team when the scheduler will not; and it removes the reservation of an
allocation that closed before its window ended.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from hpc.errors import BridgeError, ReservationRefused
from hpc.types import Backend, Reservation, ReservationSpec, platform_reservation_allocation
from hpc.types import platform_reservation_name as reservation_name_for
from marketplace import errors, notices
from marketplace.models import (
    Allocation,
    Capacity,
    Cluster,
    Offer,
    PendingReservation,
    Resource,
    TenantLease,
)
from marketplace.services.backends import backend_failed, backend_for

logger = logging.getLogger(__name__)

# How long after an allocation closed the check still looks for its reservation (removed at the
# close, or by the scheduler at the window's end, unless the cluster could not be reached).
CLOSED_LOOKBACK = timedelta(days=1)


@dataclass(frozen=True)
class HeldBlock:
    """A block the scheduler holds for a sale that is not written yet: the allocation-to-be's
    id, the reservation's name, and how many cores (or GPUs) it holds."""

    offer_id: int
    organization_id: int
    allocation_uuid: uuid.UUID
    name: str
    quantity: int


def block_spec(offer: Offer, *, name: str, quantity: int, tenant: str | None) -> ReservationSpec:
    """The reservation that holds `quantity` cores (or GPUs) of `offer` for its whole window,
    for the team's `tenant` (None on a cluster without tenants). A GPU block is the whole
    nodes that carry its GPUs: Slurm reserves no GPUs by themselves."""
    partition = offer.partition
    if offer.resource == Resource.GPU:
        cpus, nodes = 0, quantity // max(partition.gpus_per_node, 1)
    else:
        cpus, nodes = quantity, 0
    return ReservationSpec(
        name=name,
        partition=partition.name,
        start=offer.window_start,
        end=offer.window_end,
        users=(tenant,) if tenant else (),
        cpus=cpus,
        nodes=nodes,
    )


def block_pending(*, offer: Offer, organization_id: int, quantity: int) -> HeldBlock:
    """Step 1, in the caller's transaction: the pending row of a block about to be asked for,
    under a new allocation id. The caller has taken the team's lease."""
    allocation_uuid = uuid.uuid4()
    name = reservation_name_for(allocation_uuid)
    PendingReservation.objects.create(
        cluster_id=offer.cluster_id, organization_id=organization_id, name=name
    )
    return HeldBlock(offer.pk, organization_id, allocation_uuid, name, quantity)


def block_hold(offer: Offer, block: HeldBlock, *, tenant: str | None) -> Reservation:
    """Step 2, outside any transaction: asks the scheduler to hold the block. Raises
    `hpc.errors.ReservationRefused` with the scheduler's words when it will not (the pending
    row is then gone), or `errors.ClusterUnreachable` when it could not be asked (the block,
    if the scheduler made it after all, is taken back)."""
    spec = block_spec(offer, name=block.name, quantity=block.quantity, tenant=tenant)
    backend = backend_for(offer.cluster)
    try:
        return backend.reservation_create(spec)
    except ReservationRefused:
        _pending_forget([block.name])
        raise
    except (BridgeError, ValueError) as error:
        if isinstance(error, BridgeError):
            backend_failed(offer.cluster, error)
        block_release(offer.cluster, [block])
        raise errors.ClusterUnreachable(
            "The cluster's scheduler could not be asked to hold the cores; nothing was sold.",
            extra={"reason": str(error)[:500]},
        ) from error


def block_release(cluster: Cluster, blocks: Iterable[HeldBlock]) -> None:
    """Takes back blocks whose sale was not written: their reservations are deleted and their
    pending rows forgotten. A reservation the scheduler could not be asked to delete keeps its
    row, so that `reservations_check` takes it back later."""
    names = [block.name for block in blocks]
    if not names:
        return
    deleted = reservations_delete(cluster, names)
    _pending_forget(deleted)


def reservations_delete(cluster: Cluster, names: Iterable[str]) -> list[str]:
    """Deletes the platform's reservations `names` (one already gone is deleted); returns those
    deleted. A cluster that cannot be reached is logged, not raised: the periodic check tries
    again."""
    deleted = []
    backend = backend_for(cluster)
    for name in names:
        try:
            backend.reservation_delete(name)
        except BridgeError as error:
            backend_failed(cluster, error)
            logger.warning(
                "reservation %s on cluster %s not deleted: %s", name, cluster.uuid, error
            )
            continue
        deleted.append(name)
    return deleted


def _pending_forget(names: Iterable[str]) -> None:
    PendingReservation.objects.filter(name__in=list(names)).delete()


def block_refusal(error: ReservationRefused) -> errors.ReservationRefused:
    """A purchase's 409 for the scheduler's refusal, with its words."""
    return errors.ReservationRefused(extra={"reason": str(error)[:500]})


def tenant_name(lease: TenantLease | None) -> str | None:
    return lease.account.username if lease is not None else None


# --- Allocations that end before their window -------------------------------------------------


def allocation_reservation_remove(allocation: Allocation) -> None:
    """Removes the reservation of a reserved allocation that no longer needs it (closed,
    refunded). After the commit that ended the allocation; a failure is left to the periodic
    check, which removes reservations of closed allocations."""
    if not allocation.reservation:
        return
    reservations_delete(allocation.cluster, [allocation.reservation])


# --- The periodic check ------------------------------------------------------------------------


@dataclass(frozen=True)
class ReservationsReport:
    """What one check of a cluster found and did."""

    matched: int = 0
    repaired: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


def reserved_clusters() -> list[int]:
    """Clusters with an open reserved allocation, a pending reservation, or a reserved
    allocation closed in the last day (whose reservation may still be there)."""
    since = timezone.now() - CLOSED_LOOKBACK
    open_or_recent = Allocation.objects.filter(capacity=Capacity.RESERVED).exclude(
        closed_at__lt=since
    )
    ids = set(open_or_recent.values_list("cluster_id", flat=True))
    ids |= set(PendingReservation.objects.values_list("cluster_id", flat=True))
    return sorted(ids)


def reservations_check(*, cluster_id: int, now: datetime | None = None) -> ReservationsReport:
    """Compares the platform's reservations on the cluster with its reserved allocations and
    puts the cluster right: a missing or changed reservation of an open allocation is made or
    mended; one of no allocation (a sale that crashed, its pending row stale), of a closed
    allocation, or of an allocation whose window ended is removed. What cannot be mended is
    recorded on the allocation and told to the owners and the team, once per problem."""
    now = now or timezone.now()
    cluster = Cluster.objects.get(pk=cluster_id)
    backend = backend_for(cluster)
    try:
        held = {reservation.name: reservation for reservation in backend.reservations()}
    except BridgeError as error:
        backend_failed(cluster, error)
        return ReservationsReport(problems=(f"the scheduler could not be read: {error}",))
    allocations = {
        allocation.reservation: allocation
        for allocation in Allocation.objects.select_related("offer", "partition", "cluster")
        .filter(cluster=cluster, capacity=Capacity.RESERVED)
        .exclude(closed_at__lt=now - CLOSED_LOOKBACK)
    }
    pending = dict(
        PendingReservation.objects.filter(cluster=cluster).values_list("name", "created_at")
    )
    removable = _reservations_unwanted(held, allocations, pending, now)
    removed = reservations_delete(cluster, removable)
    _pending_forget(name for name in removed if name in pending)
    stale = [
        name
        for name, created_at in pending.items()
        if name not in held and now - created_at > PendingReservation.STALE_AFTER
    ]
    _pending_forget(stale)
    matched, repaired, problems = 0, [], []
    for name, allocation in allocations.items():
        if allocation.closed_at is not None or allocation.window_end <= now:
            continue
        outcome = _allocation_reservation_mend(backend, allocation, held.get(name), now)
        if outcome == "matched":
            matched += 1
        elif outcome == "repaired":
            repaired.append(name)
        else:
            problems.append(f"{name}: {outcome}")
    return ReservationsReport(matched, tuple(repaired), tuple(removed), tuple(problems))


def _reservations_unwanted(
    held: dict[str, Reservation],
    allocations: dict[str, Allocation],
    pending: dict[str, datetime],
    now: datetime,
) -> list[str]:
    """The platform's reservations on the cluster that nothing needs any more."""
    unwanted = []
    for name in held:
        if platform_reservation_allocation(name) is None:
            continue  # the platform's name space, but not an allocation's (a verification's)
        allocation = allocations.get(name)
        if allocation is not None:
            if allocation.closed_at is not None or allocation.window_end <= now:
                unwanted.append(name)
            continue
        created_at = pending.get(name)
        if created_at is None or now - created_at > PendingReservation.STALE_AFTER:
            unwanted.append(name)
    return unwanted


def _allocation_reservation_mend(
    backend: Backend, allocation: Allocation, found: Reservation | None, now: datetime
) -> str:
    """Makes `found` (the scheduler's reservation of an open allocation, None if gone) match
    the allocation; returns "matched", "repaired" or the problem that is left."""
    lease = (
        TenantLease.objects.select_related("account")
        .filter(
            cluster=allocation.cluster,
            organization_id=allocation.organization_id,
            status=TenantLease.Status.ACTIVE,
        )
        .first()
    )
    assert allocation.block is not None
    spec = block_spec(
        allocation.offer,
        name=allocation.reservation,
        quantity=allocation.block,
        tenant=tenant_name(lease),
    )
    if found is not None and _matches(found, spec):
        _problem_record(allocation, "", now)
        return "matched"
    try:
        if found is None:
            backend.reservation_create(spec)
        elif _same_size(found, spec):
            backend.reservation_update(spec)
        else:
            backend.reservation_delete(spec.name)
            backend.reservation_create(spec)
    except (BridgeError, ValueError) as error:
        problem = _drift_words(found, error)
        _problem_record(allocation, problem, now)
        return problem
    _problem_record(allocation, "", now)
    return "repaired"


def _matches(found: Reservation, spec: ReservationSpec) -> bool:
    return (
        _same_size(found, spec)
        and set(found.users) == set(spec.users)
        and found.end == spec.end.replace(microsecond=0)
    )


def _same_size(found: Reservation, spec: ReservationSpec) -> bool:
    if spec.nodes:
        return found.node_count == spec.nodes
    return found.cpus == spec.cpus


def _drift_words(found: Reservation | None, error: Exception) -> str:
    what = "was deleted on the cluster" if found is None else "was changed on the cluster"
    return f"The reservation holding this block {what} and could not be put back: {error}"[:500]


def _problem_record(allocation: Allocation, problem: str, now: datetime) -> None:
    """Records the check on the allocation; a new problem is told to the owners and the team
    once (a problem that stays is not told again)."""
    is_new = bool(problem) and problem != allocation.reservation_problem
    with transaction.atomic():
        Allocation.objects.filter(pk=allocation.pk).update(
            reservation_checked_at=now, reservation_problem=problem, updated_at=now
        )
        if is_new:
            notices.reservation_problem(allocation, problem)
    allocation.reservation_problem = problem
