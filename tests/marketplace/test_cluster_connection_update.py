"""PATCH /clusters/{id}/: owners change how the platform reaches their cluster (a rotated host
key); the cluster must be verified again before it sells anything new."""

import pytest

from marketplace.models import Cluster
from organizations.models import Membership
from tests.conftest import client_for
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    PartitionFactory,
    ssh_host_key_line,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster() -> Cluster:
    return PartitionFactory().cluster


def test_an_owner_admin_pins_a_new_host_key_and_the_cluster_needs_verifying_again(cluster):
    # Given an online cluster and an admin of its organization
    admin = MembershipFactory(organization=cluster.organization, role=Membership.Role.ADMIN)
    new_key = ssh_host_key_line()

    # When the admin pins a new host key
    answer = client_for(admin.user).patch(
        f"/api/v1/clusters/{cluster.uuid}/", {"ssh_host_key": new_key}, format="json"
    )

    # Then the cluster is unverified with the new key, and its partitions are still there
    assert answer.status_code == 200, answer.json()
    assert answer.json()["status"] == "unverified"
    assert answer.json()["ssh_host_key"] == new_key
    cluster.refresh_from_db()
    assert (cluster.status, cluster.ssh_host_key) == ("unverified", new_key)
    assert cluster.host_key_fingerprint.startswith("SHA256:")
    assert [partition.name for partition in cluster.partitions.all()] == ["debug"]


def test_an_owner_names_the_market_qos_it_made_and_verification_will_read_that_one(cluster):
    # Given an owner whose scripts/cluster-setup made the market QOS under another name
    admin = MembershipFactory(organization=cluster.organization, role=Membership.Role.ADMIN)

    # When the admin names it
    answer = client_for(admin.user).patch(
        f"/api/v1/clusters/{cluster.uuid}/", {"market_qos": "lab-market"}, format="json"
    )

    # Then it is kept, and the cluster needs verifying with it; blank goes back to the default
    assert answer.status_code == 200, answer.json()
    assert (answer.json()["market_qos"], answer.json()["status"]) == ("lab-market", "unverified")
    cluster.refresh_from_db()
    assert cluster.market_qos == "lab-market"
    client_for(admin.user).patch(
        f"/api/v1/clusters/{cluster.uuid}/", {"market_qos": ""}, format="json"
    )
    cluster.refresh_from_db()
    assert cluster.market_qos == ""


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ssh_host_key": "not a key"}, "ssh_host_key"),
        ({"ssh_port": 0}, "ssh_port"),
        ({"ssh_user": "Root; rm"}, "ssh_user"),
        ({"name": "renamed"}, "name"),
        ({"market_qos": "Lab-Market"}, "market_qos"),  # sacctmgr keeps names in lower case
        ({"market_qos": "market,normal"}, "market_qos"),
    ],
)
def test_bad_changes_are_refused_and_change_nothing(cluster, body, field):
    admin = MembershipFactory(organization=cluster.organization, role=Membership.Role.ADMIN)
    before = Cluster.objects.values().get(pk=cluster.pk)

    answer = client_for(admin.user).patch(f"/api/v1/clusters/{cluster.uuid}/", body, format="json")

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert field in answer.json()["extra"]["fields"]
    after = Cluster.objects.values().get(pk=cluster.pk)
    assert {k: v for k, v in after.items() if k != "ssh_private_key"} == {
        k: v for k, v in before.items() if k != "ssh_private_key"
    }


def test_only_the_owning_admins_may_change_a_cluster(cluster):
    member = MembershipFactory(organization=cluster.organization, role=Membership.Role.MEMBER)
    outsider = MembershipFactory(role=Membership.Role.ADMIN)
    for user in (member.user, outsider.user):
        answer = client_for(user).patch(
            f"/api/v1/clusters/{cluster.uuid}/", {"ssh_port": 2200}, format="json"
        )
        assert answer.status_code == 403
        assert answer.json()["code"] == "permission_denied"
    cluster.refresh_from_db()
    assert (cluster.ssh_port, cluster.status) == (2222, "online")


def test_a_suspended_cluster_stays_suspended_and_cannot_be_verified_back(cluster):
    admin = MembershipFactory(organization=cluster.organization, role=Membership.Role.ADMIN)
    ClusterFactory._meta.model.objects.filter(pk=cluster.pk).update(status="suspended")
    client = client_for(admin.user)

    changed = client.patch(f"/api/v1/clusters/{cluster.uuid}/", {"ssh_port": 2200}, format="json")
    verified = client.post(f"/api/v1/clusters/{cluster.uuid}/verify/")

    assert changed.status_code == 200
    assert changed.json()["status"] == "suspended"
    assert verified.status_code == 409
    assert verified.json()["code"] == "cluster_suspended"
