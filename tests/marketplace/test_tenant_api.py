"""The pool of tenant accounts through the API: how many teams a cluster serves at once (on the
cluster and on its offers), the pool settings of a cluster, the owners' list of accounts and
their request to scrub a quarantined one again, and the market's refusals that the pool
explains (no account free, GPUs not metered). Who may call the two owners' endpoints is one
table, and a refusal changes nothing."""

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from billing import selectors as billing_selectors
from computeshare.models import User
from marketplace.models import Allocation, Cluster, Offer, Partition, TenantAccount, TenantLease
from organizations.models import Membership, Organization
from tests.conftest import client_for
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    OrganizationFactory,
    PartitionFactory,
    allocation_bought,
    funded_organization,
)
from tests.marketplace.test_market_api import API, assert_refused, iso, new_key_pair

pytestmark = pytest.mark.django_db

QUARANTINE_REASON = "Left after the scrub: 2 processes (sleep), 1 file in /home/cs-tenant-02."


@dataclass
class Pool:
    """An owner's cluster `hpc1` with four tenant accounts: `cs-tenant-01` leased to the team
    (which bought an allocation), `cs-tenant-02` quarantined after the rival's lease could not
    be scrubbed, `cs-tenant-03` available (scrubbed a day ago), `cs-tenant-04` retired."""

    owner: Organization
    owner_admin: User
    owner_member: User
    cluster: Cluster
    partition: Partition
    team: Organization
    team_admin: User
    team_member: User
    rival: Organization
    outsider: User
    allocation: Allocation
    scrubbed_at: Any


@pytest.fixture
def pool(db: None) -> Pool:
    owner = OrganizationFactory(name="Owner Lab")
    owner_admin = MembershipFactory(organization=owner, role=Membership.Role.ADMIN).user
    owner_member = MembershipFactory(organization=owner, role=Membership.Role.MEMBER).user
    cluster = ClusterFactory(organization=owner, name="hpc1", tenants=4)
    partition = PartitionFactory(cluster=cluster, name="debug", cpus=64, gpus=4)
    team = funded_organization("0", name="Quantum Lab")
    team_admin = MembershipFactory(organization=team, role=Membership.Role.ADMIN).user
    team_member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    # The first purchase leases the account scrubbed longest ago: cs-tenant-01.
    allocation = allocation_bought(team, partition=partition, quantity=10)
    rival = funded_organization("0", name="Photon Lab")
    quarantined = TenantAccount.objects.get(cluster=cluster, username="cs-tenant-02")
    TenantLease.objects.create(
        account=quarantined,
        cluster=cluster,
        organization=rival,
        status=TenantLease.Status.FAILED,
        scrub_detail=QUARANTINE_REASON,
    )
    TenantAccount.objects.filter(pk=quarantined.pk).update(
        status=TenantAccount.Status.QUARANTINED, status_detail=QUARANTINE_REASON
    )
    scrubbed_at = timezone.now() - timedelta(days=1)
    TenantAccount.objects.filter(cluster=cluster, username="cs-tenant-03").update(
        last_scrubbed_at=scrubbed_at
    )
    TenantAccount.objects.filter(cluster=cluster, username="cs-tenant-04").update(
        status=TenantAccount.Status.RETIRED, status_detail="No longer a member of the tenant group."
    )
    outsider = MembershipFactory(role=Membership.Role.ADMIN).user
    return Pool(
        owner,
        owner_admin,
        owner_member,
        cluster,
        partition,
        team,
        team_admin,
        team_member,
        rival,
        outsider,
        allocation,
        scrubbed_at,
    )


def accounts_path(pool: Pool) -> str:
    return f"{API}/clusters/{pool.cluster.uuid}/tenant-accounts/"


def scrub_path(pool: Pool, username: str = "cs-tenant-02") -> str:
    return f"{API}/clusters/{pool.cluster.uuid}/tenant-accounts/{username}/scrub/"


def pool_state() -> list[tuple[str, str, str]]:
    return list(
        TenantAccount.objects.order_by("pk").values_list("username", "status", "status_detail")
    ) + list(TenantLease.objects.order_by("pk").values_list("account__username", "status", "pk"))


# --- How many teams a cluster serves ------------------------------------------------------------


def test_clusters_say_how_many_teams_they_serve_and_how_many_more_now(pool):
    # Four accounts: the retired one is out of the pool; the leased and the quarantined ones
    # are taken, so one team more can come.
    as_team = client_for(pool.team_member)

    detail = as_team.get(f"{API}/clusters/{pool.cluster.uuid}/")
    listed = as_team.get(f"{API}/clusters/").json()["results"]

    assert detail.status_code == 200
    assert detail.json()["tenant_accounts"] == {"total": 3, "free": 1}
    assert [(row["name"], row["tenant_accounts"]) for row in listed] == [
        ("hpc1", {"total": 3, "free": 1})
    ]
    # The pool settings are the owners'.
    for field in ("tenant_group", "sftp_server", "tenant_idle_account", "tracks_gpus"):
        assert field not in detail.json()


def test_the_owners_see_the_pool_settings_as_the_last_verification_read_them(pool):
    Cluster.objects.filter(pk=pool.cluster.pk).update(
        tenant_idle_account="computeshare-idle", tracks_gpus=False
    )

    answer = client_for(pool.owner_member).get(f"{API}/clusters/{pool.cluster.uuid}/")

    body = answer.json()
    assert (
        body["tenant_group"],
        body["sftp_server"],
        body["tenant_idle_account"],
        body["tracks_gpus"],
    ) == ("computeshare-fixed", "/usr/lib/openssh/sftp-server", "computeshare-idle", False)


def test_a_cluster_of_the_local_backend_needs_no_tenant_accounts(pool):
    local = ClusterFactory(name="demo", backend=Cluster.Backend.LOCAL, tenant_group="")

    answer = client_for(pool.team_member).get(f"{API}/clusters/{local.uuid}/")

    assert answer.json()["tenant_accounts"] is None


def test_offers_carry_the_tenant_accounts_of_their_cluster(pool):
    offer = OfferFactory(partition=pool.partition)
    client = client_for(pool.outsider)

    detail = client.get(f"{API}/offers/{offer.uuid}/")
    listed = client.get(f"{API}/offers/").json()["results"]

    assert detail.json()["tenant_accounts"] == {"total": 3, "free": 1}
    rows = {row["id"]: row["tenant_accounts"] for row in listed}
    assert rows[str(offer.uuid)] == {"total": 3, "free": 1}
    # The team's purchase's offer, on the same cluster.
    assert rows[str(pool.allocation.offer.uuid)] == {"total": 3, "free": 1}


# --- The pool settings of a cluster -------------------------------------------------------------


def register(pool: Pool, **changes: Any) -> Any:
    keys, host = new_key_pair(), new_key_pair()
    body = {
        "organization": str(pool.owner.uuid),
        "name": "Frontier",
        "ssh_host": "login.frontier.example.org",
        "ssh_user": "svc_share",
        "ssh_private_key": keys.private,
        "ssh_host_key": host.public,
        **changes,
    }
    return client_for(pool.owner_admin).post(f"{API}/clusters/", body, format="json")


def test_a_cluster_is_registered_with_its_tenant_group_and_sftp_server(pool):
    answer = register(
        pool, tenant_group="hpc-tenants", sftp_server="/usr/libexec/openssh/sftp-server"
    )

    assert answer.status_code == 201, answer.content
    cluster = Cluster.objects.get(name="Frontier")
    assert (cluster.tenant_group, cluster.sftp_server) == (
        "hpc-tenants",
        "/usr/libexec/openssh/sftp-server",
    )
    body = answer.json()
    assert (body["tenant_group"], body["sftp_server"]) == (
        "hpc-tenants",
        "/usr/libexec/openssh/sftp-server",
    )
    assert (body["tenant_idle_account"], body["tracks_gpus"]) == ("", False)
    assert body["tenant_accounts"] == {"total": 0, "free": 0}


def test_without_them_a_cluster_gets_the_defaults_of_scripts_cluster_setup(pool):
    answer = register(pool)

    assert answer.status_code == 201, answer.content
    assert (answer.json()["tenant_group"], answer.json()["sftp_server"]) == (
        "computeshare-tenants",
        "/usr/lib/openssh/sftp-server",
    )


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"tenant_group": "Tenants!"}, "tenant_group"),
        ({"tenant_group": ""}, "tenant_group"),
        ({"tenant_group": "g" * 33}, "tenant_group"),
        ({"sftp_server": "sftp-server"}, "sftp_server"),
        ({"sftp_server": "/usr/lib/sftp-server; rm -rf /"}, "sftp_server"),
    ],
)
def test_a_bad_tenant_group_or_sftp_server_is_invalid_and_registers_nothing(pool, changes, field):
    answer = register(pool, **changes)

    body = assert_refused(answer, 400, "invalid")
    assert list(body["extra"]["fields"]) == [field]
    assert not Cluster.objects.filter(name="Frontier").exists()


def test_the_owners_change_the_pool_settings_and_verify_again(pool):
    path = f"{API}/clusters/{pool.cluster.uuid}/"

    answer = client_for(pool.owner_admin).patch(
        path,
        {"tenant_group": "hpc-tenants", "sftp_server": "/usr/libexec/sftp-server"},
        format="json",
    )

    assert answer.status_code == 200, answer.content
    assert (answer.json()["tenant_group"], answer.json()["sftp_server"]) == (
        "hpc-tenants",
        "/usr/libexec/sftp-server",
    )
    assert answer.json()["status"] == "unverified"
    cluster = Cluster.objects.get(pk=pool.cluster.pk)
    assert (cluster.tenant_group, cluster.sftp_server, cluster.status) == (
        "hpc-tenants",
        "/usr/libexec/sftp-server",
        "unverified",
    )


def test_a_bad_pool_setting_in_a_change_is_invalid_and_changes_nothing(pool):
    answer = client_for(pool.owner_admin).patch(
        f"{API}/clusters/{pool.cluster.uuid}/", {"tenant_group": "NO GOOD"}, format="json"
    )

    body = assert_refused(answer, 400, "invalid")
    assert list(body["extra"]["fields"]) == ["tenant_group"]
    cluster = Cluster.objects.get(pk=pool.cluster.pk)
    assert (cluster.tenant_group, cluster.status) == ("computeshare-fixed", "online")


# --- The market's refusals the pool explains ----------------------------------------------------


def test_buying_where_every_account_is_another_teams_is_409_and_holds_nothing(pool):
    # The last free account goes to another team.
    allocation_bought(funded_organization("0"), partition=pool.partition, quantity=5)
    latecomer = funded_organization("1000", name="Late Lab")
    latecomer_admin = MembershipFactory(organization=latecomer, role=Membership.Role.ADMIN).user
    offer = OfferFactory(partition=pool.partition, buy_now_price="3.00")
    assert client_for(latecomer_admin).get(f"{API}/offers/{offer.uuid}/").json()[
        "tenant_accounts"
    ] == {"total": 3, "free": 0}
    before = (pool_state(), Allocation.objects.count())

    answer = client_for(latecomer_admin).post(
        f"{API}/offers/{offer.uuid}/buy/",
        {"organization": str(latecomer.uuid), "quantity": 10},
        format="json",
    )

    body = assert_refused(answer, 409, "tenant_accounts_exhausted")
    assert body["extra"] == {"tenant_accounts": 3, "free": 0}
    assert (pool_state(), Allocation.objects.count()) == before
    wallet = billing_selectors.wallet_get(latecomer)
    assert (wallet.available, wallet.held) == (1000, 0)
    assert Offer.objects.get(pk=offer.pk).units_sold == 0


def test_a_team_that_holds_an_account_buys_again_when_none_is_free(pool):
    allocation_bought(funded_organization("0"), partition=pool.partition, quantity=5)
    offer = OfferFactory(partition=pool.partition, buy_now_price="3.00")
    pool_before = pool_state()
    from billing import services as billing

    billing.wallet_adjust(organization=pool.team, amount="100", memo="Test funds", actor=None)

    answer = client_for(pool.team_admin).post(
        f"{API}/offers/{offer.uuid}/buy/",
        {"organization": str(pool.team.uuid), "quantity": 10},
        format="json",
    )

    assert answer.status_code == 201, answer.content
    assert pool_state() == pool_before


def test_a_gpu_offer_on_a_cluster_that_does_not_meter_gpus_is_409(pool):
    Cluster.objects.filter(pk=pool.cluster.pk).update(tracks_gpus=False)
    now = timezone.now()
    body = {
        "cluster": str(pool.cluster.uuid),
        "partition": "debug",
        "resource": "gpu",
        "quantity": 10,
        "window_start": iso(now + timedelta(days=2)),
        "window_end": iso(now + timedelta(days=3)),
        "reserve_price": "1.00",
        "auction_closes_at": iso(now + timedelta(days=1)),
    }
    before = Offer.objects.count()

    answer = client_for(pool.owner_admin).post(f"{API}/offers/", body, format="json")

    body = assert_refused(answer, 409, "gpu_not_metered")
    assert body["extra"] == {"cluster": str(pool.cluster.uuid)}
    assert Offer.objects.count() == before


# --- The owners' list of accounts ----------------------------------------------------------------


def test_the_owners_list_the_accounts_with_who_holds_them(pool):
    answer = client_for(pool.owner_member).get(accounts_path(pool))

    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["count"], body["next"], body["previous"]) == (4, None, None)
    assert body["results"] == [
        {
            "username": "cs-tenant-01",
            "status": "leased",
            "status_detail": "",
            "leased_to": "Quantum Lab",
            "last_scrubbed_at": None,
        },
        {
            "username": "cs-tenant-02",
            "status": "quarantined",
            "status_detail": QUARANTINE_REASON,
            "leased_to": "Photon Lab",
            "last_scrubbed_at": None,
        },
        {
            "username": "cs-tenant-03",
            "status": "available",
            "status_detail": "",
            "leased_to": None,
            "last_scrubbed_at": iso(pool.scrubbed_at),
        },
        {
            "username": "cs-tenant-04",
            "status": "retired",
            "status_detail": "No longer a member of the tenant group.",
            "leased_to": None,
            "last_scrubbed_at": None,
        },
    ]


def test_an_ended_lease_no_longer_names_its_team(pool):
    TenantLease.objects.filter(organization=pool.team).update(
        status=TenantLease.Status.ENDED, ended_at=timezone.now()
    )
    TenantAccount.objects.filter(username="cs-tenant-01").update(
        status=TenantAccount.Status.AVAILABLE
    )

    answer = client_for(pool.owner_admin).get(accounts_path(pool))

    assert answer.json()["results"][0] == {
        "username": "cs-tenant-01",
        "status": "available",
        "status_detail": "",
        "leased_to": None,
        "last_scrubbed_at": None,
    }


def test_the_account_list_is_paginated(pool):
    client = client_for(pool.owner_admin)

    first = client.get(f"{accounts_path(pool)}?page_size=3").json()
    second = client.get(f"{accounts_path(pool)}?page_size=3&page=2").json()

    assert [row["username"] for row in first["results"]] == [
        "cs-tenant-01",
        "cs-tenant-02",
        "cs-tenant-03",
    ]
    assert [row["username"] for row in second["results"]] == ["cs-tenant-04"]
    assert first["count"] == 4 and first["next"] is not None


# --- Scrubbing a quarantined account again -------------------------------------------------------


def test_an_owner_admin_asks_for_a_quarantined_account_to_be_scrubbed_again(
    pool, django_capture_on_commit_callbacks
):
    lease = TenantLease.objects.get(account__username="cs-tenant-02")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        answer = client_for(pool.owner_admin).post(scrub_path(pool))

    assert answer.status_code == 202, answer.content
    # It stays out of the pool until the scrub, in a worker, has found it empty.
    assert answer.json() == {
        "username": "cs-tenant-02",
        "status": "quarantined",
        "status_detail": QUARANTINE_REASON,
        "leased_to": "Photon Lab",
        "last_scrubbed_at": None,
    }
    lease.refresh_from_db()
    assert lease.status == TenantLease.Status.ENDING
    assert len(callbacks) == 1  # the scrub task, after the commit


def test_an_account_quarantined_without_a_lease_returns_to_the_pool_at_once(pool):
    TenantLease.objects.filter(account__username="cs-tenant-02").delete()

    answer = client_for(pool.owner_admin).post(scrub_path(pool))

    assert answer.status_code == 202, answer.content
    assert answer.json() == {
        "username": "cs-tenant-02",
        "status": "available",
        "status_detail": "",
        "leased_to": None,
        "last_scrubbed_at": None,
    }
    assert client_for(pool.team_member).get(f"{API}/clusters/{pool.cluster.uuid}/").json()[
        "tenant_accounts"
    ] == {"total": 3, "free": 2}


@pytest.mark.parametrize(
    ("username", "status"),
    [("cs-tenant-01", "leased"), ("cs-tenant-03", "available"), ("cs-tenant-04", "retired")],
)
def test_scrubbing_an_account_that_is_not_quarantined_is_409_and_changes_nothing(
    pool, username, status
):
    before = pool_state()

    answer = client_for(pool.owner_admin).post(scrub_path(pool, username))

    body = assert_refused(answer, 409, "tenant_account_not_quarantined")
    assert body["extra"] == {"status": status}
    assert pool_state() == before


def test_an_unknown_account_or_cluster_is_404(pool):
    client = client_for(pool.owner_admin)
    ClusterFactory(organization=pool.owner, tenants=[("other-01", "/home/other-01")])
    TenantAccount.objects.filter(username="other-01").update(
        status=TenantAccount.Status.QUARANTINED
    )
    unknown_cluster = f"{API}/clusters/00000000-0000-0000-0000-000000000000/tenant-accounts/"
    before = pool_state()

    answers = [
        client.post(scrub_path(pool, "cs-tenant-99")),
        # A quarantined account of the owners' other cluster is not this cluster's.
        client.post(scrub_path(pool, "other-01")),
        client.get(unknown_cluster),
        client.post(f"{unknown_cluster}cs-tenant-02/scrub/"),
    ]

    for answer in answers:
        assert_refused(answer, 404, "not_found")
    assert pool_state() == before


# --- Who may do what -----------------------------------------------------------------------------

ROLES = ("owner_admin", "owner_member", "team_admin", "team_member", "outsider", "anonymous")
# The cluster is public, so its owners' endpoints answer anyone else 403 (not 404); the team
# holds an account of the cluster and still sees none of the pool.
ACCOUNTS = "GET /clusters/{cluster}/tenant-accounts/"
SCRUB = "POST /clusters/{cluster}/tenant-accounts/{q}/scrub/"
# fmt: off
MATRIX: dict[str, tuple[int, ...]] = {
    #           owner   owner   team    team    out-    anony-
    #           admin   member  admin   member  sider   mous
    ACCOUNTS:  (200,    200,    403,    403,    403,    401),
    SCRUB:     (202,    403,    403,    403,    403,    401),
}
# fmt: on
CODES = {401: "not_authenticated", 403: "permission_denied"}


def client_of(pool: Pool, role: str) -> APIClient:
    users = {
        "owner_admin": pool.owner_admin,
        "owner_member": pool.owner_member,
        "team_admin": pool.team_admin,
        "team_member": pool.team_member,
        "outsider": pool.outsider,
    }
    return APIClient() if role == "anonymous" else client_for(users[role])


@pytest.mark.parametrize("endpoint", list(MATRIX))
@pytest.mark.parametrize("role", ROLES)
def test_who_may_call_the_owners_endpoints(
    pool, endpoint, role, django_capture_on_commit_callbacks
):
    method, template = endpoint.split(" ")
    path = API + template.format(cluster=pool.cluster.uuid, q="cs-tenant-02")
    expected = MATRIX[endpoint][ROLES.index(role)]
    before = pool_state()

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        answer = getattr(client_of(pool, role), method.lower())(path)

    assert answer.status_code == expected, answer.content
    if expected in CODES:
        assert_refused(answer, expected, CODES[expected])
        assert pool_state() == before
        assert callbacks == []
    elif method == "GET":
        assert answer.json()["count"] == 4


# --- Queries -------------------------------------------------------------------------------------

ROWS = 250


def test_the_account_list_reads_the_same_queries_for_any_page_size(pool):
    # Given a pool of 250 accounts, 20 of them leased to 20 teams and 10 quarantined
    cluster = ClusterFactory(organization=pool.owner, tenants=ROWS)
    accounts = list(TenantAccount.objects.filter(cluster=cluster).order_by("username"))
    teams = [funded_organization("0") for _ in range(20)]
    TenantLease.objects.bulk_create(
        TenantLease(account=account, cluster=cluster, organization=team)
        for account, team in zip(accounts[:20], teams, strict=True)
    )
    TenantAccount.objects.filter(pk__in=[account.pk for account in accounts[:20]]).update(
        status=TenantAccount.Status.LEASED
    )
    TenantAccount.objects.filter(pk__in=[account.pk for account in accounts[20:30]]).update(
        status=TenantAccount.Status.QUARANTINED, status_detail="Left after the scrub."
    )
    client = client_for(pool.owner_member)

    def queries(page_size: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            answer = client.get(
                f"{API}/clusters/{cluster.uuid}/tenant-accounts/?page_size={page_size}"
            )
        assert answer.status_code == 200
        assert len(answer.json()["results"]) == page_size
        assert answer.json()["results"][0]["leased_to"] == teams[0].name
        return len(captured)

    # The token, the cluster with its partitions, the caller's membership, the count, and the
    # page with the team of each lease.
    assert (queries(10), queries(200)) == (6, 6)
