import uuid
from datetime import timedelta
from decimal import Decimal

import factory
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.utils import timezone

from computeshare import services as computeshare_services
from computeshare.models import ApiToken, User
from marketplace.models import Allocation, Cluster, Offer, Partition, TenantAccount
from organizations.models import Membership, Organization

PASSWORD = "correct horse battery staple"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        skip_postgeneration_save = True

    username = factory.Sequence(lambda number: f"user{number}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.org")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def save_password(self, create: bool, extracted: object, **kwargs: object) -> None:
        if create:
            self.save()
            # Every user has an API token from the start (its key from `token_for`), so that
            # tests that count rows are not disturbed by a token made at the first request.
            token_for(self)


# The key of each user's test token, by the user's uuid (never reused, unlike a primary key
# after a flush): keys are kept only as digests, so the test that made one remembers it.
_TEST_KEYS: dict[uuid.UUID, str] = {}


def token_for(user: User) -> str:
    """A working API key of `user`: the same one for every call in a test, unless it was
    revoked. Marked as used just now, so that a test's first request is not the one that
    writes the time of last use (query counts stay those of the endpoint)."""
    key = _TEST_KEYS.get(user.uuid)
    if (
        key is not None
        and ApiToken.objects.filter(
            prefix=key[: ApiToken.LOOKUP_LENGTH], revoked_at__isnull=True
        ).exists()
    ):
        return key
    token, key = computeshare_services.api_token_create(user=user, name="tests")
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    _TEST_KEYS[user.uuid] = key
    return key


class OrganizationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization

    name = factory.Sequence(lambda number: f"Lab {number}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    organization = factory.SubFactory(OrganizationFactory)
    user = factory.SubFactory(UserFactory)
    role = Membership.Role.MEMBER


# --- The market ----------------------------------------------------------------------------------
# Clusters made here are `online` without SSH (their partitions are written as a verification
# would write them): for tests of the market rules. Tests of verification itself use the real
# test cluster.


def ssh_key_pair() -> tuple[str, str]:
    """A fresh Ed25519 key pair: the unencrypted private key in OpenSSH format, and its public
    key line (`ssh-ed25519 AAAA...`)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public.decode()


def ssh_private_key_text() -> str:
    """A fresh private key that nothing knows (no authorized_keys lists it)."""
    return ssh_key_pair()[0]


def ssh_host_key_line() -> str:
    """A fresh public key line: as a host key, one no server presents."""
    return ssh_key_pair()[1]


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster
        skip_postgeneration_save = True

    organization = factory.SubFactory(OrganizationFactory)
    name = factory.Sequence(lambda number: f"cluster-{number}")
    status = Cluster.Status.ONLINE
    ssh_host = "127.0.0.1"
    ssh_port = 2222
    ssh_user = "computeshare"
    ssh_private_key = factory.LazyFunction(ssh_private_key_text)
    ssh_host_key = factory.LazyFunction(ssh_host_key_line)
    account_mode = Cluster.AccountMode.FIXED
    slurm_account = "computeshare"
    slurm_cluster_name = "computeshare-test"
    verified_at = factory.LazyFunction(timezone.now)
    tenant_group = "computeshare-fixed"
    tracks_gpus = True
    # Both kinds of capacity, as a verification of a cluster set up with
    # `cluster-setup --preemption normal --reservations` records them: most tests list offers.
    sells_preemptible = True
    market_qos = "computeshare-market"
    owner_qos = factory.LazyFunction(lambda: ["normal"])
    preemption_grace_seconds = 120
    sells_reserved = True

    @factory.post_generation
    def tenants(self, create: bool, extracted: object, **kwargs: object) -> None:
        """The pool a verification would have recorded: `tenants=N` accounts (24 by default:
        more teams than any test of the market makes), or `tenants=[(user, home), ...]` as a
        real cluster has them."""
        if not create or self.backend != Cluster.Backend.SLURM:
            return
        accounts = extracted if extracted is not None else 24
        if isinstance(accounts, int):
            accounts = [
                (f"cs-tenant-{i:02d}", f"/home/cs-tenant-{i:02d}") for i in range(1, accounts + 1)
            ]
        TenantAccount.objects.bulk_create(
            TenantAccount(cluster=self, username=user, home=home) for user, home in accounts
        )


class PartitionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Partition

    cluster = factory.SubFactory(ClusterFactory)
    name = "debug"
    nodes = 4
    cpus = 256
    gpus = 8
    max_time_minutes = None
    # As verification reads them: per node, the smallest node's.
    cpus_per_node = factory.LazyAttribute(lambda part: part.cpus // max(part.nodes, 1))
    memory_per_node_mb = 262144
    gpus_per_node = factory.LazyAttribute(lambda part: part.gpus // max(part.nodes, 1))
    gpu_types = factory.LazyAttribute(lambda partition: ["a100"] if partition.gpus else [])
    features = factory.LazyFunction(lambda: ["avx2", "ib"])


class OfferFactory(factory.django.DjangoModelFactory):
    """An open offer: the auction closes in an hour, the window runs for 30 days after."""

    class Meta:
        model = Offer

    partition = factory.SubFactory(PartitionFactory)
    cluster = factory.LazyAttribute(lambda offer: offer.partition.cluster)
    resource = "cpu"
    quantity = 100
    reserve_price = Decimal("1.00")
    buy_now_price = None
    auction_closes_at = factory.LazyFunction(lambda: timezone.now() + timedelta(hours=1))
    window_start = factory.LazyAttribute(lambda offer: offer.auction_closes_at)
    window_end = factory.LazyAttribute(lambda offer: offer.window_start + timedelta(days=30))


def funded_organization(amount: str | Decimal = "1000", **kwargs: object) -> Organization:
    """An organization with its wallet open and `amount` available (a staff adjustment)."""
    from billing import services as billing

    organization = OrganizationFactory(**kwargs)
    billing.wallet_open(organization)
    if Decimal(amount):
        billing.wallet_adjust(
            organization=organization, amount=amount, memo="Test funds", actor=None
        )
    return organization


def allocation_bought(
    organization: Organization | None = None,
    *,
    partition: Partition | None = None,
    quantity: int = 100,
    price: str | Decimal = "2.00",
    resource: str = "cpu",
    window_end: timedelta = timedelta(days=30),
) -> Allocation:
    """An active allocation bought outright by `organization`, whose window started an hour
    ago. The organization is given the money first; the commitment hold is real, placed
    through the services."""
    from billing import services as billing
    from marketplace import services as market

    if organization is None:
        organization = funded_organization("0")
    billing.wallet_open(organization)
    billing.wallet_adjust(
        organization=organization, amount=Decimal(price) * quantity, memo="Test funds", actor=None
    )
    admin = Membership.objects.filter(
        organization=organization, role=Membership.Role.ADMIN
    ).first() or MembershipFactory(organization=organization, role=Membership.Role.ADMIN)
    now = timezone.now()
    offer = OfferFactory(
        partition=partition or PartitionFactory(),
        resource=resource,
        quantity=quantity,
        buy_now_price=Decimal(price),
        reserve_price=Decimal(price),
        window_start=now - timedelta(hours=1),
        auction_closes_at=now + timedelta(hours=1),
        window_end=now + window_end,
    )
    return market.offer_buy(actor=admin, offer=offer, quantity=quantity)


def cluster_on_testcluster(testcluster, *, pool: str = "fixed", **fields: object) -> Cluster:
    """A cluster row for the real Slurm test cluster, `online` with its `debug` partition and the
    named pool of tenant accounts (`fixed` or `managed`), as a verification would record them:
    selling both kinds of capacity, preempted by the owner's QOS after the market QOS's grace."""
    tenant_pool = testcluster.tenant_pool(pool)
    values: dict[str, object] = {
        "name": f"test-{pool}-{uuid.uuid4().hex[:8]}",
        "ssh_host": testcluster.host,
        "ssh_port": testcluster.port,
        "ssh_user": testcluster.user,
        "ssh_private_key": testcluster.private_key,
        "ssh_host_key": testcluster.host_key,
        "slurm_cluster_name": testcluster.cluster_name,
        "tenant_group": tenant_pool.group,
        "sftp_server": testcluster.sftp_server,
        "tracks_gpus": False,
        "tenants": [(tenant.user, tenant.home) for tenant in tenant_pool.tenants],
        "market_qos": testcluster.market_qos,
        "owner_qos": [testcluster.owner.qos],
        "preemption_grace_seconds": testcluster.preemption_grace_seconds,
    }
    if tenant_pool.mode == "managed":
        values |= {
            "account_mode": Cluster.AccountMode.MANAGED,
            "slurm_account": "",
            "tenant_idle_account": tenant_pool.idle_account,
        }
    else:
        values |= {"account_mode": Cluster.AccountMode.FIXED, "slurm_account": tenant_pool.account}
    cluster = ClusterFactory(**{**values, **fields})
    PartitionFactory(cluster=cluster, name=testcluster.partition, cpus=2, nodes=1, gpus=0)
    return cluster
