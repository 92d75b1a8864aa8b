"""The market endpoints of docs/api.md (clusters, offers, bids, allocations): each answer
with its exact fields and values, each refusal with its status and `code`, and that a refusal
changes nothing. Who may call what is tested as a matrix in test_market_api_authorization.py;
query counts are in test_market_api_queries.py."""

import base64
import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from billing import selectors as billing_selectors
from billing import services as billing
from billing.models import Account, Entry, Hold, Transaction
from billing.tasks import hold_release_batches_due_task
from computeshare.fields import fernet
from computeshare.models import IdempotencyRecord, User
from marketplace import services
from marketplace.models import Allocation, Bid, Cluster, ClusterVerification, Offer, Partition
from organizations.models import Membership, Organization
from tests.conftest import client_for
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    OrganizationFactory,
    PartitionFactory,
    funded_organization,
    ssh_key_pair,
)

pytestmark = pytest.mark.django_db

API = "/api/v1"
PUBLIC_CLUSTER_FIELDS = {
    "id",
    "name",
    "organization",
    "organization_name",
    "status",
    "partitions",
    "verified_at",
    "tenant_accounts",
    "capacity_kinds",
    "preemption_grace_seconds",
}
OWNER_CLUSTER_FIELDS = {
    "ssh_host",
    "ssh_port",
    "ssh_user",
    "ssh_host_key",
    "host_key_fingerprint",
    "account_mode",
    "slurm_account",
    "status_detail",
    "tenant_group",
    "sftp_server",
    "tenant_idle_account",
    "tracks_gpus",
    "capacity_refusals",
    "market_qos",
    "owner_qos",
}


# --- Helpers -------------------------------------------------------------------------------------


def iso(moment: datetime) -> str:
    """A time as the API writes it: ISO 8601 in UTC, `Z` for the zone."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def whole_hour(days: float = 0) -> datetime:
    """A whole hour `days` from now: its ISO text has no fraction, so answers compare exactly.
    Every use is at least a day away from now, so truncating to the hour never makes a future
    time past."""
    return timezone.now().replace(minute=0, second=0, microsecond=0) + timedelta(days=days)


def snapshot() -> dict[str, Any]:
    """Everything a refused request must leave as it was: the rows of the market and of the
    ledger, every balance, and the state and public demand of every offer."""
    models = (Cluster, Partition, Offer, Bid, Allocation, Hold, Transaction, Entry)
    return {
        "rows": {model.__name__: model.objects.count() for model in models},
        "idempotency_records": IdempotencyRecord.objects.count(),
        "balances": list(Account.objects.order_by("pk").values_list("pk", "balance")),
        "holds": list(Hold.objects.order_by("pk").values_list("pk", "status", "amount")),
        "offers": list(
            Offer.objects.order_by("pk").values_list(
                "pk", "status", "quantity", "window_end", "units_sold", "bid_count", "units_bid"
            )
        ),
        "bids": list(Bid.objects.order_by("pk").values_list("pk", "status", "quantity_won")),
        "clusters": list(Cluster.objects.order_by("pk").values_list("pk", "name", "status")),
    }


def assert_refused(answer: Any, status: int, code: str, field: str | None = None) -> dict:
    """The answer is the error shape with this status and code (naming `field` for a 400)."""
    assert answer.status_code == status, answer.content
    body = answer.json()
    assert set(body) == {"detail", "code", "extra"}, body
    assert body["code"] == code, body
    assert isinstance(body["detail"], str) and body["detail"]
    if field is not None:
        assert field in body["extra"]["fields"], body
    return body


def wallet(organization: Organization) -> tuple[Decimal, Decimal]:
    """(available, held)"""
    balances = billing_selectors.wallet_get(organization)
    return balances.available, balances.held


def admin_membership(organization: Organization) -> Membership:
    return Membership.objects.select_related("organization", "user").get(
        organization=organization, role=Membership.Role.ADMIN
    )


def place_bid(organization: Organization, offer: Offer, quantity: int, price: str) -> Bid:
    return services.bid_place(
        actor=admin_membership(organization), offer=offer, quantity=quantity, price=price
    )


def clear(offer: Offer, closed_at: datetime | None = None) -> Offer:
    """Closes the auction at `closed_at` (a minute ago when not given) and clears it a minute
    later, as the periodic task would."""
    closed_at = closed_at or timezone.now() - timedelta(minutes=1)
    Offer.objects.filter(pk=offer.pk).update(auction_closes_at=closed_at)
    outcome = services.auction_clear(offer_id=offer.pk, now=closed_at + timedelta(minutes=1))
    assert outcome.cleared
    return Offer.objects.get(pk=offer.pk)


@dataclass(frozen=True)
class KeyPair:
    private: str  # OpenSSH private key text
    public: str  # `ssh-ed25519 AAAA...`


def new_key_pair() -> KeyPair:
    return KeyPair(*ssh_key_pair())


def secret_fragments(private_key: str) -> list[str]:
    """Pieces of the key that only this key has: its base64 lines after the first (which is the
    `openssh-key-v1` header every unencrypted Ed25519 key shares), and the PEM armour."""
    body = [line for line in private_key.splitlines() if line and not line.startswith("-----")]
    return ["PRIVATE KEY", *body[1:]]


def assert_no_secret(raw: bytes, private_key: str) -> None:
    text = raw.decode()
    for fragment in secret_fragments(private_key):
        assert fragment not in text


def openssh_fingerprint(public_line: str) -> str:
    """`SHA256:...` as `ssh-keygen -l` prints it."""
    blob = base64.b64decode(public_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# --- The market every test starts from -----------------------------------------------------------


@dataclass
class Market:
    owner: Organization  # sells the capacity of `cluster`
    owner_admin: User
    owner_member: User
    cluster: Cluster
    partition: Partition  # `debug`: 256 CPUs, 8 GPUs
    team: Organization  # buys; 1000 available
    team_admin: User
    team_member: User
    rival: Organization  # buys too; 1000 available
    rival_admin: User


@pytest.fixture
def market(db: None) -> Market:
    owner = OrganizationFactory(name="Hopper Lab")
    billing.wallet_open(owner)
    owner_admin = MembershipFactory(organization=owner, role=Membership.Role.ADMIN).user
    owner_member = MembershipFactory(organization=owner, role=Membership.Role.MEMBER).user
    cluster = ClusterFactory(organization=owner, name="hopper")
    partition = PartitionFactory(cluster=cluster, name="debug", cpus=256, gpus=8, nodes=4)
    team = funded_organization("1000", name="Quantum Lab")
    team_admin = MembershipFactory(organization=team, role=Membership.Role.ADMIN).user
    team_member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    rival = funded_organization("1000", name="Photon Lab")
    rival_admin = MembershipFactory(organization=rival, role=Membership.Role.ADMIN).user
    return Market(
        owner,
        owner_admin,
        owner_member,
        cluster,
        partition,
        team,
        team_admin,
        team_member,
        rival,
        rival_admin,
    )


def offer_for_sale(market: Market, **fields: Any) -> Offer:
    """An open offer on the market's `debug` partition: 100 CPU units, reserve 1.00, buy-now
    3.00, the auction closing in a day and the window running for the ten days after."""
    closes = whole_hour(days=1)
    values: dict[str, Any] = {
        "partition": market.partition,
        "quantity": 100,
        "reserve_price": Decimal("1.00"),
        "buy_now_price": Decimal("3.00"),
        "auction_closes_at": closes,
        "window_start": closes + timedelta(days=1),
        "window_end": closes + timedelta(days=11),
    }
    values.update(fields)
    return OfferFactory(**values)


# --- Clusters ------------------------------------------------------------------------------------

MISSING = object()


def cluster_body(market: Market, keys: KeyPair, host: KeyPair, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "organization": str(market.owner.uuid),
        "name": "Frontier",
        "ssh_host": "login.frontier.example.org",
        "ssh_port": 2200,
        "ssh_user": "svc_share",
        "ssh_private_key": keys.private,
        "ssh_host_key": f"{host.public} root@frontier",
        "account_mode": "managed",
    }
    body.update(changes)
    return {name: value for name, value in body.items() if value is not MISSING}


@pytest.fixture
def keys() -> KeyPair:
    return new_key_pair()


@pytest.fixture
def host() -> KeyPair:
    return new_key_pair()


def test_cluster_create_registers_it_unverified_with_the_host_key_pinned(market, keys, host):
    answer = client_for(market.owner_admin).post(
        f"{API}/clusters/", cluster_body(market, keys, host), format="json"
    )

    assert answer.status_code == 201, answer.content
    cluster = Cluster.objects.get(name="Frontier")
    assert answer.json() == {
        "id": str(cluster.uuid),
        "name": "Frontier",
        "organization": str(market.owner.uuid),
        "organization_name": "Hopper Lab",
        "status": "unverified",
        "partitions": [],
        "verified_at": None,
        "ssh_host": "login.frontier.example.org",
        "ssh_port": 2200,
        "ssh_user": "svc_share",
        # The comment of the line is dropped: what is pinned is the type and the key.
        "ssh_host_key": host.public,
        "host_key_fingerprint": openssh_fingerprint(host.public),
        "account_mode": "managed",
        "slurm_account": "",
        "status_detail": "",
        # No accounts until a verification has read the pool of the group.
        "tenant_accounts": {"total": 0, "free": 0},
        "tenant_group": "computeshare-tenants",
        "sftp_server": "/usr/lib/openssh/sftp-server",
        "tenant_idle_account": "",
        "tracks_gpus": False,
        # Neither kind of capacity until a verification has read what Slurm holds.
        "capacity_kinds": [],
        "preemption_grace_seconds": None,
        "capacity_refusals": {},
        "market_qos": "",
        "owner_qos": [],
    }
    assert cluster.organization == market.owner
    assert cluster.ssh_private_key == keys.private
    assert_no_secret(answer.content, keys.private)


def test_cluster_create_in_fixed_mode_keeps_the_slurm_account(market, keys, host):
    body = cluster_body(market, keys, host, account_mode="fixed", slurm_account="share_acct")

    answer = client_for(market.owner_admin).post(f"{API}/clusters/", body, format="json")

    assert answer.status_code == 201, answer.content
    assert (answer.json()["account_mode"], answer.json()["slurm_account"]) == (
        "fixed",
        "share_acct",
    )


def test_cluster_create_keeps_the_market_qos_the_owner_made(market, keys, host):
    body = cluster_body(market, keys, host, market_qos="lab-market")

    answer = client_for(market.owner_admin).post(f"{API}/clusters/", body, format="json")

    assert answer.status_code == 201, answer.content
    assert answer.json()["market_qos"] == "lab-market"
    assert Cluster.objects.get(name="Frontier").market_qos == "lab-market"


def test_the_private_key_is_in_no_answer_and_only_ciphertext_is_stored(market, keys, host):
    owner = client_for(market.owner_admin)
    created = owner.post(
        f"{API}/clusters/",
        cluster_body(market, keys, host),
        format="json",
        HTTP_IDEMPOTENCY_KEY="register-frontier",
    )
    cluster_id = created.json()["id"]

    answers = [
        created,
        owner.get(f"{API}/clusters/{cluster_id}/"),
        owner.get(f"{API}/clusters/"),
        client_for(market.owner_member).get(f"{API}/clusters/{cluster_id}/"),
        client_for(market.team_admin).get(f"{API}/clusters/{cluster_id}/"),
        client_for(market.team_admin).get(f"{API}/clusters/"),
        # A replay answers from the stored first answer.
        owner.post(
            f"{API}/clusters/",
            cluster_body(market, keys, host),
            format="json",
            HTTP_IDEMPOTENCY_KEY="register-frontier",
        ),
    ]

    for answer in answers:
        assert answer.status_code in (200, 201), answer.content
        assert "ssh_private_key" not in answer.content.decode()
        assert_no_secret(answer.content, keys.private)
        assert_no_secret(answer.content, market.cluster.ssh_private_key)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ssh_private_key FROM marketplace_cluster WHERE uuid = %s", [cluster_id]
        )
        (stored,) = cursor.fetchone()
        cursor.execute(
            "SELECT response_body::text FROM computeshare_idempotencyrecord WHERE key = %s",
            ["register-frontier"],
        )
        (replay_body,) = cursor.fetchone()
    assert_no_secret(stored.encode(), keys.private)
    assert fernet().decrypt(stored.encode()).decode() == keys.private
    assert_no_secret(replay_body.encode(), keys.private)


def test_owners_see_connection_fields_and_nobody_else_does(market):
    path = f"{API}/clusters/{market.cluster.uuid}/"
    host_key = market.cluster.ssh_host_key

    as_owner_member = client_for(market.owner_member).get(path)
    as_team_admin = client_for(market.team_admin).get(path)
    listed_for_team = client_for(market.team_admin).get(f"{API}/clusters/").json()["results"]

    # One cluster's page also shows its owners the latest verification (the list does not: a
    # query per cluster).
    assert set(as_owner_member.json()) == PUBLIC_CLUSTER_FIELDS | OWNER_CLUSTER_FIELDS | {
        "verification"
    }
    assert as_owner_member.json()["ssh_host"] == "127.0.0.1"
    assert as_owner_member.json()["ssh_port"] == 2222
    assert as_owner_member.json()["ssh_user"] == "computeshare"
    assert as_owner_member.json()["ssh_host_key"] == host_key
    assert as_team_admin.json() == {
        "id": str(market.cluster.uuid),
        "name": "hopper",
        "organization": str(market.owner.uuid),
        "organization_name": "Hopper Lab",
        "status": "online",
        "partitions": [
            {
                "name": "debug",
                "cpus": 256,
                "gpus": 8,
                "nodes": 4,
                "max_time_minutes": None,
                "is_up": True,
            }
        ],
        "verified_at": iso(market.cluster.verified_at),
        "tenant_accounts": {"total": 24, "free": 24},
        "capacity_kinds": ["preemptible", "reserved"],
        "preemption_grace_seconds": 120,
    }
    assert [set(row) for row in listed_for_team] == [PUBLIC_CLUSTER_FIELDS]
    for text in ("127.0.0.1", "computeshare", host_key.split()[1]):
        assert text not in as_team_admin.content.decode()


def test_cluster_list_shows_every_cluster_by_name_with_its_partitions(market):
    other = ClusterFactory(name="atlas")
    PartitionFactory(cluster=other, name="gpu", cpus=64, gpus=4, nodes=2, max_time_minutes=720)
    PartitionFactory(cluster=other, name="batch", cpus=512, gpus=0, nodes=8, is_up=False)

    answer = client_for(market.team_member).get(f"{API}/clusters/")

    assert answer.status_code == 200
    body = answer.json()
    assert (body["count"], body["next"], body["previous"]) == (2, None, None)
    assert [row["name"] for row in body["results"]] == ["atlas", "hopper"]
    assert body["results"][0]["partitions"] == [
        {
            "name": "batch",
            "cpus": 512,
            "gpus": 0,
            "nodes": 8,
            "max_time_minutes": None,
            "is_up": False,
        },
        {"name": "gpu", "cpus": 64, "gpus": 4, "nodes": 2, "max_time_minutes": 720, "is_up": True},
    ]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"organization": MISSING}, "organization"),
        ({"organization": "hopper-lab"}, "organization"),
        ({"name": ""}, "name"),
        ({"name": MISSING}, "name"),
        ({"name": "HOPPER"}, "name"),  # the owner has a cluster of this name, whatever its case
        ({"ssh_host": "login; rm -rf /"}, "ssh_host"),
        ({"ssh_host": MISSING}, "ssh_host"),
        ({"ssh_port": 0}, "ssh_port"),
        ({"ssh_port": 65536}, "ssh_port"),
        ({"ssh_port": "ssh"}, "ssh_port"),
        ({"ssh_user": "Root Account"}, "ssh_user"),
        ({"ssh_private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nnope\n"}, "ssh_private_key"),
        ({"ssh_private_key": MISSING}, "ssh_private_key"),
        ({"ssh_host_key": "ssh-ed25519"}, "ssh_host_key"),
        ({"ssh_host_key": "ssh-ed25519 not*base64"}, "ssh_host_key"),
        ({"ssh_host_key": MISSING}, "ssh_host_key"),
        ({"account_mode": "shared"}, "account_mode"),
        ({"account_mode": "fixed"}, "slurm_account"),  # fixed mode names the account
        ({"account_mode": "managed", "slurm_account": "share_acct"}, "slurm_account"),
        ({"market_qos": "Computeshare-Market"}, "market_qos"),
        ({"market_qos": "market qos"}, "market_qos"),
        ({"market_qos": "q" * 65}, "market_qos"),
    ],
)
def test_bad_cluster_bodies_are_invalid_and_change_nothing(market, keys, host, changes, field):
    before = snapshot()

    answer = client_for(market.owner_admin).post(
        f"{API}/clusters/", cluster_body(market, keys, host, **changes), format="json"
    )

    assert_refused(answer, 400, "invalid", field)
    assert_no_secret(answer.content, keys.private)
    assert snapshot() == before


def test_cluster_for_an_organization_the_caller_is_not_in_is_invalid(market, keys, host):
    before = snapshot()

    answer = client_for(market.team_admin).post(
        f"{API}/clusters/", cluster_body(market, keys, host), format="json"
    )

    body = assert_refused(answer, 400, "invalid", "organization")
    assert body["extra"]["fields"] == {
        "organization": ["You are not a member of this organization."]
    }
    assert snapshot() == before


def test_cluster_create_by_a_member_who_is_not_admin_is_403(market, keys, host):
    before = snapshot()

    answer = client_for(market.owner_member).post(
        f"{API}/clusters/", cluster_body(market, keys, host), format="json"
    )

    assert_refused(answer, 403, "permission_denied")
    assert snapshot() == before


def test_cluster_create_without_a_token_is_401(market, keys, host):
    before = snapshot()

    answer = APIClient().post(f"{API}/clusters/", cluster_body(market, keys, host), format="json")

    assert_refused(answer, 401, "not_authenticated")
    assert snapshot() == before


def test_cluster_create_replays_for_the_same_key_and_refuses_another_body(market, keys, host):
    client = client_for(market.owner_admin)
    body = cluster_body(market, keys, host)

    first = client.post(f"{API}/clusters/", body, format="json", HTTP_IDEMPOTENCY_KEY="c-1")
    after_first = snapshot()
    again = client.post(f"{API}/clusters/", body, format="json", HTTP_IDEMPOTENCY_KEY="c-1")
    other = client.post(
        f"{API}/clusters/", {**body, "name": "Other"}, format="json", HTTP_IDEMPOTENCY_KEY="c-1"
    )

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert_refused(other, 409, "idempotency_key_reused")
    assert snapshot() == after_first
    assert Cluster.objects.filter(organization=market.owner, name="Frontier").count() == 1
    assert not Cluster.objects.filter(name="Other").exists()


def test_verify_by_a_member_or_another_team_is_403_and_connects_nowhere(market):
    Cluster.objects.filter(pk=market.cluster.pk).update(status=Cluster.Status.UNVERIFIED)
    before = snapshot()
    path = f"{API}/clusters/{market.cluster.uuid}/verify/"

    by_member = client_for(market.owner_member).post(path)
    by_team = client_for(market.team_admin).post(path)

    assert_refused(by_member, 403, "permission_denied")
    assert_refused(by_team, 403, "permission_denied")
    assert snapshot() == before


def test_verifying_a_suspended_cluster_is_409_and_it_stays_suspended(market):
    services.cluster_suspend(cluster=market.cluster, reason="Disputed usage")
    before = snapshot()

    answer = client_for(market.owner_admin).post(f"{API}/clusters/{market.cluster.uuid}/verify/")

    assert_refused(answer, 409, "cluster_suspended")
    assert snapshot() == before
    assert Cluster.objects.get(pk=market.cluster.pk).status == Cluster.Status.SUSPENDED


def verify_here(client: APIClient, cluster_id: str) -> Any:
    """Asks for a verification (202, the cluster with it `running`), runs it in this process
    as the worker would (nothing commits in this test, so no worker gets it), and returns the
    cluster's GET, which shows how it ended."""
    asked = client.post(f"{API}/clusters/{cluster_id}/verify/")
    assert asked.status_code == 202, asked.content
    assert asked["Location"] == f"{API}/clusters/{cluster_id}/"
    queued = asked.json()["verification"]
    assert (queued["status"], queued["step"], queued["steps"]) == (
        "running",
        "Waiting for a worker",
        [],
    )
    verification = ClusterVerification.objects.get(uuid=queued["id"])
    services.cluster_verification_run(verification_id=verification.pk)
    return client.get(f"{API}/clusters/{cluster_id}/")


@pytest.mark.slurm
def test_verify_reads_the_partitions_of_the_real_cluster(market, testcluster):
    client = client_for(market.owner_admin)
    created = client.post(
        f"{API}/clusters/",
        {
            "organization": str(market.owner.uuid),
            "name": "testcluster",
            "ssh_host": testcluster.host,
            "ssh_port": testcluster.port,
            "ssh_user": testcluster.user,
            "ssh_private_key": testcluster.private_key,
            "ssh_host_key": testcluster.host_key,
            "account_mode": "fixed",
            "slurm_account": testcluster.fixed_pool.account,
            "tenant_group": testcluster.fixed_pool.group,
            "sftp_server": testcluster.sftp_server,
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    assert (created.json()["tenant_group"], created.json()["sftp_server"]) == (
        testcluster.fixed_pool.group,
        testcluster.sftp_server,
    )

    answer = verify_here(client, created.json()["id"])

    assert answer.status_code == 200, answer.content
    cluster = Cluster.objects.get(uuid=created.json()["id"])
    partition = cluster.partitions.get()
    assert partition.cpus > 0
    body = answer.json()
    assert (body["id"], body["status"], body["status_detail"]) == (str(cluster.uuid), "online", "")
    assert body["verified_at"] == iso(cluster.verified_at)
    assert body["partitions"] == [
        {
            "name": testcluster.partition,
            "cpus": partition.cpus,
            "gpus": 0,
            "nodes": 1,
            "max_time_minutes": None,
            "is_up": True,
        }
    ]
    pool = testcluster.fixed_pool
    assert body["tenant_accounts"] == {"total": len(pool.tenants), "free": len(pool.tenants)}
    assert body["tracks_gpus"] == cluster.tracks_gpus
    assert (body["verification"]["status"], body["verification"]["code"]) == ("succeeded", "")
    assert body["verification"]["failed_step"] is None
    steps = {step["key"]: step for step in body["verification"]["steps"]}
    # Fixed mode: no Slurm operator, QOS or idle account is needed.
    assert list(steps) == [
        "connect",
        "partitions",
        "queries",
        "visibility",
        "pool",
        "sudo",
        "homes",
        "sftp",
        "sbatch",
        "gpus",
        "proctrack",
        "nodes",
        "preemption",
        "reservations",
    ]
    assert {key for key, step in steps.items() if step["status"] != "passed"} == {"proctrack"}
    # One job as the first tenant on the cluster's one node, which is also its login node.
    assert steps["nodes"]["detail"] == (
        f"As {pool.tenants[0].user} on vm: the login node's uid, the shared home, no other "
        "users' processes."
    )
    assert steps["pool"]["detail"] == f"{len(pool.tenants)} accounts: " + ", ".join(
        tenant.user for tenant in pool.tenants
    )
    assert steps["sftp"]["title"] == f"SFTP as a tenant ({pool.tenants[0].user})"
    # The test cluster has no GPUs: nothing to meter yet, which passes with a word of advice.
    assert steps["gpus"]["detail"] == (
        ""
        if cluster.tracks_gpus
        else "No GPUs here; add gres/gpu to AccountingStorageTRES before adding any."
    )
    # Its nodes track processes with proctrack/linuxproc: usable, with the risk said.
    assert steps["proctrack"]["status"] == "warning"
    assert steps["proctrack"]["detail"].startswith("ProctrackType is proctrack/")
    assert set(cluster.tenant_accounts.values_list("username", flat=True)) == {
        tenant.user for tenant in pool.tenants
    }
    assert_no_secret(answer.content, testcluster.private_key)


def test_a_verification_that_fails_a_check_ends_misconfigured_with_the_steps(market, testcluster):
    """The real cluster, registered with a tenant group it does not have: it answers, so the
    checks run up to the pool, which fails; the cluster is `misconfigured` and no pool is
    recorded."""
    client = client_for(market.owner_admin)
    created = client.post(
        f"{API}/clusters/",
        {
            "organization": str(market.owner.uuid),
            "name": "testcluster",
            "ssh_host": testcluster.host,
            "ssh_port": testcluster.port,
            "ssh_user": testcluster.user,
            "ssh_private_key": testcluster.private_key,
            "ssh_host_key": testcluster.host_key,
            "account_mode": "fixed",
            "slurm_account": testcluster.fixed_pool.account,
            "tenant_group": "no-such-group",
        },
        format="json",
    )
    assert created.status_code == 201, created.content

    answer = verify_here(client, created.json()["id"])

    verification = answer.json()["verification"]
    assert (verification["status"], verification["code"], verification["failed_step"]) == (
        "failed",
        "cluster_misconfigured",
        "pool",
    )
    steps = verification["steps"]
    assert [(step["key"], step["status"]) for step in steps] == [
        ("connect", "passed"),
        ("partitions", "passed"),
        ("queries", "passed"),
        ("visibility", "passed"),
        ("pool", "failed"),
    ]
    assert steps[-1]["detail"] == (
        "no group no-such-group on the login node: run scripts/cluster-setup there."
    )
    cluster = Cluster.objects.get(uuid=created.json()["id"])
    assert cluster.status == Cluster.Status.MISCONFIGURED
    assert not cluster.tenant_accounts.exists()
    assert not cluster.partitions.exists()
    shown = client.get(f"{API}/clusters/{cluster.uuid}/").json()
    assert (shown["status"], shown["tenant_accounts"]) == (
        "misconfigured",
        {"total": 0, "free": 0},
    )


# --- Offers: create --------------------------------------------------------------------------


def offer_body(market: Market, **changes: Any) -> dict[str, Any]:
    closes = whole_hour(days=1)
    body: dict[str, Any] = {
        "cluster": str(market.cluster.uuid),
        "partition": "debug",
        "resource": "cpu",
        "quantity": 1000,
        "window_start": iso(closes + timedelta(days=1)),
        "window_end": iso(closes + timedelta(days=11)),
        "reserve_price": "0.05",
        "buy_now_price": "0.12",
        "auction_closes_at": iso(closes),
        "max_per_buyer": 400,
    }
    body.update(changes)
    return {name: value for name, value in body.items() if value is not MISSING}


def test_offer_create_lists_the_capacity(market):
    body = offer_body(market)

    answer = client_for(market.owner_admin).post(f"{API}/offers/", body, format="json")

    assert answer.status_code == 201, answer.content
    offer = Offer.objects.get()
    assert answer.json() == {
        "id": str(offer.uuid),
        "cluster": str(market.cluster.uuid),
        "cluster_name": "hopper",
        "partition": "debug",
        "resource": "cpu",
        "capacity": "preemptible",
        "quantity": "1000",
        "quantity_unit": "core-hours",
        "unit_hours": 1,
        "preemption_grace_seconds": 120,
        "remaining": "1000",
        "window_start": body["window_start"],
        "window_end": body["window_end"],
        "reserve_price": "0.050000",
        "buy_now_price": "0.120000",
        "auction_closes_at": body["auction_closes_at"],
        "max_per_buyer": "400",
        "status": "open",
        "clearing_price": None,
        "cleared_at": None,
        "bid_count": 0,
        "units_bid": "0",
        "currency": "USD",
        "created_at": iso(offer.created_at),
        "tenant_accounts": {"total": 24, "free": 24},
        "hardware": {
            "nodes": 4,
            "cpus_per_node": 64,
            "memory_per_node_mb": 262144,
            "gpus_per_node": 2,
            "gpu_types": ["a100"],
            "features": ["avx2", "ib"],
            "nodes_differ": False,
        },
    }
    assert (offer.partition, offer.created_by) == (market.partition, market.owner_admin)


def test_offer_create_without_buy_now_or_cap(market):
    body = offer_body(
        market, resource="gpu", quantity="80", buy_now_price=MISSING, max_per_buyer=None
    )

    answer = client_for(market.owner_admin).post(f"{API}/offers/", body, format="json")

    assert answer.status_code == 201, answer.content
    assert (
        answer.json()["resource"],
        answer.json()["quantity"],
        answer.json()["buy_now_price"],
        answer.json()["max_per_buyer"],
    ) == ("gpu", "80", None, None)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cluster": MISSING}, "cluster"),
        ({"cluster": "hopper"}, "cluster"),
        ({"cluster": str(uuid.UUID(int=7))}, "cluster"),  # no such cluster
        ({"partition": MISSING}, "partition"),
        ({"partition": "nope"}, "partition"),
        ({"partition": "down"}, "partition"),  # the cluster has it, but it is down
        ({"resource": "tpu"}, "resource"),
        ({"resource": "gpu", "partition": "cpuonly"}, "resource"),
        ({"quantity": MISSING}, "quantity"),
        ({"quantity": "12.5"}, "quantity"),
        ({"quantity": 12.5}, "quantity"),
        ({"quantity": "many"}, "quantity"),
        ({"quantity": 0}, "quantity"),
        ({"quantity": 62_000}, "quantity"),  # 256 CPUs x 240 hours is 61,440 units
        ({"reserve_price": MISSING}, "reserve_price"),
        ({"reserve_price": "cheap"}, "reserve_price"),
        ({"reserve_price": "0.0000001"}, "reserve_price"),
        ({"reserve_price": "0"}, "reserve_price"),
        ({"reserve_price": "-1"}, "reserve_price"),
        ({"buy_now_price": "0.04"}, "buy_now_price"),  # below the reserve
        ({"buy_now_price": "a lot"}, "buy_now_price"),
        ({"max_per_buyer": 1001}, "max_per_buyer"),
        ({"max_per_buyer": "2.5"}, "max_per_buyer"),
        ({"max_per_buyer": 0}, "max_per_buyer"),
        ({"window_start": MISSING}, "window_start"),
        ({"window_start": "next tuesday"}, "window_start"),
        ({"window_end": "2031-02-30T00:00:00Z"}, "window_end"),
        ({"window_end": "2000-01-02T00:00:00Z"}, "window_end"),  # before it starts, and past
        ({"auction_closes_at": MISSING}, "auction_closes_at"),
        ({"auction_closes_at": "2000-01-01T00:00:00Z"}, "auction_closes_at"),  # past
        ({"auction_closes_at": "2099-01-01T00:00:00Z"}, "auction_closes_at"),  # after the window
    ],
)
def test_bad_offer_bodies_are_invalid_and_change_nothing(market, changes, field):
    PartitionFactory(cluster=market.cluster, name="cpuonly", gpus=0)
    PartitionFactory(cluster=market.cluster, name="down", is_up=False)
    before = snapshot()

    answer = client_for(market.owner_admin).post(
        f"{API}/offers/", offer_body(market, **changes), format="json"
    )

    assert_refused(answer, 400, "invalid", field)
    assert snapshot() == before


def test_an_unknown_cluster_in_the_offer_body_is_a_field_error(market):
    answer = client_for(market.owner_admin).post(
        f"{API}/offers/", offer_body(market, cluster=str(uuid.UUID(int=7))), format="json"
    )

    body = assert_refused(answer, 400, "invalid")
    assert body["extra"]["fields"] == {"cluster": ["No such cluster."]}


@pytest.mark.parametrize("status", ["unverified", "unreachable", "host_key_mismatch", "suspended"])
def test_offer_on_a_cluster_that_is_not_online_is_409(market, status):
    Cluster.objects.filter(pk=market.cluster.pk).update(status=status)
    before = snapshot()

    answer = client_for(market.owner_admin).post(
        f"{API}/offers/", offer_body(market), format="json"
    )

    body = assert_refused(answer, 409, "cluster_not_online")
    assert body["extra"] == {"cluster": str(market.cluster.uuid), "status": status}
    assert snapshot() == before


@pytest.mark.parametrize("who", ["owner_member", "team_admin"])
def test_offer_create_by_anyone_but_an_owner_admin_is_403(market, who):
    before = snapshot()

    answer = client_for(getattr(market, who)).post(
        f"{API}/offers/", offer_body(market), format="json"
    )

    assert_refused(answer, 403, "permission_denied")
    assert snapshot() == before


def test_offer_create_replays_for_the_same_key_and_refuses_another_body(market):
    client = client_for(market.owner_admin)
    body = offer_body(market)

    first = client.post(f"{API}/offers/", body, format="json", HTTP_IDEMPOTENCY_KEY="o-1")
    after_first = snapshot()
    again = client.post(f"{API}/offers/", body, format="json", HTTP_IDEMPOTENCY_KEY="o-1")
    other = client.post(
        f"{API}/offers/", {**body, "quantity": 999}, format="json", HTTP_IDEMPOTENCY_KEY="o-1"
    )

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert again.json()["id"] == str(Offer.objects.get().uuid)
    assert_refused(other, 409, "idempotency_key_reused")
    assert snapshot() == after_first


# --- Offers: read ------------------------------------------------------------------------------


def test_offer_detail_shows_the_aggregate_demand_and_never_a_bid(market):
    offer = offer_for_sale(market, max_per_buyer=60)
    place_bid(market.team, offer, 40, "2.345678")
    place_bid(market.rival, offer, 25, "1.987654")

    answer = client_for(market.rival_admin).get(f"{API}/offers/{offer.uuid}/")

    assert answer.status_code == 200
    assert answer.json() == {
        "id": str(offer.uuid),
        "cluster": str(market.cluster.uuid),
        "cluster_name": "hopper",
        "partition": "debug",
        "resource": "cpu",
        "capacity": "preemptible",
        "quantity": "100",
        "quantity_unit": "core-hours",
        "unit_hours": 1,
        "preemption_grace_seconds": 120,
        "remaining": "100",
        "window_start": iso(offer.window_start),
        "window_end": iso(offer.window_end),
        "reserve_price": "1.000000",
        "buy_now_price": "3.000000",
        "auction_closes_at": iso(offer.auction_closes_at),
        "max_per_buyer": "60",
        "status": "open",
        "clearing_price": None,
        "cleared_at": None,
        "bid_count": 2,
        "units_bid": "65",
        "currency": "USD",
        "created_at": iso(offer.created_at),
        "tenant_accounts": {"total": 24, "free": 24},
        "hardware": {
            "nodes": 4,
            "cpus_per_node": 64,
            "memory_per_node_mb": 262144,
            "gpus_per_node": 2,
            "gpu_types": ["a100"],
            "features": ["avx2", "ib"],
            "nodes_differ": False,
        },
    }
    for secret in ("2.345678", "1.987654", "Quantum Lab", str(market.team.uuid)):
        assert secret not in answer.content.decode()
        assert secret not in client_for(market.rival_admin).get(f"{API}/offers/").content.decode()


def test_a_cleared_offer_shows_its_clearing_price(market):
    offer = offer_for_sale(market)
    for organization, quantity, price in [(market.team, 70, "2.50"), (market.rival, 50, "1.80")]:
        place_bid(organization, offer, quantity, price)
    cleared = clear(offer)

    answer = client_for(market.team_member).get(f"{API}/offers/{offer.uuid}/")

    body = answer.json()
    assert (body["status"], body["clearing_price"], body["remaining"]) == (
        "cleared",
        "1.800000",
        "0",
    )
    assert body["cleared_at"] == iso(cleared.cleared_at)
    assert (body["bid_count"], body["units_bid"]) == (2, "120")


@pytest.mark.parametrize(
    "path",
    [
        "clusters/{id}/",
        "offers/{id}/",
        "bids/{id}/",
        "allocations/{id}/",
    ],
)
def test_unknown_or_malformed_ids_are_404(market, path):
    client = client_for(market.team_admin)

    unknown = client.get(f"{API}/{path.format(id=uuid.uuid4())}")
    malformed = client.get(f"{API}/{path.format(id='not-a-uuid')}")

    assert_refused(unknown, 404, "not_found")
    assert_refused(malformed, 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "clusters/{id}/verify/", {}),
        ("post", "offers/{id}/buy/", {"quantity": 1}),
        ("post", "offers/{id}/bids/", {"quantity": 1, "price": "5"}),
        ("post", "offers/{id}/cancel/", {}),
        ("delete", "bids/{id}/", {}),
    ],
)
def test_writes_to_unknown_ids_are_404_and_change_nothing(market, method, path, body):
    offer = offer_for_sale(market)
    place_bid(market.team, offer, 10, "2")
    before = snapshot()

    answer = getattr(client_for(market.team_admin), method)(
        f"{API}/{path.format(id=uuid.uuid4())}",
        {**body, "organization": str(market.team.uuid)},
        format="json",
    )

    assert_refused(answer, 404, "not_found")
    assert snapshot() == before


# --- Offers: the list, its filters and its order ---------------------------------------------


@dataclass
class Listing:
    """Four offers whose orders by close, start and price all differ:

    | offer | cluster/partition | resource | remaining | reserve | closes | window    | status    |
    | c     | frontier/batch    | cpu      | 300       | 0.50    | day 1  | 5 to 30   | open      |
    | b     | hopper/debug      | gpu      | 10 of 50  | 3.00    | day 1.5| 3 to 5    | open      |
    | a     | hopper/debug      | cpu      | 100       | 1.00    | day 2  | 2 to 12   | open      |
    | d     | hopper/batch      | cpu      | 100       | 2.00    | day 3  | 4 to 8    | cancelled |
    """

    a: Offer
    b: Offer
    c: Offer
    d: Offer
    frontier: Cluster

    def ids(self, *names: str) -> list[str]:
        return [str(getattr(self, name).uuid) for name in names]


@pytest.fixture
def listing(market: Market) -> Listing:
    day = whole_hour(days=0)
    frontier = ClusterFactory(name="frontier")
    frontier_batch = PartitionFactory(cluster=frontier, name="batch", cpus=64)
    hopper_batch = PartitionFactory(cluster=market.cluster, name="batch", cpus=64)

    def offer(
        partition: Partition, closes: float, starts: float, ends: float, **fields: Any
    ) -> Offer:
        return OfferFactory(
            partition=partition,
            auction_closes_at=day + timedelta(days=closes),
            window_start=day + timedelta(days=starts),
            window_end=day + timedelta(days=ends),
            **fields,
        )

    return Listing(
        a=offer(market.partition, reserve_price=Decimal("1.00"), closes=2, starts=2, ends=12),
        b=offer(
            market.partition,
            resource="gpu",
            quantity=50,
            units_sold=40,
            reserve_price=Decimal("3.00"),
            closes=1.5,
            starts=3,
            ends=5,
        ),
        c=offer(
            frontier_batch,
            quantity=300,
            reserve_price=Decimal("0.50"),
            closes=1,
            starts=5,
            ends=30,
        ),
        d=offer(
            hopper_batch,
            reserve_price=Decimal("2.00"),
            status=Offer.Status.CANCELLED,
            closes=3,
            starts=4,
            ends=8,
        ),
        frontier=frontier,
    )


def listed(user: User, query: str) -> list[str]:
    answer = client_for(user).get(f"{API}/offers/?{query}")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["count"] == len(body["results"])
    return [row["id"] for row in body["results"]]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", "cbad"),  # by auction close when no order is asked for
        ("resource=gpu", "b"),
        ("resource=cpu", "cad"),
        ("cluster={frontier}", "c"),
        ("cluster={hopper}", "bad"),
        ("partition=batch", "cd"),
        ("partition=debug", "ba"),
        ("status=open", "cba"),
        ("status=cancelled", "d"),
        ("status=cleared", ""),
        ("min_quantity=10", "cbad"),
        ("min_quantity=11", "cad"),  # b has 10 of its 50 units left
        ("min_quantity=101", "c"),
        ("max_price=1.00", "ca"),
        ("max_price=0.99", "c"),
        ("window_starts_before={day_3_5}", "ba"),
        ("window_ends_after={day_10}", "ca"),
        ("resource=cpu&cluster={hopper}&max_price=1", "a"),
        ("ordering=reserve_price", "cadb"),
        ("ordering=-reserve_price", "bdac"),
        ("ordering=window_start", "abdc"),
        ("ordering=auction_closes_at", "cbad"),
        ("ordering=-reserve_price&resource=cpu&status=open", "ac"),
    ],
)
def test_offer_filters_and_orders(market, listing, query, expected):
    day = whole_hour(days=0)
    query = query.format(
        frontier=listing.frontier.uuid,
        hopper=market.cluster.uuid,
        day_3_5=iso(day + timedelta(days=3.5)),
        day_10=iso(day + timedelta(days=10)),
    )

    assert listed(market.team_member, query) == listing.ids(*expected)


def test_offer_list_pages(market, listing):
    client = client_for(market.team_member)

    first = client.get(f"{API}/offers/?page_size=3").json()
    second = client.get(f"{API}/offers/?page_size=3&page=2").json()

    assert first["count"] == second["count"] == 4
    assert first["next"] == "http://testserver/api/v1/offers/?page=2&page_size=3"
    assert first["previous"] is None
    assert second["next"] is None
    assert [row["id"] for row in first["results"] + second["results"]] == listing.ids(*"cbad")


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("resource=tpu", "resource"),
        ("cluster=hopper", "cluster"),
        ("partition=" + "p" * 65, "partition"),
        ("status=closed", "status"),
        ("min_quantity=many", "min_quantity"),
        ("min_quantity=-1", "min_quantity"),
        ("max_price=cheap", "max_price"),
        ("max_price=-0.5", "max_price"),
        ("window_starts_before=tomorrow", "window_starts_before"),
        ("window_ends_after=2031-13-01T00:00:00Z", "window_ends_after"),
        ("ordering=price", "ordering"),
        ("ordering=bid_count", "ordering"),
        ("page_size=201", "page_size"),
        ("page_size=0", "page_size"),
    ],
)
def test_bad_offer_filters_are_400_naming_the_parameter(market, query, parameter):
    answer = client_for(market.team_member).get(f"{API}/offers/?{query}")

    body = assert_refused(answer, 400, "invalid")
    assert list(body["extra"]["fields"]) == [parameter]


# --- Offers: cancel --------------------------------------------------------------------------


def test_offer_cancel_withdraws_an_offer_nobody_bid_on(market):
    offer = offer_for_sale(market)

    answer = client_for(market.owner_admin).post(f"{API}/offers/{offer.uuid}/cancel/")

    assert answer.status_code == 200, answer.content
    assert answer.json()["id"] == str(offer.uuid)
    assert answer.json()["status"] == "cancelled"
    offer.refresh_from_db()
    assert offer.status == Offer.Status.CANCELLED


def test_cancelling_twice_is_409_offer_not_open(market):
    offer = offer_for_sale(market, status=Offer.Status.CANCELLED)
    before = snapshot()

    answer = client_for(market.owner_admin).post(f"{API}/offers/{offer.uuid}/cancel/")

    assert_refused(answer, 409, "offer_not_open")
    assert snapshot() == before


@pytest.mark.parametrize("how", ["bid", "bought"])
def test_an_offer_with_bids_or_sales_cannot_be_cancelled(market, how):
    offer = offer_for_sale(market)
    if how == "bid":
        place_bid(market.team, offer, 5, "2")
    else:
        services.offer_buy(actor=admin_membership(market.team), offer=offer, quantity=5)
    before = snapshot()

    answer = client_for(market.owner_admin).post(f"{API}/offers/{offer.uuid}/cancel/")

    assert_refused(answer, 409, "offer_has_bids")
    assert snapshot() == before


@pytest.mark.parametrize("who", ["owner_member", "team_admin"])
def test_offer_cancel_by_anyone_but_an_owner_admin_is_403(market, who):
    offer = offer_for_sale(market)
    before = snapshot()

    answer = client_for(getattr(market, who)).post(f"{API}/offers/{offer.uuid}/cancel/")

    assert_refused(answer, 403, "permission_denied")
    assert snapshot() == before


# --- Buy now ---------------------------------------------------------------------------------


def buy(user: User, offer: Offer, organization: Organization, quantity: Any, **headers: str):
    return client_for(user).post(
        f"{API}/offers/{offer.uuid}/buy/",
        {"organization": str(organization.uuid), "quantity": quantity},
        format="json",
        **headers,
    )


def test_buy_now_makes_an_allocation_and_holds_its_price(market):
    offer = offer_for_sale(market)

    answer = buy(market.team_admin, offer, market.team, 40)

    assert answer.status_code == 201, answer.content
    allocation = Allocation.objects.get()
    assert answer.json() == {
        "id": str(allocation.uuid),
        "organization": str(market.team.uuid),
        "offer": str(offer.uuid),
        "cluster": str(market.cluster.uuid),
        "cluster_name": "hopper",
        "partition": "debug",
        "resource": "cpu",
        "capacity": "preemptible",
        "source": "buy_now",
        "quantity": "40",
        "block": None,
        "reservation": "",
        "reservation_problem": "",
        "used": "0",
        "reserved": "0",
        "remaining": "40",
        "unit_price": "3.000000",
        "held": "120.000000",
        "currency": "USD",
        "window_start": iso(offer.window_start),
        "window_end": iso(offer.window_end),
        "status": "upcoming",
        "created_at": iso(allocation.created_at),
    }
    assert wallet(market.team) == (Decimal("880"), Decimal("120"))
    assert allocation.hold.amount == Decimal("120")
    offer_answer = client_for(market.rival_admin).get(f"{API}/offers/{offer.uuid}/").json()
    assert offer_answer["remaining"] == "60"


def test_buy_accepts_the_quantity_as_a_decimal_string(market):
    offer = offer_for_sale(market)

    answer = buy(market.team_admin, offer, market.team, "60.000")

    assert answer.status_code == 201, answer.content
    assert answer.json()["quantity"] == "60"
    assert Offer.objects.get(pk=offer.pk).units_sold == 60


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"quantity": 5}, "organization"),
        ({"organization": "quantum-lab", "quantity": 5}, "organization"),
        ({"organization": "{team}"}, "quantity"),
        ({"organization": "{team}", "quantity": "1.5"}, "quantity"),
        ({"organization": "{team}", "quantity": 2.5}, "quantity"),
        ({"organization": "{team}", "quantity": "five"}, "quantity"),
        ({"organization": "{team}", "quantity": 0}, "quantity"),
        ({"organization": "{team}", "quantity": -3}, "quantity"),
        ({"organization": "{rival}", "quantity": 5}, "organization"),  # not the caller's
        ({"organization": "{owner}", "quantity": 5}, "organization"),  # not the caller's
    ],
)
def test_bad_purchases_are_invalid_and_change_nothing(market, body, field):
    offer = offer_for_sale(market)
    names = {"team": market.team.uuid, "rival": market.rival.uuid, "owner": market.owner.uuid}
    body = {name: str(value).format(**names) for name, value in body.items()}
    before = snapshot()

    answer = client_for(market.team_admin).post(
        f"{API}/offers/{offer.uuid}/buy/", body, format="json"
    )

    assert_refused(answer, 400, "invalid", field)
    assert snapshot() == before


def test_an_owner_buying_its_own_capacity_is_invalid(market):
    offer = offer_for_sale(market)
    billing.wallet_adjust(organization=market.owner, amount="500", memo="test", actor=None)
    before = snapshot()

    answer = buy(market.owner_admin, offer, market.owner, 5)

    body = assert_refused(answer, 400, "invalid")
    assert body["extra"]["fields"] == {
        "organization": ["An organization cannot buy its own capacity."]
    }
    assert snapshot() == before


def make_offer_stop_selling(market: Market, offer: Offer, state: str) -> None:
    if state == "cancelled":
        Offer.objects.filter(pk=offer.pk).update(status=Offer.Status.CANCELLED)
    elif state == "closed":  # the auction has closed; the clearing has not run yet
        Offer.objects.filter(pk=offer.pk).update(auction_closes_at=timezone.now())
    elif state == "cleared":
        clear(offer)
    else:
        services.cluster_suspend(cluster=market.cluster, reason="Disputed usage")


SOLD_OUT_STATES = ["cancelled", "closed", "cleared", "cluster suspended"]


@pytest.mark.parametrize("state", SOLD_OUT_STATES)
def test_buying_from_an_offer_that_no_longer_sells_is_409(market, state):
    offer = offer_for_sale(market)
    make_offer_stop_selling(market, offer, state)
    before = snapshot()

    answer = buy(market.team_admin, offer, market.team, 5)

    assert_refused(answer, 409, "offer_not_open")
    assert snapshot() == before


def test_buying_more_than_is_left_is_409(market):
    offer = offer_for_sale(market, units_sold=95)
    before = snapshot()

    answer = buy(market.team_admin, offer, market.team, 6)

    body = assert_refused(answer, 409, "insufficient_quantity")
    assert body["extra"] == {"remaining": 5, "asked": 6}
    assert snapshot() == before


def test_buying_an_offer_without_a_buy_now_price_is_409(market):
    offer = offer_for_sale(market, buy_now_price=None)
    before = snapshot()

    answer = buy(market.team_admin, offer, market.team, 5)

    assert_refused(answer, 409, "buy_now_not_offered")
    assert snapshot() == before


def test_buying_past_the_cap_per_buyer_counts_open_bids_too(market):
    offer = offer_for_sale(market, max_per_buyer=10)
    place_bid(market.team, offer, 6, "2")
    before = snapshot()

    answer = buy(market.team_admin, offer, market.team, 5)

    body = assert_refused(answer, 409, "max_per_buyer_exceeded")
    assert body["extra"] == {"max_per_buyer": 10, "already": 6, "asked": 5}
    assert snapshot() == before
    assert buy(market.team_admin, offer, market.team, 4).status_code == 201


def test_buying_without_the_money_is_402_insufficient_funds(market):
    offer = offer_for_sale(market)
    poor = funded_organization("10", name="Poor Lab")
    poor_admin = MembershipFactory(organization=poor, role=Membership.Role.ADMIN).user
    before = snapshot()

    answer = buy(poor_admin, offer, poor, 4)

    body = assert_refused(answer, 402, "insufficient_funds")
    assert body["extra"] == {"available": "10.000000", "required": "12.000000", "currency": "USD"}
    assert snapshot() == before
    assert wallet(poor) == (Decimal("10"), Decimal("0"))


def test_buying_past_the_budget_is_402_budget_exceeded(market):
    offer = offer_for_sale(market)
    billing.budget_set(
        organization=market.team, monthly_limit=Decimal("20.00"), alert_thresholds=[]
    )
    before = snapshot()

    answer = buy(market.team_admin, offer, market.team, 7)

    body = assert_refused(answer, 402, "budget_exceeded")
    assert body["extra"]["monthly_limit"] == "20.00"
    assert body["extra"]["requested"] == "21.000000"
    assert snapshot() == before


def test_buy_by_a_member_who_is_not_admin_is_403(market):
    offer = offer_for_sale(market)
    before = snapshot()

    answer = buy(market.team_member, offer, market.team, 5)

    assert_refused(answer, 403, "permission_denied")
    assert snapshot() == before


def test_buy_replays_for_the_same_key_and_refuses_another_body(market):
    offer = offer_for_sale(market)

    first = buy(market.team_admin, offer, market.team, 5, HTTP_IDEMPOTENCY_KEY="buy-1")
    after_first = snapshot()
    again = buy(market.team_admin, offer, market.team, 5, HTTP_IDEMPOTENCY_KEY="buy-1")
    other = buy(market.team_admin, offer, market.team, 6, HTTP_IDEMPOTENCY_KEY="buy-1")

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert again.json()["id"] == str(Allocation.objects.get().uuid)
    assert_refused(other, 409, "idempotency_key_reused")
    assert snapshot() == after_first
    assert wallet(market.team) == (Decimal("985"), Decimal("15"))


# --- Bids --------------------------------------------------------------------------------------


def bid(user: User, offer: Offer, organization: Organization, **fields: Any):
    headers = {name: fields.pop(name) for name in list(fields) if name.startswith("HTTP_")}
    return client_for(user).post(
        f"{API}/offers/{offer.uuid}/bids/",
        {"organization": str(organization.uuid), **fields},
        format="json",
        **headers,
    )


def test_a_bid_is_placed_sealed_and_holds_its_price(market):
    offer = offer_for_sale(market)

    answer = bid(market.team_admin, offer, market.team, quantity=40, price="2.50", min_quantity=10)

    assert answer.status_code == 201, answer.content
    placed = Bid.objects.get()
    assert answer.json() == {
        "id": str(placed.uuid),
        "offer": str(offer.uuid),
        "organization": str(market.team.uuid),
        "price": "2.500000",
        "quantity": "40",
        "min_quantity": "10",
        "status": "open",
        "quantity_won": "0",
        "price_paid": None,
        "held": "100.000000",
        "hold_status": "open",
        "currency": "USD",
        "created_at": iso(placed.created_at),
        "withdrawn_at": None,
    }
    assert wallet(market.team) == (Decimal("900"), Decimal("100"))
    assert (placed.hold.amount, placed.placed_by) == (Decimal("100"), market.team_admin)
    offer.refresh_from_db()
    assert (offer.bid_count, offer.units_bid) == (1, 40)


def test_a_bid_at_the_reserve_is_accepted(market):
    offer = offer_for_sale(market)

    answer = bid(market.team_admin, offer, market.team, quantity=1, price="1.000000")

    assert answer.status_code == 201, answer.content
    assert (answer.json()["price"], answer.json()["min_quantity"]) == ("1.000000", "1")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"quantity": 10, "price": "0.99"}, "price"),  # below the reserve of 1.00
        ({"quantity": 10, "price": "0.999999"}, "price"),
        ({"quantity": 10}, "price"),
        ({"quantity": 10, "price": "two"}, "price"),
        ({"quantity": 10, "price": "2.0000001"}, "price"),
        ({"quantity": 10, "price": "0"}, "price"),
        ({"quantity": 10, "price": "-2"}, "price"),
        ({"price": "2"}, "quantity"),
        ({"quantity": "2.5", "price": "2"}, "quantity"),
        ({"quantity": 0, "price": "2"}, "quantity"),
        ({"quantity": 101, "price": "2"}, "quantity"),  # the offer has 100
        ({"quantity": 10, "min_quantity": 11, "price": "2"}, "min_quantity"),
        ({"quantity": 10, "min_quantity": "1.5", "price": "2"}, "min_quantity"),
        ({"quantity": 10, "min_quantity": 0, "price": "2"}, "min_quantity"),
    ],
)
def test_bad_bids_are_invalid_and_change_nothing(market, fields, field):
    offer = offer_for_sale(market)
    before = snapshot()

    answer = bid(market.team_admin, offer, market.team, **fields)

    assert_refused(answer, 400, "invalid", field)
    assert snapshot() == before


def test_a_bid_below_the_reserve_says_what_the_reserve_is(market):
    offer = offer_for_sale(market)

    answer = bid(market.team_admin, offer, market.team, quantity=10, price="0.5")

    body = assert_refused(answer, 400, "invalid")
    assert body["extra"]["fields"] == {
        "price": ["Must be at least the reserve price, 1.00 USD per core-hour."]
    }


@pytest.mark.parametrize("organization", ["rival", "owner"])
def test_a_bid_for_another_organization_is_invalid(market, organization):
    offer = offer_for_sale(market)
    before = snapshot()

    answer = bid(market.team_admin, offer, getattr(market, organization), quantity=10, price="2")

    body = assert_refused(answer, 400, "invalid")
    assert body["extra"]["fields"] == {
        "organization": ["You are not a member of this organization."]
    }
    assert snapshot() == before


@pytest.mark.parametrize("order", ["bid", "buy"])
def test_an_order_whose_total_no_wallet_could_hold_is_refused_in_the_requests_terms(market, order):
    """price x quantity past the largest amount the ledger takes (10^14) is refused as what it
    is: not enough money (402), or a 400 naming a field of the request. It must not name
    billing's internal `amount`, which the caller never sent."""
    offer = offer_for_sale(market, quantity=1_000_000, buy_now_price=Decimal("99999999999"))
    before = snapshot()

    if order == "bid":
        answer = bid(market.team_admin, offer, market.team, quantity=1_000_000, price="99999999999")
    else:
        answer = buy(market.team_admin, offer, market.team, 1_000_000)

    if answer.status_code == 402:
        assert answer.json()["code"] == "insufficient_funds"
    else:
        body = assert_refused(answer, 400, "invalid")
        assert body["extra"]["fields"]
        assert set(body["extra"]["fields"]) <= {"price", "quantity"}, body
    assert snapshot() == before


@pytest.mark.parametrize("state", SOLD_OUT_STATES)
def test_bidding_on_an_offer_that_no_longer_sells_is_409(market, state):
    offer = offer_for_sale(market)
    make_offer_stop_selling(market, offer, state)
    before = snapshot()

    answer = bid(market.team_admin, offer, market.team, quantity=10, price="2")

    assert_refused(answer, 409, "offer_not_open")
    assert snapshot() == before


def test_bidding_past_the_cap_per_buyer_is_409(market):
    offer = offer_for_sale(market, max_per_buyer=30)
    services.offer_buy(actor=admin_membership(market.team), offer=offer, quantity=20)
    before = snapshot()

    answer = bid(market.team_admin, offer, market.team, quantity=11, price="2")

    body = assert_refused(answer, 409, "max_per_buyer_exceeded")
    assert body["extra"] == {"max_per_buyer": 30, "already": 20, "asked": 11}
    assert snapshot() == before
    # Another team has its own cap.
    assert bid(market.rival_admin, offer, market.rival, quantity=30, price="2").status_code == 201


def test_a_bid_without_the_money_is_402_insufficient_funds(market):
    offer = offer_for_sale(market)
    billing.wallet_adjust(organization=market.team, amount="-990", memo="spent", actor=None)
    before = snapshot()

    answer = bid(market.team_admin, offer, market.team, quantity=10, price="1.01")

    body = assert_refused(answer, 402, "insufficient_funds")
    assert body["extra"] == {"available": "10.000000", "required": "10.100000", "currency": "USD"}
    assert snapshot() == before


def test_a_bid_past_the_budget_is_402_budget_exceeded(market):
    offer = offer_for_sale(market)
    billing.budget_set(
        organization=market.team, monthly_limit=Decimal("50.00"), alert_thresholds=[]
    )
    place_bid(market.team, offer, 20, "2")  # 40 committed
    before = snapshot()

    answer = bid(market.team_admin, offer, market.team, quantity=6, price="2")

    body = assert_refused(answer, 402, "budget_exceeded")
    assert (body["extra"]["committed_and_spent"], body["extra"]["requested"]) == (
        "40.000000",
        "12.000000",
    )
    assert snapshot() == before


def test_a_bid_by_a_member_who_is_not_admin_is_403(market):
    offer = offer_for_sale(market)
    before = snapshot()

    answer = bid(market.team_member, offer, market.team, quantity=10, price="2")

    assert_refused(answer, 403, "permission_denied")
    assert snapshot() == before


def test_a_bid_without_a_token_is_401(market):
    offer = offer_for_sale(market)
    before = snapshot()

    answer = APIClient().post(
        f"{API}/offers/{offer.uuid}/bids/",
        {"organization": str(market.team.uuid), "quantity": 10, "price": "2"},
        format="json",
    )

    assert_refused(answer, 401, "not_authenticated")
    assert snapshot() == before


def test_a_bid_replays_for_the_same_key_and_refuses_another_body(market):
    offer, another_offer = offer_for_sale(market), offer_for_sale(market)

    first = bid(
        market.team_admin, offer, market.team, quantity=10, price="2", HTTP_IDEMPOTENCY_KEY="b-1"
    )
    after_first = snapshot()
    again = bid(
        market.team_admin, offer, market.team, quantity=10, price="2", HTTP_IDEMPOTENCY_KEY="b-1"
    )
    other = bid(
        market.team_admin, offer, market.team, quantity=10, price="3", HTTP_IDEMPOTENCY_KEY="b-1"
    )
    elsewhere = client_for(market.team_admin).post(
        f"{API}/offers/{another_offer.uuid}/bids/",
        {"organization": str(market.team.uuid), "quantity": 10, "price": "2"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="b-1",
    )

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert (again.json()["id"], again.json()["status"]) == (str(Bid.objects.get().uuid), "open")
    assert_refused(other, 409, "idempotency_key_reused")
    assert_refused(elsewhere, 409, "idempotency_key_reused")
    assert snapshot() == after_first
    assert wallet(market.team) == (Decimal("980"), Decimal("20"))


# --- Bids: reading them --------------------------------------------------------------------------


def test_bids_are_listed_only_to_the_bidding_organizations_members(market):
    offer = offer_for_sale(market)
    ours = place_bid(market.team, offer, 10, "2")
    theirs = place_bid(market.rival, offer, 20, "3")
    both = MembershipFactory(organization=market.team, role=Membership.Role.MEMBER).user
    MembershipFactory(organization=market.rival, user=both, role=Membership.Role.MEMBER)

    def ids(user: User) -> list[str]:
        answer = client_for(user).get(f"{API}/bids/")
        assert answer.status_code == 200
        return [row["id"] for row in answer.json()["results"]]

    assert ids(market.team_member) == [str(ours.uuid)]
    assert ids(market.team_admin) == [str(ours.uuid)]
    assert ids(market.rival_admin) == [str(theirs.uuid)]
    assert ids(market.owner_admin) == []
    assert ids(both) == [str(theirs.uuid), str(ours.uuid)]  # newest first


def test_bid_detail_for_a_member_and_404_for_everyone_else(market):
    offer = offer_for_sale(market)
    placed = place_bid(market.team, offer, 10, "2.25")
    path = f"{API}/bids/{placed.uuid}/"

    as_member = client_for(market.team_member).get(path)

    assert as_member.status_code == 200
    assert as_member.json()["id"] == str(placed.uuid)
    assert (as_member.json()["price"], as_member.json()["held"]) == ("2.250000", "22.500000")
    for outsider in (market.rival_admin, market.owner_admin, market.owner_member):
        answer = client_for(outsider).get(path)
        assert_refused(answer, 404, "not_found")
        assert "2.25" not in answer.content.decode()


def test_bid_filters(market):
    first, second = offer_for_sale(market), offer_for_sale(market)
    won = place_bid(market.team, first, 10, "2")
    clear(first)
    open_on_second = place_bid(market.team, second, 10, "2")
    also_on_second = place_bid(market.team, second, 5, "2")
    place_bid(market.rival, second, 10, "2")
    client = client_for(market.team_member)

    def ids(query: str) -> list[str]:
        answer = client.get(f"{API}/bids/?{query}")
        assert answer.status_code == 200, answer.content
        return [row["id"] for row in answer.json()["results"]]

    assert ids(f"offer={first.uuid}") == [str(won.uuid)]
    assert ids(f"offer={second.uuid}") == [str(also_on_second.uuid), str(open_on_second.uuid)]
    assert ids("status=won") == [str(won.uuid)]
    assert ids("status=open") == [str(also_on_second.uuid), str(open_on_second.uuid)]
    assert ids(f"status=won&offer={second.uuid}") == []
    assert ids(f"organization={market.team.uuid}&status=won") == [str(won.uuid)]
    assert ids(f"organization={market.rival.uuid}") == []


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("offer=first", "offer"),
        ("status=pending", "status"),
        ("organization=quantum", "organization"),
        ("page_size=201", "page_size"),
    ],
)
def test_bad_bid_filters_are_400_naming_the_parameter(market, query, parameter):
    answer = client_for(market.team_member).get(f"{API}/bids/?{query}")

    body = assert_refused(answer, 400, "invalid")
    assert list(body["extra"]["fields"]) == [parameter]


def test_bids_after_clearing_show_what_each_won_and_paid(market):
    """The worked example of docs/design.md (Market rules): 100 units, reserve 1.00; A 40@2.50, B
    30@2.00, C 50@1.80, D 20@1.20 clear at 1.80 with A, B, C getting 40, 30 and 30."""
    offer = offer_for_sale(market)
    teams = {}
    for name, quantity, price in [
        ("A", 40, "2.50"),
        ("B", 30, "2.00"),
        ("C", 50, "1.80"),
        ("D", 20, "1.20"),
    ]:
        organization = funded_organization("500", name=f"Team {name}")
        member = MembershipFactory(organization=organization, role=Membership.Role.ADMIN).user
        teams[name] = (organization, member, place_bid(organization, offer, quantity, price))
    clear(offer)
    hold_release_batches_due_task()  # what the money worker does after the commit (ADR 0025)

    seen = {}
    for name, (_, member, placed) in teams.items():
        rows = client_for(member).get(f"{API}/bids/").json()["results"]
        assert [row["id"] for row in rows] == [str(placed.uuid)]
        seen[name] = (rows[0]["status"], rows[0]["quantity_won"], rows[0]["price_paid"])
        seen[name] += (rows[0]["held"],)

    assert seen == {
        "A": ("won", "40", "1.800000", "72.000000"),
        "B": ("won", "30", "1.800000", "54.000000"),
        "C": ("partially_won", "30", "1.800000", "54.000000"),
        "D": ("lost", "0", None, "0.000000"),
    }
    assert wallet(teams["C"][0]) == (Decimal("446"), Decimal("54"))
    assert wallet(teams["D"][0]) == (Decimal("500"), Decimal("0"))


# --- Bids: withdrawing -------------------------------------------------------------------------


def test_withdrawing_a_bid_releases_its_hold(market):
    offer = offer_for_sale(market)
    placed = place_bid(market.team, offer, 40, "2.50")
    assert wallet(market.team) == (Decimal("900"), Decimal("100"))

    answer = client_for(market.team_admin).delete(f"{API}/bids/{placed.uuid}/")

    assert answer.status_code == 204
    assert answer.content == b""
    placed.refresh_from_db()
    assert placed.status == Bid.Status.WITHDRAWN
    assert placed.withdrawn_at is not None
    assert (placed.hold.status, placed.hold.amount) == (Hold.Status.CLOSED, Decimal("0"))
    assert wallet(market.team) == (Decimal("1000"), Decimal("0"))
    release = Transaction.objects.get(hold=placed.hold, kind=Transaction.Kind.RELEASE)
    assert release.organization == market.team
    offer.refresh_from_db()
    assert (offer.bid_count, offer.units_bid) == (0, 0)
    shown = client_for(market.team_member).get(f"{API}/bids/{placed.uuid}/").json()
    assert (shown["status"], shown["held"], shown["withdrawn_at"]) == (
        "withdrawn",
        "0.000000",
        iso(placed.withdrawn_at),
    )


def test_withdrawing_twice_is_409_bid_not_open(market):
    offer = offer_for_sale(market)
    placed = place_bid(market.team, offer, 10, "2")
    client = client_for(market.team_admin)
    client.delete(f"{API}/bids/{placed.uuid}/")
    before = snapshot()

    answer = client.delete(f"{API}/bids/{placed.uuid}/")

    assert_refused(answer, 409, "bid_not_open")
    assert snapshot() == before


def test_withdrawing_after_the_clearing_is_409_bid_not_open(market):
    offer = offer_for_sale(market)
    placed = place_bid(market.team, offer, 10, "2")
    clear(offer)
    before = snapshot()

    answer = client_for(market.team_admin).delete(f"{API}/bids/{placed.uuid}/")

    body = assert_refused(answer, 409, "bid_not_open")
    assert body["extra"] == {"status": "won"}
    assert snapshot() == before
    # The only bid: it won at the reserve, and the hold keeps 10 x 1.00 for the window.
    assert wallet(market.team) == (Decimal("990"), Decimal("10"))


def test_withdrawing_once_the_auction_closed_is_409_offer_not_open(market):
    offer = offer_for_sale(market)
    placed = place_bid(market.team, offer, 10, "2")
    Offer.objects.filter(pk=offer.pk).update(auction_closes_at=timezone.now())
    before = snapshot()

    answer = client_for(market.team_admin).delete(f"{API}/bids/{placed.uuid}/")

    assert_refused(answer, 409, "offer_not_open")
    assert snapshot() == before


def test_withdrawing_by_a_member_who_is_not_admin_is_403(market):
    offer = offer_for_sale(market)
    placed = place_bid(market.team, offer, 10, "2")
    before = snapshot()

    answer = client_for(market.team_member).delete(f"{API}/bids/{placed.uuid}/")

    assert_refused(answer, 403, "permission_denied")
    assert snapshot() == before


@pytest.mark.parametrize("who", ["rival_admin", "owner_admin"])
def test_withdrawing_another_teams_bid_is_404(market, who):
    offer = offer_for_sale(market)
    placed = place_bid(market.team, offer, 10, "2")
    before = snapshot()

    answer = client_for(getattr(market, who)).delete(f"{API}/bids/{placed.uuid}/")

    assert_refused(answer, 404, "not_found")
    assert snapshot() == before


# --- Allocations -------------------------------------------------------------------------------


@dataclass
class Allocations:
    upcoming: Allocation  # bought; the window starts tomorrow
    active: Allocation  # bought; the window started yesterday
    closed: Allocation  # bought; the window was closed by the closing task
    ended: Allocation  # won at auction; the window is over, not closed yet


@pytest.fixture
def allocations(market: Market) -> Allocations:
    team = admin_membership(market.team)
    now = timezone.now()
    running = {"window_start": now - timedelta(days=1)}
    upcoming = services.offer_buy(actor=team, offer=offer_for_sale(market), quantity=10)
    active = services.offer_buy(actor=team, offer=offer_for_sale(market, **running), quantity=20)
    closed = services.offer_buy(actor=team, offer=offer_for_sale(market, **running), quantity=30)
    assert services.allocation_close(allocation_id=closed.pk, now=closed.window_end)
    past = offer_for_sale(market)
    place_bid(market.team, past, 40, "1.50")
    Offer.objects.filter(pk=past.pk).update(
        auction_closes_at=now - timedelta(days=4),
        window_start=now - timedelta(days=3),
        window_end=now - timedelta(hours=1),
    )
    clear(past, closed_at=now - timedelta(days=4))
    ended = Allocation.objects.get(offer=past)
    return Allocations(upcoming, active, closed, ended)


def test_allocation_detail_shows_units_and_money(market, allocations):
    allocation = allocations.active
    Allocation.objects.filter(pk=allocation.pk).update(
        used=Decimal("2.5"), reserved=Decimal("4.25")
    )

    answer = client_for(market.team_member).get(f"{API}/allocations/{allocation.uuid}/")

    assert answer.status_code == 200
    assert answer.json() == {
        "id": str(allocation.uuid),
        "organization": str(market.team.uuid),
        "offer": str(allocation.offer.uuid),
        "cluster": str(market.cluster.uuid),
        "cluster_name": "hopper",
        "partition": "debug",
        "resource": "cpu",
        "capacity": "preemptible",
        "source": "buy_now",
        "quantity": "20",
        "block": None,
        "reservation": "",
        "reservation_problem": "",
        "used": "2.5",
        "reserved": "4.25",
        "remaining": "13.25",
        "unit_price": "3.000000",
        "held": "60.000000",
        "currency": "USD",
        "window_start": iso(allocation.window_start),
        "window_end": iso(allocation.window_end),
        "status": "active",
        "created_at": iso(allocation.created_at),
    }


def test_allocation_won_at_auction_and_one_closed(market, allocations):
    client = client_for(market.team_member)

    ended = client.get(f"{API}/allocations/{allocations.ended.uuid}/").json()
    closed = client.get(f"{API}/allocations/{allocations.closed.uuid}/").json()

    assert (ended["source"], ended["quantity"], ended["unit_price"], ended["status"]) == (
        "auction",
        "40",
        "1.000000",  # the only bid: the clearing price is the reserve
        "closed",
    )
    assert ended["held"] == "40.000000"  # the closing task has not run yet
    assert (closed["status"], closed["held"]) == ("closed", "0.000000")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["upcoming", "active", "closed", "ended"]),
        ("status=upcoming", ["upcoming"]),
        ("status=active", ["active"]),
        ("status=closed", ["closed", "ended"]),
    ],
)
def test_allocation_list_and_its_status_filter(market, allocations, query, expected):
    answer = client_for(market.team_member).get(f"{API}/allocations/?{query}")

    assert answer.status_code == 200, answer.content
    rows = answer.json()["results"]
    by_id = {str(getattr(allocations, name).uuid): name for name in expected}
    assert sorted(row["id"] for row in rows) == sorted(by_id)
    assert {row["id"]: row["status"] for row in rows} == {
        allocation_id: "closed" if name == "ended" else name
        for allocation_id, name in by_id.items()
    }


def test_allocations_are_newest_window_first(market, allocations):
    rows = client_for(market.team_admin).get(f"{API}/allocations/").json()["results"]

    assert [row["id"] for row in rows] == [
        str(allocation.uuid)
        for allocation in sorted(
            [allocations.upcoming, allocations.active, allocations.closed, allocations.ended],
            key=lambda allocation: (allocation.window_start, allocation.pk),
            reverse=True,
        )
    ]


@pytest.mark.parametrize("who", ["owner_admin", "owner_member", "rival_admin"])
def test_allocations_are_hidden_from_the_owners_and_other_teams(market, allocations, who):
    client = client_for(getattr(market, who))

    listed_rows = client.get(f"{API}/allocations/").json()
    detail = client.get(f"{API}/allocations/{allocations.active.uuid}/")

    assert (listed_rows["count"], listed_rows["results"]) == (0, [])
    assert_refused(detail, 404, "not_found")


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("status=open", "status"),
        ("cluster=hopper", "cluster"),
        ("organization=team", "organization"),
        ("page_size=500", "page_size"),
    ],
)
def test_bad_allocation_filters_are_400_naming_the_parameter(market, query, parameter):
    answer = client_for(market.team_member).get(f"{API}/allocations/?{query}")

    body = assert_refused(answer, 400, "invalid")
    assert list(body["extra"]["fields"]) == [parameter]


# --- Price history -----------------------------------------------------------------------------


def test_price_history_lists_cleared_offers_oldest_first(market):
    long_ago = whole_hour(days=-30)
    older = offer_for_sale(market, quantity=100)
    for organization, quantity, price in [(market.team, 70, "2.50"), (market.rival, 50, "1.80")]:
        place_bid(organization, older, quantity, price)
    clear(older, closed_at=long_ago)
    newer = offer_for_sale(market, quantity=60, buy_now_price=Decimal("4"))
    services.offer_buy(actor=admin_membership(market.rival), offer=newer, quantity=10)
    place_bid(market.team, newer, 40, "1.25")
    place_bid(market.rival, newer, 20, "1.10")
    clear(newer, closed_at=long_ago + timedelta(days=7))
    unsold = offer_for_sale(market, quantity=30)
    clear(unsold, closed_at=long_ago + timedelta(days=14))
    # Excluded: still open, cancelled, or another cluster, partition or resource.
    offer_for_sale(market)
    offer_for_sale(market, status=Offer.Status.CANCELLED)
    clear(offer_for_sale(market, partition=PartitionFactory(cluster=market.cluster, name="x")))
    clear(offer_for_sale(market, resource="gpu"))
    clear(offer_for_sale(market, partition=PartitionFactory(name="debug")))

    answer = client_for(market.team_member).get(
        f"{API}/offers/price-history/?cluster={market.cluster.uuid}&partition=debug&resource=cpu"
    )

    assert answer.status_code == 200, answer.content
    assert answer.json()["count"] == 3

    def row(offer: Offer, price: str | None, sold: str, quantity: str) -> dict[str, Any]:
        offer.refresh_from_db()
        return {
            "offer": str(offer.uuid),
            "cluster": str(market.cluster.uuid),
            "partition": "debug",
            "resource": "cpu",
            "capacity": "preemptible",
            "auction_closed_at": iso(offer.auction_closes_at),
            "cleared_at": iso(offer.cleared_at),
            "clearing_price": price,
            "quantity_sold": sold,
            "quantity": quantity,
        }

    assert answer.json()["results"] == [
        row(older, "1.800000", "100", "100"),
        row(newer, "1.100000", "60", "60"),  # 10 bought now, 50 at auction
        row(unsold, None, "0", "30"),
    ]
    assert answer.json()["results"][0]["auction_closed_at"] == iso(long_ago)


def test_price_history_without_filters_is_every_cleared_offer(market):
    first = clear(offer_for_sale(market), closed_at=whole_hour(days=-2))
    second = clear(offer_for_sale(market, resource="gpu"), closed_at=whole_hour(days=-1))
    offer_for_sale(market)

    answer = client_for(market.rival_admin).get(f"{API}/offers/price-history/")

    assert [row["offer"] for row in answer.json()["results"]] == [
        str(first.uuid),
        str(second.uuid),
    ]


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("cluster=hopper", "cluster"),
        (f"cluster={uuid.UUID(int=9)}", "cluster"),
        ("resource=tpu", "resource"),
        ("partition=" + "p" * 65, "partition"),
        ("page_size=201", "page_size"),
    ],
)
def test_bad_price_history_filters_are_400_naming_the_parameter(market, query, parameter):
    answer = client_for(market.team_member).get(f"{API}/offers/price-history/?{query}")

    body = assert_refused(answer, 400, "invalid")
    assert list(body["extra"]["fields"]) == [parameter]


# --- Anonymous -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "clusters/"),
        ("get", "clusters/{cluster}/"),
        ("post", "clusters/{cluster}/verify/"),
        ("post", "offers/"),
        ("post", "offers/{offer}/buy/"),
        ("post", "offers/{offer}/cancel/"),
        ("get", "bids/"),
        ("get", "bids/{bid}/"),
        ("delete", "bids/{bid}/"),
        ("get", "allocations/"),
        ("get", "allocations/{allocation}/"),
    ],
)
def test_without_a_token_every_endpoint_is_401(market, method, path):
    offer = offer_for_sale(market)
    placed = place_bid(market.team, offer, 10, "2")
    allocation = services.offer_buy(actor=admin_membership(market.team), offer=offer, quantity=5)
    path = path.format(
        cluster=market.cluster.uuid, offer=offer.uuid, bid=placed.uuid, allocation=allocation.uuid
    )
    before = snapshot()

    answer = getattr(APIClient(), method)(f"{API}/{path}", {}, format="json")

    assert_refused(answer, 401, "not_authenticated")
    assert answer["WWW-Authenticate"] == "Token"
    assert snapshot() == before
