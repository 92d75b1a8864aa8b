"""The ledger: accounts, the transactions and entries that move money between them, and holds.

Money lives in `Account`s. It moves only by `Transaction`s whose `Entry` rows sum to zero;
entries are written once and never edited or deleted (a PostgreSQL trigger refuses it too).
Each account caches its balance, changed under a row lock in the same transaction as the
entries that explain it, and every entry records the balance it left behind, so the cache can
be checked against the entries at any time (`selectors.ledger_verify`).

Sign convention: an account's balance is the sum of its entries. A wallet's `available` and
`held`, an owner's `earnings` and the platform's `fees` are positive; the Stripe clearing
account goes negative by exactly the money paid in, so that everything sums to zero."""

from decimal import Decimal
from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.db.models import Q

from computeshare.models import BaseModel
from computeshare.numbers import MICRO_PLACES, MICRO_UNIT

ZERO = Decimal("0")
HALF_MICRO_UNIT = MICRO_UNIT / 2


def money_field(**options: Any) -> models.DecimalField:  # type: ignore[type-arg]
    """Six places: a thousandth of a cent per core-second is still representable."""
    return models.DecimalField(max_digits=20, decimal_places=MICRO_PLACES, **options)


class ReferenceKind(models.TextChoices):
    """What a transaction or hold is about. Billing stores the other apps' ids without
    knowing their models (imports go one way)."""

    TOP_UP = "top_up", "Top-up"
    BID = "bid", "Bid"
    OFFER = "offer", "Offer"
    ALLOCATION = "allocation", "Allocation"
    JOB = "job", "Job"
    ADJUSTMENT = "adjustment", "Adjustment"
    PAYOUT = "payout", "Payout"
    DISPUTE = "dispute", "Dispute"


class Account(BaseModel):
    class Kind(models.TextChoices):
        AVAILABLE = "available", "Available"
        HELD = "held", "Held"
        EARNINGS = "earnings", "Earnings"
        FEES = "fees", "Platform fees"
        STRIPE_CLEARING = "stripe_clearing", "Stripe clearing"
        ADJUSTMENTS = "adjustments", "Platform adjustments"
        # What the organization owes the platform, as a negative balance: a refund or a lost
        # dispute its available balance could not cover. Its next money in repays it first.
        DEBT = "debt", "Owed to the platform"

    ORGANIZATION_KINDS = (Kind.AVAILABLE, Kind.HELD, Kind.EARNINGS, Kind.DEBT)
    PLATFORM_KINDS = (Kind.FEES, Kind.STRIPE_CLEARING, Kind.ADJUSTMENTS)
    NEVER_NEGATIVE = (Kind.AVAILABLE, Kind.HELD, Kind.EARNINGS, Kind.FEES)
    # Each platform account is this many rows (ADR 10): a transaction posts to the shard of the
    # organization it is about, so that charges of different teams never wait on one `fees`
    # row. The platform's balance of a kind is the sum of its shards. Raising the number later
    # is harmless (new shards open empty); lowering it leaves old shards to be summed.
    PLATFORM_SHARDS = 16

    organization = models.ForeignKey(
        "organizations.Organization",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="accounts",
    )
    kind = models.CharField(max_length=32, choices=Kind.choices)
    currency = models.CharField(max_length=3)
    balance = money_field(default=ZERO)
    # Which of the platform account's rows this is; always 0 for an organization's accounts.
    shard = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "kind"],
                condition=Q(organization__isnull=False),
                name="account_unique_kind_per_organization",
            ),
            models.UniqueConstraint(
                fields=["kind", "shard"],
                condition=Q(organization__isnull=True),
                name="account_unique_platform_kind_shard",
            ),
            models.CheckConstraint(
                condition=Q(organization__isnull=True) | Q(shard=0),
                name="account_only_platform_accounts_are_sharded",
            ),
            models.CheckConstraint(
                condition=(
                    Q(
                        organization__isnull=False,
                        kind__in=["available", "held", "earnings", "debt"],
                    )
                    | Q(
                        organization__isnull=True,
                        kind__in=["fees", "stripe_clearing", "adjustments"],
                    )
                ),
                name="account_kind_matches_owner",
            ),
            # The services refuse first, with a clear error; this is the last line of defence.
            models.CheckConstraint(
                condition=Q(balance__gte=0)
                | ~Q(kind__in=["available", "held", "earnings", "fees"]),
                name="account_balance_never_negative",
            ),
            models.CheckConstraint(
                condition=Q(balance__lte=0) | ~Q(kind="debt"), name="account_debt_never_positive"
            ),
        ]

    def __str__(self) -> str:
        if self.organization_id is None:
            return f"platform: {self.get_kind_display()} (shard {self.shard})"
        return f"{self.organization}: {self.get_kind_display()}"


class Hold(BaseModel):
    """Money of an organization set aside for a purpose (a bid, an allocation's commitment).

    `placed` is everything ever put on hold; it leaves only by capture or release, so
    `placed == amount + captured + released` always holds.

    `releasing`: a hold whose release is decided but not yet posted (a losing bid's, released
    after its auction's commit from a `HoldReleaseBatch`). It still holds its amount, on the
    wallet's `held` balance as on the hold, and nothing may capture, resize or release it but
    its batch, which closes it."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        RELEASING = "releasing", "Releasing"
        CLOSED = "closed", "Closed"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.OPEN: {Status.RELEASING, Status.CLOSED},
        Status.RELEASING: {Status.CLOSED},
        Status.CLOSED: set(),
    }

    organization = models.ForeignKey(
        "organizations.Organization", on_delete=models.PROTECT, related_name="holds"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    amount = money_field(help_text="Held now.")
    placed = money_field(help_text="Everything ever held.")
    captured = money_field(default=ZERO)
    released = money_field(default=ZERO)
    reference_kind = models.CharField(max_length=16, choices=ReferenceKind.choices)
    reference = models.UUIDField(null=True, blank=True, db_index=True)
    memo = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(amount__gte=0, captured__gte=0, released__gte=0),
                name="hold_amounts_never_negative",
            ),
            # Within half a micro-unit rather than equal: amounts have six places, so on
            # PostgreSQL's exact numerics this is equality, while SQLite (the embedded demo)
            # adds its decimals as floating point and would refuse 2.32 + 0.16 = 2.48.
            models.CheckConstraint(
                condition=Q(
                    placed__lte=models.F("amount")
                    + models.F("captured")
                    + models.F("released")
                    + HALF_MICRO_UNIT,
                    placed__gte=models.F("amount")
                    + models.F("captured")
                    + models.F("released")
                    - HALF_MICRO_UNIT,
                ),
                name="hold_placed_is_accounted_for",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["open", "releasing"]) | Q(status="closed", amount=0),
                name="hold_closed_holds_nothing",
            ),
        ]

    def __str__(self) -> str:
        return f"Hold {self.uuid} of {self.amount} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN


class HoldReleaseBatch(BaseModel):
    """Holds to release after the commit of the change that decided it (an outbox, as the
    notices' `NoticeBatch`): written in that change's transaction together with its holds'
    move to `releasing`, so a committed decision is never lost and a rolled-back one releases
    nothing. A task applies it after the commit (`hold_release_batch_apply`): every hold closes
    and each organization gets one release transaction, in one transaction that deletes the
    batch, so it is applied once; a periodic sweep applies a batch whose task was lost.
    `hold_ids`: the holds' primary keys, a JSON list (one row for any number of holds)."""

    hold_ids = models.JSONField()
    reference_kind = models.CharField(max_length=16, choices=ReferenceKind.choices)
    reference = models.UUIDField(null=True, blank=True)
    memo = models.CharField(max_length=255, blank=True)

    def __str__(self) -> str:
        return f"hold release batch {self.pk} ({len(self.hold_ids)} holds)"


class Transaction(BaseModel):
    """One balanced movement of money. `idempotency_reference` makes a retried call a replay:
    the same reference never posts twice (for example `job-run:<cluster>:<job id>:<submit>`)."""

    class Kind(models.TextChoices):
        TOP_UP = "top_up", "Top-up"
        HOLD = "hold", "Hold"
        RELEASE = "release", "Release"
        CHARGE = "charge", "Charge"
        ADJUSTMENT = "adjustment", "Adjustment"
        REFUND = "refund", "Refund"
        DISPUTE = "dispute", "Dispute"
        PAYOUT = "payout", "Payout"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    organization = models.ForeignKey(
        "organizations.Organization",
        on_delete=models.PROTECT,
        related_name="transactions",
        help_text="The organization whose wallet this is about.",
    )
    hold = models.ForeignKey(
        Hold, on_delete=models.PROTECT, null=True, blank=True, related_name="transactions"
    )
    reference_kind = models.CharField(max_length=16, choices=ReferenceKind.choices)
    reference = models.UUIDField(null=True, blank=True, db_index=True)
    # NULL, not "": unique only when given.
    idempotency_reference = models.CharField(max_length=200, unique=True, null=True, blank=True)
    memo = models.CharField(max_length=255, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    # What earned the money, for an owner's earnings per cluster: billing does not know
    # clusters, the caller names it.
    source = models.UUIDField(null=True, blank=True)
    source_name = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    kind__in=[
                        "top_up",
                        "hold",
                        "release",
                        "charge",
                        "adjustment",
                        "refund",
                        "dispute",
                        "payout",
                    ]
                ),
                name="transaction_kind_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.uuid}"


class Entry(BaseModel):
    """One line of a transaction on one account. Written once; never edited or deleted."""

    class Kind(models.TextChoices):
        TOP_UP = "top_up", "Top-up"
        HOLD = "hold", "Hold"
        RELEASE = "release", "Release"
        CHARGE = "charge", "Charge"
        EARNING = "earning", "Earning"
        FEE = "fee", "Fee"
        ADJUSTMENT = "adjustment", "Adjustment"
        REFUND = "refund", "Refund"
        DISPUTE = "dispute", "Dispute"
        PAYOUT = "payout", "Payout"

    transaction = models.ForeignKey(Transaction, on_delete=models.PROTECT, related_name="entries")
    # No index of its own: `entry_account_time` (account, created_at) serves every lookup by
    # account, and each index is one more write for every entry.
    account = models.ForeignKey(
        Account, on_delete=models.PROTECT, related_name="entries", db_index=False
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    amount = money_field()
    balance_after = money_field()

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name_plural = "entries"
        indexes = [models.Index(fields=["account", "created_at"], name="entry_account_time")]
        constraints = [
            models.CheckConstraint(condition=~Q(amount=0), name="entry_amount_not_zero"),
        ]

    def __str__(self) -> str:
        return f"{self.amount} on {self.account}"

    def save(self, *args: object, **kwargs: object) -> None:
        if self.pk is not None:
            raise ValueError("Ledger entries are never edited; post a correcting transaction.")
        super().save(*args, **kwargs)

    def delete(self, *args: object, **kwargs: object) -> tuple[int, dict[str, int]]:
        raise ValueError("Ledger entries are never deleted; post a correcting transaction.")


class Debt(Account):
    """The organizations' `debt` accounts, for the operators' admin (no table of its own)."""

    class Meta:
        proxy = True
        verbose_name = "outstanding debt"
