"""Input and output shapes of the cluster, offer, bid and allocation endpoints (docs/api.md). Units
and money are decimal strings; ids are UUIDs. They translate; the services decide."""

from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.models import Hold
from billing.serializers import Money
from computeshare.ids import IdPrefixField
from computeshare.moments import BoundedDateTimeField
from computeshare.numbers import (
    MICRO_PLACES,
    DecimalString,
    decimal_string_message,
    is_decimal_text,
)
from marketplace.models import (
    Allocation,
    Bid,
    Capacity,
    Cluster,
    ClusterVerification,
    Offer,
    Resource,
    TenantAccount,
    backend_runs_jobs_as_tenants,
)


def units_text(value: Decimal | int | None) -> str | None:
    """Units as a plain decimal string without trailing zeros: `"40"`, `"12.5"`."""
    if value is None:
        return None
    text = f"{value:f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def money_text(value: Decimal | None) -> str | None:
    return None if value is None else f"{value:.6f}"


def time_text(value: datetime | None) -> str | None:
    """As DRF writes times (ISO 8601, UTC as `Z`), without its per-call time zone lookup: the
    offers list writes five per offer."""
    if value is None:
        return None
    text = value.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


@extend_schema_field({"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$", "example": "40"})
class Units(serializers.Field):
    """Read-only units as a decimal string (`"40"`, `"0.25"`)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, value: Any) -> str | None:
        return units_text(value)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1},
            {"type": "string", "pattern": "^[0-9]+$"},
        ],
        "description": "A whole number of units, as a number or a decimal string.",
    }
)
class WholeUnits(serializers.Field):
    """A whole number of units, given as a JSON number or a decimal string; the service checks
    the range."""

    default_error_messages = {
        "invalid": "A whole number of units.",
        "not_a_string": decimal_string_message("quantity", "10"),
    }

    def to_internal_value(self, data: Any) -> Decimal:
        if isinstance(data, float):
            # A JSON number with a point or an exponent (2.0, 1e309): docs/api.md asks for strings.
            self.fail("not_a_string")
        if isinstance(data, bool) or not isinstance(data, int | str):
            self.fail("invalid")
        if isinstance(data, str) and not is_decimal_text(data.strip()):
            self.fail("invalid")
        try:
            number = Decimal(str(data).strip())
        except ArithmeticError:
            self.fail("invalid")
        if not number.is_finite() or number != number.to_integral_value():
            self.fail("invalid")
        return number

    def to_representation(self, value: Any) -> str | None:
        return units_text(value)


# --- Clusters ------------------------------------------------------------------------------------


class PartitionSerializer(serializers.Serializer):
    name = serializers.CharField()
    cpus = serializers.IntegerField()
    gpus = serializers.IntegerField()
    nodes = serializers.IntegerField()
    max_time_minutes = serializers.IntegerField(allow_null=True)
    is_up = serializers.BooleanField()


class TenantAccountsSerializer(serializers.Serializer):
    """A cluster's pool of tenant accounts as buyers need it: each team on the cluster works as
    one account of its own."""

    total = serializers.IntegerField(
        help_text="How many teams the cluster can serve at once: its tenant accounts, those "
        "quarantined included, the retired ones not."
    )
    free = serializers.IntegerField(
        help_text="How many more teams it can take now: accounts no team holds. A purchase or "
        "a winning bid by a team without an account there is refused (409 "
        "`tenant_accounts_exhausted`) while this is 0."
    )


def cluster_capacity_kinds(cluster: Cluster) -> list[str]:
    """The kinds the cluster sells, in their fixed order."""
    kinds = [(Capacity.PREEMPTIBLE, cluster.sells_preemptible)]
    kinds.append((Capacity.RESERVED, cluster.sells_reserved))
    return [str(kind) for kind, sold in kinds if sold]


def tenant_accounts_of(backend: str, counts: Mapping[str, Any]) -> dict[str, int] | None:
    """`{"total", "free"}` from the annotations `selectors.tenant_account_counts` makes; None
    on a cluster whose jobs do not run as tenant accounts (the demo's local backend), which
    serves any number of teams."""
    if not backend_runs_jobs_as_tenants(backend):
        return None
    return {"total": counts["tenant_accounts_total"], "free": counts["tenant_accounts_free"]}


class ClusterSerializer(serializers.Serializer):
    """Public fields for everyone signed in; the connection fields only for the clusters the
    selector marks `viewer_is_owner` (their owners). The private key is never returned."""

    id = serializers.UUIDField(source="uuid")
    name = serializers.CharField()
    organization = serializers.UUIDField(source="organization.uuid")
    organization_name = serializers.CharField(source="organization.name")
    status = serializers.ChoiceField(choices=Cluster.Status.choices)
    partitions = PartitionSerializer(many=True)
    verified_at = serializers.DateTimeField(allow_null=True)
    tenant_accounts = serializers.SerializerMethodField(
        help_text="How many teams the cluster serves at once and how many more it can take "
        "now; null on the demo's local backend, where jobs do not run as tenant accounts."
    )
    capacity_kinds = serializers.SerializerMethodField(
        help_text="The kinds of capacity the cluster can sell, as its last verification found "
        "Slurm able to hold them: `preemptible`, `reserved`."
    )
    preemption_grace_seconds = serializers.IntegerField(
        allow_null=True,
        help_text="How long a preempted job has between SIGTERM and its requeue (the market "
        "QOS's GraceTime); null where preemptible capacity is not sold.",
    )
    capacity_refusals = serializers.SerializerMethodField(
        required=False,
        help_text="Owners only: why each kind the cluster cannot sell is refused, in words to "
        'act on (`{"preemptible": "..."}`); empty when it sells both.',
    )
    market_qos = serializers.CharField(
        required=False,
        help_text="Owners only: the QOS teams' preemptible jobs run under (fixed mode).",
    )
    owner_qos = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Owners only: the owner's QOSes that preempt the market's.",
    )
    ssh_host = serializers.CharField(required=False, help_text="Owners only.")
    ssh_port = serializers.IntegerField(required=False, help_text="Owners only.")
    ssh_user = serializers.CharField(required=False, help_text="Owners only.")
    ssh_host_key = serializers.CharField(required=False, help_text="Owners only.")
    host_key_fingerprint = serializers.CharField(required=False, help_text="Owners only.")
    account_mode = serializers.ChoiceField(
        choices=Cluster.AccountMode.choices, required=False, help_text="Owners only."
    )
    slurm_account = serializers.CharField(required=False, help_text="Owners only.")
    status_detail = serializers.CharField(required=False, help_text="Owners only.")
    tenant_group = serializers.CharField(
        required=False,
        help_text="Owners only. The Unix group of the tenant accounts (scripts/cluster-setup).",
    )
    sftp_server = serializers.CharField(
        required=False,
        help_text="Owners only. The SFTP server program the tenants' sessions run.",
    )
    tenant_idle_account = serializers.CharField(
        required=False,
        help_text="Owners only. Managed mode: the Slurm account idle tenants sit in, as the "
        "last verification read it.",
    )
    tracks_gpus = serializers.BooleanField(
        required=False,
        help_text="Owners only. Whether accounting records GPUs (gres/gpu in "
        "AccountingStorageTRES), as the last verification read it; GPU offers need it.",
    )

    OWNER_FIELDS: tuple[str, ...] = (
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
    )

    @extend_schema_field(serializers.ListField(child=serializers.ChoiceField(Capacity.choices)))
    def get_capacity_kinds(self, cluster: Cluster) -> list[str]:
        return cluster_capacity_kinds(cluster)

    @extend_schema_field(serializers.DictField(child=serializers.CharField()))
    def get_capacity_refusals(self, cluster: Cluster) -> dict[str, str]:
        refusals = {
            Capacity.PREEMPTIBLE: "" if cluster.sells_preemptible else cluster.preemptible_refusal,
            Capacity.RESERVED: "" if cluster.sells_reserved else cluster.reserved_refusal,
        }
        return {str(kind): reason for kind, reason in refusals.items() if reason}

    @extend_schema_field(TenantAccountsSerializer(allow_null=True))
    def get_tenant_accounts(self, cluster: Cluster) -> dict[str, int] | None:
        # Read from `selectors.cluster_list`'s annotations, as every endpoint loads clusters.
        return tenant_accounts_of(cluster.backend, vars(cluster))

    def to_representation(self, instance: Cluster) -> dict[str, Any]:
        data = super().to_representation(instance)
        # Who sees the owners' fields is the selector's to say (`cluster_list_for_user`).
        if not getattr(instance, "viewer_is_owner", False):
            for field in self.OWNER_FIELDS:
                data.pop(field, None)
        return data


class ClusterCreateSerializer(serializers.Serializer):
    organization = serializers.UUIDField()
    name = serializers.CharField(max_length=120)
    ssh_host = serializers.CharField(max_length=255)
    ssh_port = serializers.IntegerField(default=22, min_value=1, max_value=65535)
    ssh_user = serializers.CharField(max_length=64)
    ssh_private_key = serializers.CharField(
        write_only=True, max_length=20_000, trim_whitespace=False
    )
    ssh_host_key = serializers.CharField(max_length=2_000)
    account_mode = serializers.ChoiceField(choices=Cluster.AccountMode.choices, required=False)
    slurm_account = serializers.CharField(max_length=64, required=False, allow_blank=True)
    tenant_group = serializers.CharField(
        max_length=32,
        required=False,
        help_text="The Unix group of the tenant accounts scripts/cluster-setup made; "
        "`computeshare-tenants` when not given.",
    )
    sftp_server = serializers.CharField(
        max_length=255,
        required=False,
        help_text="The SFTP server program, as on the `Subsystem sftp` line of the cluster's "
        "sshd_config; `/usr/lib/openssh/sftp-server` when not given.",
    )


class VerificationStepSerializer(serializers.Serializer):
    key = serializers.CharField(
        help_text="Which check: connect, partitions, queries, visibility, operator and limits "
        "(managed mode), pool, sudo, homes, sftp, idle (managed mode), sbatch, gpus, proctrack, "
        "nodes, preemption, reservations."
    )
    title = serializers.CharField(help_text="The check in words, with the names it concerns.")
    status = serializers.ChoiceField(choices=["passed", "failed", "warning", "running"])
    detail = serializers.CharField(
        help_text="Why it failed or warns, in words an owner can act on; what it found "
        "otherwise (may be empty)."
    )


class VerificationSerializer(serializers.Serializer):
    """One verification of a cluster, as the worker runs it and once it has ended."""

    id = serializers.UUIDField(source="uuid")
    status = serializers.ChoiceField(
        choices=ClusterVerification.Status.choices,
        source="shown_status",
        help_text="`running` while a worker verifies (follow the cluster's GET); `succeeded` "
        "or `failed` once it has ended. A verification no worker finished within a few "
        "minutes reads `failed`.",
    )
    step = serializers.CharField(help_text="The check running now (`Done` once ended).")
    steps = VerificationStepSerializer(many=True)
    code = serializers.CharField(
        source="error_code",
        help_text="Why it failed, once it has: `cluster_unreachable` (no SSH connection could "
        "be opened; one reason whatever the cause), `host_key_mismatch`, "
        "`cluster_misconfigured` (`failed_step` names the check), `cluster_suspended` or "
        "`internal_error`; empty otherwise.",
    )
    detail = serializers.CharField(source="shown_detail")
    failed_step = serializers.SerializerMethodField(
        help_text="The key of the step that failed, if one did."
    )
    requested_at = serializers.DateTimeField(source="created_at")
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_failed_step(self, verification: ClusterVerification) -> str | None:
        failed = [step for step in verification.steps if step.get("status") == "failed"]
        return failed[-1].get("key") if failed else None


class ClusterDetailSerializer(ClusterSerializer):
    """One cluster; its owners also see its latest verification."""

    verification = VerificationSerializer(
        source="latest_verification",
        allow_null=True,
        required=False,
        help_text="Owners only: the latest verification, null before the first.",
    )

    OWNER_FIELDS = (*ClusterSerializer.OWNER_FIELDS, "verification")


class ClusterConnectionSerializer(serializers.Serializer):
    """A partial change of how the platform reaches the cluster (PATCH)."""

    ssh_host = serializers.CharField(max_length=255, required=False)
    ssh_port = serializers.IntegerField(min_value=1, max_value=65535, required=False)
    ssh_user = serializers.CharField(max_length=64, required=False)
    ssh_private_key = serializers.CharField(
        write_only=True, max_length=20_000, trim_whitespace=False, required=False
    )
    ssh_host_key = serializers.CharField(max_length=2_000, required=False)
    tenant_group = serializers.CharField(max_length=32, required=False)
    sftp_server = serializers.CharField(max_length=255, required=False)


class TenantAccountSerializer(serializers.Serializer):
    """One account of a cluster's pool, as its owners see it."""

    username = serializers.CharField()
    status = serializers.ChoiceField(choices=TenantAccount.Status.choices)
    status_detail = serializers.CharField(
        help_text="Why a quarantined account is out of the pool (what the scrub left), or why "
        "one was retired."
    )
    leased_to = serializers.CharField(
        allow_null=True,
        help_text="The organization whose lease holds the account (also while it is scrubbed, "
        "and when its scrub failed); null when no team holds it.",
    )
    last_scrubbed_at = serializers.DateTimeField(allow_null=True)


# --- Offers --------------------------------------------------------------------------------------


class HardwareSerializer(serializers.Serializer):
    """The partition's nodes as the cluster's last verification read them."""

    nodes = serializers.IntegerField()
    cpus_per_node = serializers.IntegerField(help_text="Of the smallest node.")
    memory_per_node_mb = serializers.IntegerField(help_text="Of the smallest node, in MB.")
    gpus_per_node = serializers.IntegerField(help_text="Of the smallest node.")
    gpu_types = serializers.ListField(child=serializers.CharField(), help_text="Of any node.")
    features = serializers.ListField(child=serializers.CharField(), help_text="Of any node.")
    nodes_differ = serializers.BooleanField(
        help_text="Whether the nodes differ: types and features are then not on every node."
    )


class OfferSerializer(serializers.Serializer):
    """An offer as everyone signed in sees it, with the public aggregate demand. Written out by
    hand in `to_representation`: the offers list is the busiest read of the site."""

    id = serializers.UUIDField()
    cluster = serializers.UUIDField()
    cluster_name = serializers.CharField()
    partition = serializers.CharField()
    resource = serializers.ChoiceField(choices=Resource.choices)
    capacity = serializers.ChoiceField(
        choices=Capacity.choices,
        help_text="`preemptible`: core- or GPU-hours on idle cores, at a low priority; the "
        "owner's own jobs preempt yours (SIGTERM, then after `preemption_grace_seconds` the "
        "job is requeued; a preempted run is not charged). `reserved`: whole cores (or GPUs, "
        "in whole nodes) held for you alone by a Slurm reservation for the whole window.",
    )
    quantity = serializers.CharField(help_text="In `quantity_unit`.")
    quantity_unit = serializers.ChoiceField(
        choices=["core-hours", "GPU-hours", "cores", "GPUs"],
        help_text="What `quantity`, `remaining`, bids and purchases count: hours of "
        "preemptible capacity, or cores (GPUs) held for the whole window.",
    )
    unit_hours = serializers.IntegerField(
        help_text="Core-hours (GPU-hours) in one unit of `quantity`: 1, or a reserved window's "
        "hours. Prices are always per core-hour (GPU-hour): a unit costs price x unit_hours."
    )
    preemption_grace_seconds = serializers.IntegerField(
        allow_null=True,
        help_text="Preemptible: how long a job has between SIGTERM and its requeue when the "
        "owner's jobs take the cores back; null for reserved capacity, or where unknown.",
    )
    remaining = serializers.CharField(help_text="Units still for sale.")
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    reserve_price = serializers.CharField(help_text="Per unit.")
    buy_now_price = serializers.CharField(allow_null=True, help_text="Per unit.")
    auction_closes_at = serializers.DateTimeField()
    max_per_buyer = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=Offer.Status.choices)
    clearing_price = serializers.CharField(allow_null=True)
    cleared_at = serializers.DateTimeField(allow_null=True)
    bid_count = serializers.IntegerField()
    units_bid = serializers.CharField()
    currency = serializers.CharField()
    created_at = serializers.DateTimeField()
    tenant_accounts = TenantAccountsSerializer(
        allow_null=True,
        help_text="Of the offer's cluster; null on the demo's local backend, where jobs do not "
        "run as tenant accounts.",
    )
    hardware = HardwareSerializer()

    def to_representation(self, row: Mapping[str, Any]) -> dict[str, Any]:
        # The declared fields, each formatted as DRF would, in one dict: DRF's own loop over
        # the fields measured 5.3 ms for a page of 50 rows against 0.8 ms for this. Nothing
        # here decides: every value is the selector's.
        tenant_accounts = row["tenant_accounts"]
        return {
            "id": str(row["uuid"]),
            "cluster": str(row["cluster__uuid"]),
            "cluster_name": row["cluster__name"],
            "partition": row["partition__name"],
            "resource": row["resource"],
            "capacity": row["capacity"],
            "quantity": str(row["quantity"]),
            "quantity_unit": row["quantity_unit"],
            "unit_hours": row["unit_hours"],
            "preemption_grace_seconds": row["preemption_grace_seconds"],
            "remaining": str(row["remaining"]),
            "window_start": time_text(row["window_start"]),
            "window_end": time_text(row["window_end"]),
            "reserve_price": money_text(row["reserve_price"]),
            "buy_now_price": money_text(row["buy_now_price"]),
            "auction_closes_at": time_text(row["auction_closes_at"]),
            "max_per_buyer": None if row["max_per_buyer"] is None else str(row["max_per_buyer"]),
            "status": row["status"],
            "clearing_price": money_text(row["clearing_price"]),
            "cleared_at": time_text(row["cleared_at"]),
            "bid_count": row["bid_count"],
            "units_bid": str(row["units_bid"]),
            "currency": row["currency"],
            "created_at": time_text(row["created_at"]),
            # In the fields' order (PostgreSQL's jsonb keeps its own).
            "tenant_accounts": None
            if tenant_accounts is None
            else {"total": tenant_accounts["total"], "free": tenant_accounts["free"]},
            "hardware": {name: row["hardware"][name] for name in HARDWARE_FIELDS},
        }


HARDWARE_FIELDS = tuple(HardwareSerializer().fields)


class OfferCreateSerializer(serializers.Serializer):
    cluster = serializers.UUIDField()
    partition = serializers.CharField(max_length=64)
    resource = serializers.ChoiceField(choices=Resource.choices)
    capacity = serializers.ChoiceField(
        choices=Capacity.choices,
        default=Capacity.PREEMPTIBLE,
        help_text="`preemptible` (default): `quantity` core-hours (GPU-hours). `reserved`: "
        "`quantity` whole cores (GPUs, a multiple of a node's) for the whole window, which is "
        "a whole number of hours and starts after the auction closes. 409 "
        "`capacity_not_sold` where the cluster's verification found the kind impossible.",
    )
    quantity = WholeUnits()
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    reserve_price = DecimalString(
        max_digits=20, decimal_places=MICRO_PLACES, noun="price", example="1.50"
    )
    buy_now_price = DecimalString(
        max_digits=20,
        decimal_places=MICRO_PLACES,
        required=False,
        allow_null=True,
        noun="price",
        example="2.00",
    )
    auction_closes_at = serializers.DateTimeField()
    max_per_buyer = WholeUnits(required=False, allow_null=True)


class PriceHistorySerializer(serializers.Serializer):
    offer = serializers.UUIDField(source="uuid")
    cluster = serializers.UUIDField(source="cluster.uuid")
    partition = serializers.CharField(source="partition.name")
    resource = serializers.ChoiceField(choices=Resource.choices)
    capacity = serializers.ChoiceField(choices=Capacity.choices)
    auction_closed_at = serializers.DateTimeField(source="auction_closes_at")
    cleared_at = serializers.DateTimeField()
    clearing_price = Money(allow_null=True, help_text="Null when nothing sold at auction.")
    quantity_sold = Units(source="units_sold")
    quantity = Units()


class PriceHistoryFilterSerializer(serializers.Serializer):
    cluster = serializers.UUIDField(required=False)
    partition = serializers.CharField(required=False, max_length=64)
    resource = serializers.ChoiceField(choices=Resource.choices, required=False)
    capacity = serializers.ChoiceField(
        choices=Capacity.choices,
        default=Capacity.PREEMPTIBLE,
        help_text="One kind at a time: their prices are not mixed.",
    )


# --- Orders --------------------------------------------------------------------------------------


class PurchaseSerializer(serializers.Serializer):
    organization = serializers.UUIDField()
    quantity = WholeUnits()


class BidCreateSerializer(serializers.Serializer):
    organization = serializers.UUIDField()
    quantity = WholeUnits()
    price = DecimalString(max_digits=20, decimal_places=MICRO_PLACES, noun="price", example="1.50")
    min_quantity = WholeUnits(required=False, allow_null=True)


class BidSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uuid")
    offer = serializers.UUIDField(source="offer.uuid")
    organization = serializers.UUIDField(source="organization.uuid")
    price = Money()
    quantity = Units()
    min_quantity = Units()
    status = serializers.ChoiceField(choices=Bid.Status.choices)
    quantity_won = Units()
    price_paid = Money(allow_null=True)
    held = Money(source="hold.amount", help_text="What the bid holds on the wallet now.")
    hold_status = serializers.ChoiceField(
        source="hold.status",
        choices=Hold.Status.choices,
        help_text="The bid's hold: `open` while the bid is open (a winning bid's stays open as "
        "its allocation's commitment); `releasing` from the clearing its bid lost until its "
        "money is back on the available balance, within seconds (`held` still shows it); "
        "`closed` once released (a withdrawn bid's at once).",
    )
    currency = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    withdrawn_at = serializers.DateTimeField(allow_null=True)

    def get_currency(self, bid: Bid) -> str:
        return str(settings.PLATFORM_CURRENCY)


class BidFilterSerializer(serializers.Serializer):
    id_prefix = IdPrefixField()
    offer = serializers.UUIDField(required=False)
    status = serializers.ChoiceField(choices=Bid.Status.choices, required=False)
    organization = serializers.UUIDField(required=False)


class AllocationSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uuid")
    organization = serializers.UUIDField(source="organization.uuid")
    offer = serializers.UUIDField(source="offer.uuid")
    cluster = serializers.UUIDField(source="cluster.uuid")
    cluster_name = serializers.CharField(source="cluster.name")
    partition = serializers.CharField(source="partition.name")
    resource = serializers.ChoiceField(choices=Resource.choices)
    capacity = serializers.ChoiceField(choices=Capacity.choices)
    # A field named `source`: DRF collects declared fields by name, while the stubs take it for
    # Field.source (the attribute path).
    source = serializers.ChoiceField(choices=Allocation.Source.choices)  # type: ignore[assignment]
    quantity = Units(
        help_text="Core-hours (GPU-hours) the team may use; a reserved block's cores x the "
        "window's hours."
    )
    block = serializers.IntegerField(
        allow_null=True,
        help_text="Reserved: the cores (GPUs) held for the team alone for the whole window; "
        "null for preemptible capacity.",
    )
    reservation = serializers.CharField(
        help_text="Reserved: the Slurm reservation that holds the block (its jobs run with "
        "`--reservation`); empty for preemptible capacity."
    )
    reservation_problem = serializers.CharField(
        help_text="Reserved: what the last check found wrong with the reservation on the "
        "cluster and could not put right (empty when all is well)."
    )
    used = Units()
    reserved = Units()
    remaining = Units()
    unit_price = Money()
    held = Money(source="hold.amount", help_text="What the commitment hold keeps now.")
    currency = serializers.SerializerMethodField()
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    status = serializers.ChoiceField(choices=Allocation.Status.choices)
    created_at = serializers.DateTimeField()

    def get_currency(self, allocation: Allocation) -> str:
        return str(settings.PLATFORM_CURRENCY)


class AllocationFilterSerializer(serializers.Serializer):
    id_prefix = IdPrefixField()
    status = serializers.ChoiceField(choices=Allocation.Status.choices, required=False)
    organization = serializers.UUIDField(required=False)
    cluster = serializers.UUIDField(required=False)


# --- Capacity ------------------------------------------------------------------------------------


class ClusterFilterSerializer(serializers.Serializer):
    id_prefix = IdPrefixField()


class CalendarFilterSerializer(serializers.Serializer):
    resource = serializers.ChoiceField(choices=Resource.choices, required=False, default="cpu")
    start = BoundedDateTimeField(
        required=False,
        help_text="The first hour (rounded down to the hour), from 2000 to 2999; now by default.",
    )
    hours = serializers.IntegerField(
        required=False, default=168, min_value=1, max_value=24 * 35, help_text="1 to 840."
    )


class CalendarHourSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    sold = serializers.CharField(help_text="Units the partition's offers take in this hour.")
    free = serializers.CharField(help_text="Units of this hour no offer takes yet.")


class CalendarSerializer(serializers.Serializer):
    cluster = serializers.UUIDField()
    partition = serializers.CharField()
    resource = serializers.ChoiceField(choices=Resource.choices)
    capacity_per_hour = serializers.IntegerField(
        help_text="What the partition has in each hour: its CPUs (core-hours) or GPUs."
    )
    hours = CalendarHourSerializer(many=True)


class OfferExtendSerializer(serializers.Serializer):
    quantity = WholeUnits(required=False, allow_null=True)
    window_end = serializers.DateTimeField(required=False, allow_null=True)


TRACK_RECORD_HOW = (
    "Counted by the platform over the last `days` days from what it saw itself; the owner types "
    "nothing in. `run_ends`: runs of teams' jobs that Slurm's accounting ended as NODE_FAIL, "
    "PREEMPTED or BOOT_FAIL (not charged). `unreachable_seconds`: from the first poll or "
    "verification that could not reach the cluster over SSH (or whose Slurm did not answer) to "
    "the next that did; `unreachable_while_sold_seconds`: the part of it inside the window of "
    "hours sold on the cluster. `hardware_changes`: verifications that found a partition's "
    "nodes, CPUs or GPUs other than the verification before, or the partition gone."
)


class TrackRecordSerializer(serializers.Serializer):
    cluster = serializers.UUIDField()
    days = serializers.IntegerField()
    since = serializers.DateTimeField()
    runs_ended_by_owner = serializers.IntegerField()
    run_ends = serializers.DictField(
        child=serializers.IntegerField(), help_text="Slurm's end state: how many runs."
    )
    outages = serializers.IntegerField()
    unreachable_seconds = serializers.IntegerField()
    unreachable_while_sold_seconds = serializers.IntegerField()
    hardware_changes = serializers.IntegerField()
    how_computed = serializers.CharField()


class IdleHourSerializer(serializers.Serializer):
    weekday = serializers.IntegerField(help_text="0 is Monday.")
    hour = serializers.IntegerField(help_text="UTC.")
    samples = serializers.IntegerField()
    mean_idle = serializers.CharField(help_text="Mean idle CPUs (or GPUs) in this hour.")
    share = serializers.CharField(help_text="Mean share of the partition idle, 0 to 1.")


class SuggestionSerializer(serializers.Serializer):
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    per_hour = serializers.IntegerField()
    quantity = serializers.IntegerField()
    auction_closes_at = serializers.DateTimeField()
    reserve_price = serializers.CharField(
        allow_null=True, help_text="Null when no auction has cleared on the market yet."
    )
    price_basis = serializers.CharField()


class IdleTimeSerializer(serializers.Serializer):
    cluster = serializers.UUIDField()
    partition = serializers.CharField()
    resource = serializers.ChoiceField(choices=Resource.choices)
    days = serializers.IntegerField()
    hours = IdleHourSerializer(many=True, help_text="Only the hours of the week with samples.")
    suggestion = SuggestionSerializer(allow_null=True)


class IdleFilterSerializer(serializers.Serializer):
    resource = serializers.ChoiceField(choices=Resource.choices, required=False, default="cpu")
