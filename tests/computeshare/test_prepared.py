"""`PreparedRead`: compiled once, it answers each call as its queryset would, with the call's
values, in one query."""

import uuid

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import F, OuterRef
from django.test.utils import CaptureQueriesContext

from computeshare.prepared import PreparedRead
from marketplace.models import Allocation, TenantLease
from marketplace.selectors import tenant_lease_active_id
from organizations.models import Membership
from tests.factories import MembershipFactory, UserFactory, allocation_bought

pytestmark = pytest.mark.django_db


def _with_member(allocation_uuid, user_id):
    return (
        Allocation.objects.filter(uuid=allocation_uuid, organization__memberships__user_id=user_id)
        .annotate(member_role=F("organization__memberships__role"))
        .select_related("organization", "cluster", "partition")
        .defer("cluster__ssh_private_key")
    )


def _read() -> PreparedRead[Allocation]:
    return PreparedRead(
        _with_member,
        parameters={
            "allocation_uuid": Allocation._meta.get_field("uuid"),
            "user_id": Membership._meta.get_field("user"),
        },
    )


def test_it_answers_as_its_queryset_does_for_each_calls_values():
    read = _read()
    first, second = allocation_bought(), allocation_bought()
    member = MembershipFactory(organization=first.organization, role=Membership.Role.ADMIN)
    other = MembershipFactory(organization=second.organization)

    for allocation, user in ((first, member.user), (second, other.user)):
        with CaptureQueriesContext(connection) as queries:
            (found,) = read(allocation_uuid=str(allocation.uuid), user_id=user.pk)
        expected = _with_member(allocation.uuid, user.pk).get()
        assert len(queries) == 1
        assert found.pk == expected.pk
        assert found.member_role == expected.member_role
        # The related rows come with it, as select_related makes them, the deferred field left.
        with CaptureQueriesContext(connection) as queries:
            assert found.organization == expected.organization
            assert found.cluster.name == expected.cluster.name
            assert found.partition.name == expected.partition.name
            assert found.reserved == expected.reserved
            assert found.window_end == expected.window_end
        assert len(queries) == 0
        assert "ssh_private_key" in found.cluster.get_deferred_fields()

    assert read(allocation_uuid=first.uuid, user_id=other.user.pk) == []
    assert read(allocation_uuid=uuid.uuid4(), user_id=member.user.pk) == []


def test_a_value_its_field_refuses_raises_validation_error_and_runs_nothing():
    read = _read()
    user = UserFactory()
    for value in ("not-a-uuid", {"a": 1}, [1]):
        with CaptureQueriesContext(connection) as queries, pytest.raises(ValidationError):
            read(allocation_uuid=value, user_id=user.pk)
        assert len(queries) == 0


def test_a_locking_read_with_a_subquery_takes_the_calls_key():
    allocation = allocation_bought()
    lease = TenantLease.objects.filter(
        cluster=allocation.cluster, organization=allocation.organization
    ).first()

    def locked(pk):
        return (
            Allocation.objects.select_for_update(of=("self",))
            .annotate(
                lease_id=tenant_lease_active_id(OuterRef("cluster_id"), OuterRef("organization_id"))
            )
            .filter(pk=pk)
        )

    read = PreparedRead(locked, parameters={"pk": Allocation._meta.get_field("id")})
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        (found,) = read(pk=allocation.pk)
    assert found.pk == allocation.pk
    assert found.lease_id == (lease.pk if lease is not None else None)
    assert "FOR UPDATE" in queries[0]["sql"]


def test_a_sample_value_that_is_not_a_parameters_place_is_refused():
    def fixed(pk):
        return Allocation.objects.filter(pk=7)

    read = PreparedRead(fixed, parameters={"pk": Allocation._meta.get_field("id")})
    with pytest.raises(ValueError, match="not in the query"):
        read(pk=1)
