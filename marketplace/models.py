from datetime import datetime, timedelta
from decimal import Decimal
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Lower
from django.utils import timezone

from billing.models import ZERO, money_field
from computeshare.fields import EncryptedTextField
from computeshare.models import BaseModel
from computeshare.numbers import MICRO_PLACES
from organizations.models import Organization


def units_field(**options: object) -> models.DecimalField:  # type: ignore[type-arg]
    """Core-hours or GPU-hours as metered: six places, so a core-second is still counted."""
    return models.DecimalField(max_digits=20, decimal_places=MICRO_PLACES, **options)  # type: ignore[arg-type]


# --- Clusters ------------------------------------------------------------------------------------


class Cluster(BaseModel):
    """An owner's Slurm cluster, reached over SSH with the host key pinned at registration."""

    class Backend(models.TextChoices):
        SLURM = "slurm", "Slurm over SSH"
        # Runs jobs as local processes; for the demo and development, never offered to owners.
        LOCAL = "local", "Local processes"

    class Status(models.TextChoices):
        UNVERIFIED = "unverified", "Unverified"
        ONLINE = "online", "Online"
        UNREACHABLE = "unreachable", "Unreachable"
        HOST_KEY_MISMATCH = "host_key_mismatch", "Host key mismatch"
        SUSPENDED = "suspended", "Suspended"
        # It answered, but a check the platform relies on failed (no SFTP, sudo not set up...).
        MISCONFIGURED = "misconfigured", "Misconfigured"

    class AccountMode(models.TextChoices):
        MANAGED = "managed", "One Slurm account per buying organization"
        FIXED = "fixed", "One Slurm account for every job"

    # A cluster in one of these takes no new work until its owners or the operators sort it
    # out: the operators took it off the market, or its host offered another key than the
    # pinned one (it may not be the owners' any more). Its offers sell nothing, its
    # allocations take no jobs, and the jobs queued for it wait.
    UNAVAILABLE_STATUSES: ClassVar[frozenset[str]] = frozenset(
        {Status.SUSPENDED, Status.HOST_KEY_MISMATCH}
    )
    # What a verification (or a connection refused for its host key) can find.
    VERIFIED: ClassVar[tuple[str, ...]] = (
        Status.ONLINE,
        Status.UNREACHABLE,
        Status.MISCONFIGURED,
        Status.HOST_KEY_MISMATCH,
    )
    # Verification decides among online, unreachable, misconfigured and host_key_mismatch, and
    # may find the same again with a new detail; new connection settings make the cluster
    # unverified. Only the operators suspend, and a suspension ends only by their reinstating
    # it (unverified): nothing the cluster answers lifts it (`services/clusters.py`).
    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.UNVERIFIED: {*VERIFIED, Status.SUSPENDED},
        Status.ONLINE: {*VERIFIED, Status.UNVERIFIED, Status.SUSPENDED},
        Status.UNREACHABLE: {*VERIFIED, Status.UNVERIFIED, Status.SUSPENDED},
        Status.MISCONFIGURED: {*VERIFIED, Status.UNVERIFIED, Status.SUSPENDED},
        Status.HOST_KEY_MISMATCH: {*VERIFIED, Status.UNVERIFIED, Status.SUSPENDED},
        Status.SUSPENDED: {Status.SUSPENDED, Status.UNVERIFIED},
    }

    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="clusters"
    )
    name = models.CharField(max_length=120)
    backend = models.CharField(max_length=16, choices=Backend.choices, default=Backend.SLURM)
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.UNVERIFIED)
    status_detail = models.CharField(max_length=500, blank=True)
    ssh_host = models.CharField(max_length=255, blank=True)
    ssh_port = models.PositiveIntegerField(default=22)
    ssh_user = models.CharField(max_length=64, blank=True)
    ssh_private_key = EncryptedTextField(blank=True)
    ssh_host_key = models.CharField(max_length=2000, blank=True)
    host_key_fingerprint = models.CharField(max_length=100, blank=True)
    account_mode = models.CharField(
        max_length=16, choices=AccountMode.choices, default=AccountMode.FIXED
    )
    slurm_account = models.CharField(max_length=64, blank=True)
    slurm_cluster_name = models.CharField(max_length=64, blank=True)
    slurm_version = models.CharField(max_length=32, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    # The owner's pool of tenant accounts: the Unix group `scripts/cluster-setup` made. Every
    # team's work runs as one of its members, leased to that team alone.
    tenant_group = models.CharField(max_length=32, default="computeshare-tenants")
    # The SFTP server program the tenants' sessions run under sudo; verification checks it.
    sftp_server = models.CharField(max_length=255, default="/usr/lib/openssh/sftp-server")
    # Managed mode: the account idle tenants sit in (it runs nothing), read by verification.
    tenant_idle_account = models.CharField(max_length=64, blank=True)
    # Whether accounting records GPUs (`gres/gpu` in AccountingStorageTRES): without it a GPU
    # job would meter zero, so GPU offers are refused.
    tracks_gpus = models.BooleanField(default=False)
    # The two kinds of capacity (docs/design.md, The product), as the last verification found the
    # cluster able to hold them. Preemptible: teams' jobs run under `market_qos`, which each of
    # `owner_qos` preempts (requeued after `preemption_grace_seconds` of SIGTERM).
    # Reserved: the service user may create Slurm reservations. Each `*_refusal` says why the
    # kind cannot be sold ("" when it can).
    sells_preemptible = models.BooleanField(default=False)
    preemptible_refusal = models.CharField(max_length=500, blank=True)
    market_qos = models.CharField(max_length=64, blank=True)
    owner_qos = models.JSONField(default=list, blank=True)
    preemption_grace_seconds = models.PositiveIntegerField(null=True, blank=True)
    sells_reserved = models.BooleanField(default=False)
    reserved_refusal = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(
                "organization", Lower("name"), name="cluster_unique_name_per_organization"
            ),
            models.CheckConstraint(
                condition=Q(
                    status__in=[
                        "unverified",
                        "online",
                        "unreachable",
                        "host_key_mismatch",
                        "suspended",
                        "misconfigured",
                    ]
                ),
                name="cluster_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(account_mode="managed") | ~Q(slurm_account="") | Q(backend="local"),
                name="cluster_fixed_mode_names_account",
            ),
            models.CheckConstraint(
                condition=Q(ssh_port__gte=1, ssh_port__lte=65535), name="cluster_ssh_port_valid"
            ),
            models.CheckConstraint(
                condition=~Q(tenant_group="") | Q(backend="local"),
                name="cluster_slurm_names_tenant_group",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_online(self) -> bool:
        return self.status == self.Status.ONLINE

    @property
    def runs_jobs_as_tenants(self) -> bool:
        return backend_runs_jobs_as_tenants(self.backend)


def backend_runs_jobs_as_tenants(backend: str) -> bool:
    """Whether a cluster of this backend runs each team's jobs as a leased tenant account
    (every Slurm cluster), so that it serves at most as many teams as it has accounts. The
    demo's local backend keeps jobs apart with a sandbox instead."""
    return backend == Cluster.Backend.SLURM


class Partition(BaseModel):
    """A Slurm partition as the last successful verification read it."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="partitions")
    name = models.CharField(max_length=64)
    nodes = models.PositiveIntegerField()
    cpus = models.PositiveIntegerField()
    gpus = models.PositiveIntegerField()
    max_time_minutes = models.PositiveIntegerField(null=True, blank=True)
    is_up = models.BooleanField(default=True)
    # The nodes' hardware as verification read it (hpc.slurm.inventory): the
    # smallest node's CPUs, memory and GPUs, and the GPU types and features of any node, sorted.
    cpus_per_node = models.PositiveIntegerField(default=0)
    memory_per_node_mb = models.PositiveBigIntegerField(default=0)
    gpus_per_node = models.PositiveIntegerField(default=0)
    gpu_types = models.JSONField(default=list, blank=True)
    features = models.JSONField(default=list, blank=True)
    nodes_differ = models.BooleanField(default=False)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="partition_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"


class ClusterVerification(BaseModel):
    """One run of the verification task, so that the owner's page can show its progress."""

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.RUNNING: {Status.SUCCEEDED, Status.FAILED},
        Status.SUCCEEDED: set(),
        Status.FAILED: set(),
    }

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="verifications")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    step = models.CharField(max_length=200, blank=True)
    # Every check as it ran: [{"key", "title", "status" (passed, failed, warning, skipped),
    # "detail"}], in order, for the page and the API.
    steps = models.JSONField(default=list, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    detail = models.CharField(max_length=1000, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["running", "succeeded", "failed"]),
                name="cluster_verification_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"verification of {self.cluster} ({self.status})"

    # A run still `running` after this long lost its worker: the page stops waiting for it and
    # a new request starts another.
    STALE_AFTER = timedelta(minutes=5)

    @property
    def is_stale(self) -> bool:
        return (
            self.status == self.Status.RUNNING
            and timezone.now() - self.created_at > self.STALE_AFTER
        )

    @property
    def shown_status(self) -> str:
        return self.Status.FAILED if self.is_stale else self.status

    @property
    def shown_detail(self) -> str:
        if self.is_stale:
            return "No worker finished this verification; verify again."
        return self.detail


class SlurmAccount(BaseModel):
    """The Slurm account the platform manages for one buying organization on one cluster
    (`managed` mode). `wanted_cpu_minutes` follows the organization's allocations there;
    `applied_cpu_minutes` is what the cluster was last seen to enforce."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="slurm_accounts")
    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="slurm_accounts"
    )
    name = models.CharField(max_length=64)
    wanted_cpu_minutes = models.PositiveBigIntegerField(default=0)
    wanted_gpu_minutes = models.PositiveBigIntegerField(default=0)
    applied_cpu_minutes = models.PositiveBigIntegerField(null=True, blank=True)
    applied_gpu_minutes = models.PositiveBigIntegerField(null=True, blank=True)
    synced_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "organization"], name="slurm_account_one_per_organization"
            ),
            models.UniqueConstraint(fields=["cluster", "name"], name="slurm_account_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} on {self.cluster}"

    @property
    def is_in_sync(self) -> bool:
        return (self.applied_cpu_minutes, self.applied_gpu_minutes) == (
            self.wanted_cpu_minutes,
            self.wanted_gpu_minutes,
        )


class TenantAccount(BaseModel):
    """One of a cluster's pool accounts: an unprivileged Unix user of the owner's tenant group
    that the platform leases to one team at a time (docs/design.md, Tenants on a cluster).
    Verification records them; a lease takes one; when the lease ends the account is scrubbed
    before anyone else gets it, and one that cannot be scrubbed is quarantined."""

    class Status(models.TextChoices):
        AVAILABLE = "available", "Available"
        LEASED = "leased", "Leased"
        # Could not be scrubbed: out of the pool until its owners have looked at it.
        QUARANTINED = "quarantined", "Quarantined"
        # No longer in the tenant group at the last verification.
        RETIRED = "retired", "Retired"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.AVAILABLE: {Status.LEASED, Status.RETIRED},
        Status.LEASED: {Status.AVAILABLE, Status.QUARANTINED},
        Status.QUARANTINED: {Status.AVAILABLE, Status.RETIRED},
        Status.RETIRED: {Status.AVAILABLE},
    }

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="tenant_accounts")
    username = models.CharField(max_length=32)
    home = models.CharField(max_length=255)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.AVAILABLE)
    status_detail = models.CharField(max_length=1000, blank=True)
    last_scrubbed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "username"]
        indexes = [models.Index(fields=["cluster", "status"], name="tenant_account_pool")]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "username"], name="tenant_account_unique_username"
            ),
            models.CheckConstraint(
                condition=Q(status__in=["available", "leased", "quarantined", "retired"]),
                name="tenant_account_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.username} on {self.cluster}"


class TenantLease(BaseModel):
    """A team's hold on one tenant account of one cluster: from its first open allocation
    there until it has neither an open allocation nor an unfinished job there. Everything done
    for the team on the cluster runs as the account meanwhile, and every Slurm run of that Unix
    user in the lease is the team's. Ending it scrubs the account (`ending`); a scrub that
    fails quarantines the account (`failed`) until its owners have looked."""

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        ENDING = "ending", "Being scrubbed"
        ENDED = "ended", "Ended"
        FAILED = "failed", "Scrub failed"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.ACTIVE: {Status.ENDING},
        Status.ENDING: {Status.ENDED, Status.FAILED},
        Status.FAILED: {Status.ENDING},
        Status.ENDED: set(),
    }
    # The account is this lease's (no other team may have it) in these states.
    HOLDING_STATES: ClassVar[tuple[str, ...]] = (Status.ACTIVE, Status.ENDING, Status.FAILED)

    account = models.ForeignKey(TenantAccount, on_delete=models.PROTECT, related_name="leases")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="tenant_leases")
    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="tenant_leases"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    # Managed mode: the tenant's Slurm association with the team's account is in place.
    prepared_at = models.DateTimeField(null=True, blank=True)
    ending_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    scrub_detail = models.CharField(max_length=1000, blank=True)
    # A scrub holds the lease until then: two scrubs of one account at once would end each
    # other's processes (a retried task, a second request of its owners).
    scrubbing_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["cluster", "status"], name="tenant_lease_cluster_status")]
        constraints = [
            models.UniqueConstraint(
                fields=["account"],
                condition=Q(status__in=["active", "ending", "failed"]),
                name="tenant_lease_one_team_per_account",
            ),
            models.UniqueConstraint(
                fields=["cluster", "organization"],
                condition=Q(status="active"),
                name="tenant_lease_one_per_team_and_cluster",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["active", "ending", "ended", "failed"]),
                name="tenant_lease_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.account.username} for {self.organization} ({self.status})"

    @property
    def username(self) -> str:
        return self.account.username


# --- The market ----------------------------------------------------------------------------------


class Resource(models.TextChoices):
    CPU = "cpu", "Core-hours"
    GPU = "gpu", "GPU-hours"


class Capacity(models.TextChoices):
    """The two kinds of capacity an owner lists (docs/design.md, The product). Preemptible: units
    (core- or GPU-hours) used on idle cores at a low priority, given back the moment the owner's own
    jobs need them. Reserved: whole cores (or GPUs) for the whole window, held by a Slurm
    reservation for the team."""

    PREEMPTIBLE = "preemptible", "Preemptible"
    RESERVED = "reserved", "Reserved"


class Offer(BaseModel):
    """A lot of `quantity` whole units of one resource on one partition, usable during the
    window, sold by buy-now while the auction is open and by a sealed-bid uniform-price auction
    when it closes. `units_sold` is every unit allocated so far, so `quantity - units_sold` is
    what is still for sale; `bid_count` and `units_bid` are the public aggregate demand: the
    sum of the offer's `OfferDemand` rows, copied here after each bid (and set from the bids
    themselves when the auction clears)."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        CLEARED = "cleared", "Cleared"
        CANCELLED = "cancelled", "Cancelled"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.OPEN: {Status.CLEARED, Status.CANCELLED},
        Status.CLEARED: set(),
        Status.CANCELLED: set(),
    }

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="offers")
    partition = models.ForeignKey(Partition, on_delete=models.PROTECT, related_name="offers")
    resource = models.CharField(max_length=8, choices=Resource.choices)
    capacity = models.CharField(
        max_length=16, choices=Capacity.choices, default=Capacity.PREEMPTIBLE
    )
    # Preemptible: units (core- or GPU-hours). Reserved: whole cores (or GPUs), each for the
    # whole window (`unit_hours` metered units apiece).
    quantity = models.PositiveIntegerField()
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    reserve_price = money_field()
    buy_now_price = money_field(null=True, blank=True)
    auction_closes_at = models.DateTimeField()
    max_per_buyer = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    units_sold = models.PositiveIntegerField(default=0)
    bid_count = models.PositiveIntegerField(default=0)
    units_bid = models.PositiveBigIntegerField(default=0)
    # The auction's result: every clearing is recorded here, and the price history reads it.
    clearing_price = money_field(null=True, blank=True)
    units_sold_at_auction = models.PositiveIntegerField(default=0)
    cleared_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )

    class Meta:
        ordering = ["auction_closes_at", "id"]
        indexes = [
            models.Index(fields=["status", "auction_closes_at"], name="offer_status_closes"),
            models.Index(fields=["status", "reserve_price"], name="offer_status_price"),
            models.Index(fields=["status", "window_start"], name="offer_status_window"),
            models.Index(
                fields=["cluster", "partition", "resource", "capacity", "auction_closes_at"],
                name="offer_price_history_by_kind",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["open", "cleared", "cancelled"]),
                name="offer_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(resource__in=["cpu", "gpu"]), name="offer_resource_valid"
            ),
            models.CheckConstraint(
                condition=Q(capacity__in=["preemptible", "reserved"]), name="offer_capacity_valid"
            ),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="offer_quantity_positive"),
            models.CheckConstraint(
                condition=Q(window_end__gt=F("window_start")), name="offer_window_ends_after_start"
            ),
            models.CheckConstraint(
                condition=Q(auction_closes_at__lt=F("window_end")),
                name="offer_auction_closes_before_window_ends",
            ),
            models.CheckConstraint(
                condition=Q(reserve_price__gt=0), name="offer_reserve_price_positive"
            ),
            models.CheckConstraint(
                condition=Q(buy_now_price__isnull=True) | Q(buy_now_price__gte=F("reserve_price")),
                name="offer_buy_now_at_or_above_reserve",
            ),
            models.CheckConstraint(
                condition=Q(units_sold__lte=F("quantity")), name="offer_never_oversold"
            ),
            models.CheckConstraint(
                condition=Q(max_per_buyer__isnull=True) | Q(max_per_buyer__gt=0),
                name="offer_max_per_buyer_positive",
            ),
        ]

    def __str__(self) -> str:
        if self.is_reserved:
            return (
                f"{self.quantity} reserved {self.resource_noun(self.quantity)} on {self.partition}"
            )
        return f"{self.quantity} {self.get_resource_display()} on {self.partition}"

    @property
    def is_reserved(self) -> bool:
        return self.capacity == Capacity.RESERVED

    @property
    def unit_hours(self) -> int:
        """The metered units (core- or GPU-hours) one unit of `quantity` is: 1 for preemptible
        capacity; for reserved, one core (or GPU) for each hour of the window, which is a whole
        number of hours."""
        return window_hours(self.window_start, self.window_end) if self.is_reserved else 1

    @property
    def quantity_unit(self) -> str:
        return quantity_unit(self.resource, self.capacity)

    @property
    def quantity_text(self) -> str:
        """The whole quantity with its unit, one or many: "1 core", "40 core-hours"."""
        unit = self.quantity_unit
        return f"{self.quantity} {unit[:-1] if self.quantity == 1 else unit}"

    @property
    def price_unit(self) -> str:
        """What a price is per, for both kinds of capacity: a core-hour or a GPU-hour."""
        return "GPU-hour" if self.resource == Resource.GPU else "core-hour"

    def total_at(self, price: Decimal) -> Decimal:
        """What the whole quantity costs at `price` (per core-hour or GPU-hour): a reserved
        block's cores (GPUs) for every hour of its window."""
        return price * self.quantity * self.unit_hours

    def per_day_at(self, price: Decimal) -> Decimal:
        """What one core (GPU) of a reserved block costs a day at `price`."""
        return price * 24

    def resource_noun(self, count: int) -> str:
        """ "core"/"cores" or "GPU"/"GPUs": what one unit of a reserved offer is."""
        noun = "GPU" if self.resource == Resource.GPU else "core"
        return noun if count == 1 else f"{noun}s"

    @property
    def remaining(self) -> int:
        """Units still for sale. `REMAINING` is the same in SQL, for the lists that read rows."""
        return self.quantity - self.units_sold

    REMAINING: ClassVar[CombinedExpression] = F("quantity") - F("units_sold")

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN

    def accepts_orders_at(self, moment: datetime) -> bool:
        return self.is_open and moment < self.auction_closes_at


class OfferDemand(models.Model):
    """The open bids on an offer counted in a few rows rather than one: a bid adds itself to
    the row of its organization's shard, in its own transaction, so that bids of different
    teams in an auction's closing rush do not wait on each other for one counter. The offer's
    `bid_count` and `units_bid` are these rows summed (`marketplace.services.orders`)."""

    SHARDS = 8

    offer = models.ForeignKey(Offer, on_delete=models.CASCADE, related_name="demand")
    shard = models.PositiveSmallIntegerField()
    bid_count = models.PositiveIntegerField(default=0)
    units_bid = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["offer", "shard"], name="offer_demand_one_row_per_shard"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.offer}: shard {self.shard}, {self.bid_count} bids"


class Bid(BaseModel):
    """A sealed bid: `price` per unit for up to `quantity` units, at least `min_quantity` of
    them. Its hold (`price x quantity` while open) is billing's; only the bidding organization
    ever reads a bid."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        WON = "won", "Won"
        PARTIALLY_WON = "partially_won", "Partially won"
        LOST = "lost", "Lost"
        WITHDRAWN = "withdrawn", "Withdrawn"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.OPEN: {Status.WON, Status.PARTIALLY_WON, Status.LOST, Status.WITHDRAWN},
        Status.WON: set(),
        Status.PARTIALLY_WON: set(),
        Status.LOST: set(),
        Status.WITHDRAWN: set(),
    }

    offer = models.ForeignKey(Offer, on_delete=models.PROTECT, related_name="bids")
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="bids")
    placed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    price = money_field()
    quantity = models.PositiveIntegerField()
    min_quantity = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    quantity_won = models.PositiveIntegerField(default=0)
    price_paid = money_field(null=True, blank=True)
    hold = models.OneToOneField(
        "billing.Hold", on_delete=models.PROTECT, related_name="bid", null=True
    )
    withdrawn_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The clearing reads an offer's bids in rank order straight off this index. `status`
            # is in no index of bids, so that the clearing's status change of every losing
            # bid is a heap-only update (the table leaves half of each page free for it).
            models.Index(fields=["offer", "-price", "created_at", "id"], name="bid_ranking"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["open", "won", "partially_won", "lost", "withdrawn"]),
                name="bid_status_valid",
            ),
            models.CheckConstraint(condition=Q(price__gt=0), name="bid_price_positive"),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="bid_quantity_positive"),
            models.CheckConstraint(
                condition=Q(min_quantity__gte=1, min_quantity__lte=F("quantity")),
                name="bid_min_quantity_within_quantity",
            ),
            models.CheckConstraint(
                condition=Q(quantity_won__lte=F("quantity")), name="bid_wins_at_most_its_quantity"
            ),
            models.CheckConstraint(
                condition=Q(price_paid__isnull=True) | Q(price_paid__lte=F("price")),
                name="bid_never_pays_above_its_price",
            ),
        ]

    def __str__(self) -> str:
        return f"bid {self.quantity}@{self.price} on {self.offer_id}"

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN


def quantity_unit(resource: str, capacity: str) -> str:
    """What an offer's quantity counts: core-hours or GPU-hours of preemptible capacity, cores
    or GPUs (each for the whole window) of reserved capacity."""
    if capacity == Capacity.RESERVED:
        return "GPUs" if resource == Resource.GPU else "cores"
    return "GPU-hours" if resource == Resource.GPU else "core-hours"


def window_hours(start: datetime, end: datetime) -> int:
    """The whole hours from `start` to `end` (a reserved window is a whole number of them)."""
    return int((end - start).total_seconds() // 3600)


class Allocation(BaseModel):
    """The right to use up to `quantity` units on the offer's partition during its window, at
    `unit_price`, won at auction or bought outright. Its commitment hold (billing's) keeps
    `unit_price x quantity` for the window; jobs reserve units (`reserved`) and settle what they
    used (`used`) against it, and what is left is released when the window closes."""

    class Status(models.TextChoices):
        UPCOMING = "upcoming", "Upcoming"
        ACTIVE = "active", "Active"
        CLOSED = "closed", "Closed"

    class Source(models.TextChoices):
        AUCTION = "auction", "Won at auction"
        BUY_NOW = "buy_now", "Bought now"

    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="allocations"
    )
    offer = models.ForeignKey(Offer, on_delete=models.PROTECT, related_name="allocations")
    # Copied from the offer: an allocation is read on every job submission and listed often.
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="allocations")
    partition = models.ForeignKey(Partition, on_delete=models.PROTECT, related_name="allocations")
    resource = models.CharField(max_length=8, choices=Resource.choices)
    capacity = models.CharField(
        max_length=16, choices=Capacity.choices, default=Capacity.PREEMPTIBLE
    )
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    source = models.CharField(max_length=16, choices=Source.choices)
    # Reserved capacity: the whole cores (or GPUs) held for the team for the whole window, and
    # the scheduler's reservation that holds them (`quantity` is then `block` x the window's
    # hours). The last check of that reservation against the cluster, and what it found amiss
    # ("" when it matched).
    block = models.PositiveIntegerField(null=True, blank=True)
    reservation = models.CharField(max_length=64, blank=True)
    reservation_checked_at = models.DateTimeField(null=True, blank=True)
    reservation_problem = models.CharField(max_length=500, blank=True)
    bid = models.OneToOneField(
        Bid, on_delete=models.PROTECT, null=True, blank=True, related_name="allocation"
    )
    quantity = models.PositiveIntegerField()
    unit_price = money_field()
    used = units_field(default=ZERO)
    reserved = units_field(default=ZERO)
    hold = models.OneToOneField("billing.Hold", on_delete=models.PROTECT, related_name="allocation")
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-window_start", "-id"]
        indexes = [
            models.Index(fields=["organization", "window_end"], name="allocation_org_window"),
            models.Index(fields=["closed_at", "window_end"], name="allocation_to_close"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(quantity__gt=0), name="allocation_quantity_positive"
            ),
            models.CheckConstraint(
                condition=Q(used__gte=0, reserved__gte=0)
                & Q(used__lte=F("quantity") - F("reserved")),
                name="allocation_never_overdrawn",
            ),
            models.CheckConstraint(
                condition=Q(source="buy_now", bid__isnull=True)
                | Q(source="auction", bid__isnull=False),
                name="allocation_source_matches_bid",
            ),
            # No reserved allocation exists without the reservation that holds its block.
            models.CheckConstraint(
                condition=Q(capacity="preemptible", block__isnull=True, reservation="")
                | (Q(capacity="reserved", block__gt=0) & ~Q(reservation="")),
                name="allocation_reserved_has_its_reservation",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.quantity} {self.resource} units for {self.organization}"

    @property
    def is_reserved(self) -> bool:
        return self.capacity == Capacity.RESERVED

    @property
    def remaining(self) -> Decimal:
        remaining: Decimal = Decimal(self.quantity) - self.used - self.reserved
        return remaining

    def status_at(self, moment: datetime) -> str:
        if self.closed_at is not None or moment >= self.window_end:
            return self.Status.CLOSED
        if moment >= self.window_start:
            return self.Status.ACTIVE
        return self.Status.UPCOMING

    @property
    def status(self) -> str:
        return self.status_at(timezone.now())


class PendingReservation(BaseModel):
    """A reservation being made for a reserved block that is not sold yet: written and
    committed before the scheduler is asked for it, removed in the transaction that makes its
    allocation (or once the sale is refused and the reservation taken back). The check of
    reservations against allocations leaves the scheduler's reservation `name` alone while this
    row is young, and takes it back once the row is old: a sale that crashed midway leaves no
    cores held for nobody. While it exists the team's tenant lease is not idle."""

    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="pending_reservations"
    )
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="pending_reservations"
    )
    name = models.CharField(max_length=64, unique=True)

    # A sale takes a few SSH round trips; a row older than this belongs to a sale that died.
    STALE_AFTER: ClassVar[timedelta] = timedelta(minutes=15)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"reservation {self.name} being made on {self.cluster}"


# Capacity, idle time and the owners' track record live in their own module; re-exported
# (`as`, for mypy) so that Django finds the models and callers import every model from here.
from marketplace.models_capacity import ClusterOutage as ClusterOutage  # noqa: E402
from marketplace.models_capacity import HardwareChange as HardwareChange  # noqa: E402
from marketplace.models_capacity import OwnerSideRunEnd as OwnerSideRunEnd  # noqa: E402
from marketplace.models_capacity import PartitionIdleHour as PartitionIdleHour  # noqa: E402
