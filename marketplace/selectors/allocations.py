"""Allocations: only the holding organization's members see them."""

import datetime
import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from computeshare.errors import NotFound
from computeshare.ids import id_prefix_q
from computeshare.models import User
from computeshare.prepared import PreparedRead
from marketplace.models import Allocation
from organizations.models import Membership, Organization


def allocation_list_for_user(
    user: User,
    *,
    organization: Organization | None = None,
    organization_uuid: uuid.UUID | None = None,
    cluster_uuid: uuid.UUID | None = None,
    status: str | None = None,
    id_prefix: str | None = None,
) -> QuerySet[Allocation]:
    """The allocations of the user's organizations, the latest window first; narrowed to an
    organization (by object or by id), a cluster, a window's status or the start of the
    allocation's id when given."""
    allocations = Allocation.objects.filter(
        organization__in=Membership.objects.filter(user=user).values("organization")
    )
    if organization is not None:
        allocations = allocations.filter(organization=organization)
    if organization_uuid is not None:
        allocations = allocations.filter(organization__uuid=organization_uuid)
    if cluster_uuid is not None:
        allocations = allocations.filter(cluster__uuid=cluster_uuid)
    if status is not None:
        allocations = allocations_with_status(allocations, status)
    if id_prefix:
        allocations = allocations.filter(id_prefix_q(id_prefix))
    return allocations.select_related(
        "organization", "offer", "cluster", "partition", "hold"
    ).order_by("-window_start", "-id")


def allocation_get_for_user(user: User, allocation_uuid: Any) -> Allocation:
    try:
        return allocation_list_for_user(user).get(uuid=allocation_uuid)
    except (Allocation.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such allocation.") from error


# The member's row, read beside the allocation it may submit to (`allocation_get_for_member`).
_MEMBER_COLUMNS = [field.attname for field in Membership._meta.concrete_fields]
# What a submission never reads of the cluster: how to reach and verify it, what it sells (the
# worker reads the cluster afresh to submit).
_CLUSTER_NOT_FOR_SUBMISSION = [
    f"cluster__{name}"
    for name in (
        "created_at",
        "updated_at",
        "status_detail",
        "ssh_host",
        "ssh_port",
        "ssh_user",
        "ssh_host_key",
        "ssh_private_key",
        "host_key_fingerprint",
        "slurm_version",
        "verified_at",
        "tenant_group",
        "sftp_server",
        "tracks_gpus",
        "sells_preemptible",
        "preemptible_refusal",
        "owner_qos",
        "sells_reserved",
        "reserved_refusal",
    )
]


def _allocation_with_member(allocation_uuid: Any, user_id: Any) -> QuerySet[Allocation]:
    return (
        Allocation.objects.filter(uuid=allocation_uuid, organization__memberships__user_id=user_id)
        .annotate(
            **{
                f"member_{column}": F(f"organization__memberships__{column}")
                for column in _MEMBER_COLUMNS
            }
        )
        .select_related("organization", "cluster", "partition")
        .defer(*_CLUSTER_NOT_FOR_SUBMISSION)
        .order_by()  # one row: not the model's ordering (`.get()` dropped it too)
    )


# Compiled once: a job's submission asks this on every POST (computeshare/prepared.py).
_allocation_with_member_read = PreparedRead(
    _allocation_with_member,
    parameters={
        "allocation_uuid": Allocation._meta.get_field("uuid"),
        "user_id": Membership._meta.get_field("user"),
    },
)


def allocation_get_for_member(user: User, allocation_uuid: Any) -> tuple[Allocation, Membership]:
    """The allocation `allocation_get_for_user` finds (NotFound otherwise), with what a job's
    submission reads of it (its organization, cluster and partition; not the cluster's
    connection, verification or sales) and the user's membership of its organization, in one
    query: a job's submission asks this on every POST. The membership is the row a join on
    the team's members finds, the one the visibility rests on."""
    try:
        found = _allocation_with_member_read(allocation_uuid=allocation_uuid, user_id=user.pk)
    except ValidationError as error:  # not a uuid
        raise NotFound("No such allocation.") from error
    if len(found) != 1:  # a member has one membership of a team (a unique constraint)
        raise NotFound("No such allocation.")
    allocation = found[0]
    member = Membership.from_db(
        allocation._state.db,
        _MEMBER_COLUMNS,
        [getattr(allocation, f"member_{column}") for column in _MEMBER_COLUMNS],
    )
    member.organization = allocation.organization
    member.user = user
    return allocation, member


def allocation_list_open(organization: Organization) -> QuerySet[Allocation]:
    """The organization's allocations whose window has not ended (upcoming and active), the
    soonest to start first, with what a listing shows of them."""
    return (
        Allocation.objects.filter(
            organization=organization, closed_at__isnull=True, window_end__gt=timezone.now()
        )
        .select_related("cluster", "partition")
        .defer("cluster__ssh_private_key")
        .order_by("window_start", "id")
    )


def allocations_with_status(allocations: QuerySet[Allocation], status: str) -> QuerySet[Allocation]:
    """Filters by the window's status as `Allocation.status_at` computes it, in SQL."""
    now = timezone.now()
    if status == Allocation.Status.CLOSED:
        return allocations.filter(Q(closed_at__isnull=False) | Q(window_end__lte=now))
    open_now = allocations.filter(closed_at__isnull=True, window_end__gt=now)
    if status == Allocation.Status.ACTIVE:
        return open_now.filter(window_start__lte=now)
    return open_now.filter(window_start__gt=now)


def allocation_resubmit_target(
    user: User, allocation: Allocation, *, organization_id: int
) -> Allocation | None:
    """Where a copy of a job on `allocation` can run now: that allocation while its window is
    open, else the organization's active allocation of the same partition that ends last."""
    active = allocations_with_status(
        allocation_list_for_user(user).filter(
            organization_id=organization_id, partition_id=allocation.partition_id
        ),
        Allocation.Status.ACTIVE,
    )
    return active.filter(pk=allocation.pk).first() or active.order_by("-window_end").first()


def allocations_due(now: datetime.datetime | None = None) -> list[int]:
    """The allocations not closed yet whose window has ended, the earliest end first."""
    return list(
        Allocation.objects.filter(closed_at__isnull=True, window_end__lte=now or timezone.now())
        .order_by("window_end", "pk")
        .values_list("pk", flat=True)
    )
