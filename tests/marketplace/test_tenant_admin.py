"""Operators read the pools, the leases and what the poll noticed in the admin, and change
none of them there (leases move only through the services)."""

import pytest
from django.test import Client

from marketplace.models import TenantAccount, TenantLease
from scheduler_bridge.models import ClusterPoll
from tests.factories import ClusterFactory, PartitionFactory, UserFactory, allocation_bought

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client: Client) -> Client:
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_staff_read_the_pool_the_leases_and_the_polls_notices(staff_client: Client):
    cluster = ClusterFactory(name="Aurora", tenants=2)
    allocation = allocation_bought(partition=PartitionFactory(cluster=cluster), quantity=1)
    TenantAccount.objects.filter(cluster=cluster, username="cs-tenant-02").update(
        status="quarantined", status_detail="Left after the scrub: 3 files left in the home."
    )
    ClusterPoll.objects.create(
        cluster=cluster, last_notice="123 is in a state the poll does not know: EXPEDITING"
    )

    accounts = staff_client.get("/admin/marketplace/tenantaccount/").content.decode()
    leases = staff_client.get("/admin/marketplace/tenantlease/").content.decode()
    polls = staff_client.get("/admin/scheduler_bridge/clusterpoll/").content.decode()

    assert (
        "cs-tenant-01" in accounts and "Left after the scrub: 3 files left in the home." in accounts
    )
    assert allocation.organization.name in leases and "cs-tenant-01" in leases
    assert "EXPEDITING" in polls
    lease = TenantLease.objects.get()
    assert (
        staff_client.post(f"/admin/marketplace/tenantlease/{lease.pk}/delete/").status_code == 403
    )
    assert staff_client.get("/admin/marketplace/tenantaccount/add/").status_code == 403
