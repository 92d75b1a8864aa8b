"""The ledger and what hangs off it.

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


class Budget(BaseModel):
    """An organization's monthly spending limit (none: no limit) and alert thresholds."""

    organization = models.OneToOneField(
        "organizations.Organization", on_delete=models.CASCADE, related_name="budget"
    )
    monthly_limit = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    alert_thresholds = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(monthly_limit__isnull=True) | Q(monthly_limit__gte=0),
                name="budget_limit_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"Budget of {self.organization}"


DEFAULT_ALERT_THRESHOLDS = [50, 80, 100]


class BudgetAlert(BaseModel):
    """A threshold crossed in a month: at most one per organization, month and threshold, which
    is what makes the admins' mail go once. Shown on the organization's money page until an
    admin dismisses it."""

    organization = models.ForeignKey(
        "organizations.Organization", on_delete=models.CASCADE, related_name="budget_alerts"
    )
    period = models.DateField(help_text="The first day of the month.")
    threshold = models.PositiveSmallIntegerField()
    monthly_limit = models.DecimalField(max_digits=14, decimal_places=2)
    committed_and_spent = money_field()
    notified_at = models.DateTimeField(null=True, blank=True)
    dismissed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-period", "-threshold"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "period", "threshold"],
                name="budget_alert_once_per_month",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.organization}: {self.threshold}% of {self.period:%Y-%m}"


class TopUp(BaseModel):
    """Money a team pays in through Stripe. Our row exists before the PaymentIntent; only the
    signed webhook moves it to `succeeded` and credits the wallet."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        # Never paid: left pending for TOP_UP_PENDING_EXPIRY_MINUTES (the card form closed, a
        # card Stripe.js refused before asking Stripe).
        EXPIRED = "expired", "Expired"

    # A failed payment can still succeed when the team retries with another card; so can an
    # expired one if Stripe does take the money after all (it is credited, never lost); a
    # success is final.
    TRANSITIONS = {
        Status.PENDING: {Status.SUCCEEDED, Status.FAILED, Status.EXPIRED},
        Status.FAILED: {Status.SUCCEEDED},
        Status.EXPIRED: {Status.SUCCEEDED, Status.FAILED},
        Status.SUCCEEDED: set(),
    }

    organization = models.ForeignKey(
        "organizations.Organization", on_delete=models.PROTECT, related_name="top_ups"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # NULL, not "": unique only when given.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    payment_intent = models.CharField(max_length=255, unique=True, null=True, blank=True)
    client_secret = models.CharField(max_length=255, blank=True)
    failure_reason = models.CharField(max_length=500, blank=True)
    succeeded_at = models.DateTimeField(null=True, blank=True)
    # What Stripe's `charge.refunded` events said was refunded, and the ledger debited: each
    # event carries the charge's running total, so a replayed or late event changes nothing.
    amount_refunded = models.DecimalField(max_digits=14, decimal_places=2, default=ZERO)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "succeeded", "failed", "expired"]),
                name="top_up_status_valid",
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="top_up_amount_positive"),
            models.UniqueConstraint(
                fields=["created_by", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="top_up_unique_idempotency_key",
            ),
        ]

    def __str__(self) -> str:
        return f"Top-up {self.uuid} of {self.amount} {self.currency} ({self.status})"

    @property
    def amount_minor(self) -> int:
        """The amount in the currency's minor unit, as Stripe counts it."""
        return int(self.amount * 100)


class StripeEvent(models.Model):
    """Every verified webhook event, stored by its Stripe id before it is acted on."""

    event_id = models.CharField(max_length=255, unique=True)
    type = models.CharField(max_length=128)
    payload = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)
    deliveries = models.PositiveIntegerField(default=1)
    processed_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["-received_at", "-id"]

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"


class TopUpRefund(BaseModel):
    """A refund an operator asked Stripe for. The wallet is debited by Stripe's
    `charge.refunded`, as a top-up is credited only by `payment_intent.succeeded`; this row is
    who asked, why, and Stripe's answer. Its idempotency key is derived from the row, so that
    asking again after a lost answer refunds once."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    TRANSITIONS = {
        Status.PENDING: {Status.SUCCEEDED, Status.FAILED},
        Status.SUCCEEDED: set(),
        Status.FAILED: set(),
    }

    top_up = models.ForeignKey(TopUp, on_delete=models.PROTECT, related_name="refunds")
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    reason = models.CharField(max_length=255)
    stripe_refund = models.CharField(max_length=255, unique=True, null=True, blank=True)
    failure_reason = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "succeeded", "failed"]),
                name="top_up_refund_status_valid",
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="top_up_refund_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"Refund {self.uuid} of {self.amount} ({self.status})"


class Dispute(BaseModel):
    """A chargeback of a top-up, from Stripe's `charge.dispute.*` events. `withdrawn` says the
    wallet gave the money back (Stripe took it from the platform); a won dispute returns it."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        WON = "won", "Won"
        LOST = "lost", "Lost"

    TRANSITIONS = {
        Status.OPEN: {Status.WON, Status.LOST},
        Status.WON: set(),
        Status.LOST: set(),
    }

    top_up = models.ForeignKey(TopUp, on_delete=models.PROTECT, related_name="disputes")
    stripe_dispute = models.CharField(max_length=255, unique=True)
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    reason = models.CharField(max_length=64, blank=True)
    is_withdrawn = models.BooleanField(default=False)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["open", "won", "lost"]), name="dispute_status_valid"
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="dispute_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"Dispute {self.stripe_dispute} of {self.amount} ({self.status})"


class ConnectedAccount(BaseModel):
    """An owner organization's Stripe Connect (Express) account, where its payouts go. Our row
    exists before Stripe's account; its state follows Stripe's `account.updated` events, the
    newest applied last (`stripe_updated`, the event's creation time)."""

    class Status(models.TextChoices):
        ONBOARDING = "onboarding", "Onboarding"
        ACTIVE = "active", "Active"
        RESTRICTED = "restricted", "Restricted"

    TRANSITIONS = {
        Status.ONBOARDING: {Status.ACTIVE, Status.RESTRICTED},
        Status.ACTIVE: {Status.RESTRICTED},
        Status.RESTRICTED: {Status.ACTIVE},
    }

    organization = models.OneToOneField(
        "organizations.Organization", on_delete=models.PROTECT, related_name="connected_account"
    )
    stripe_account = models.CharField(max_length=255, unique=True, null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ONBOARDING)
    details_submitted = models.BooleanField(default=False)
    payouts_enabled = models.BooleanField(default=False)
    transfers_active = models.BooleanField(default=False)
    requirements_due = models.JSONField(default=list, blank=True)
    stripe_updated = models.BigIntegerField(
        default=0, help_text="When Stripe created the last event applied (Unix seconds)."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["onboarding", "active", "restricted"]),
                name="connected_account_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"Stripe account {self.stripe_account or '(not created)'} of {self.organization}"

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.ACTIVE


class Payout(BaseModel):
    """Payable earnings sent to the organization's connected account by a Stripe transfer. The
    ledger moves the money out of `earnings` when the row is made (so two payouts never pay
    the same earnings); a transfer Stripe refuses puts it back. The transfer's idempotency key
    is derived from the row, so a retry after a lost answer transfers once."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        PAID = "paid", "Paid"
        FAILED = "failed", "Failed"

    TRANSITIONS = {
        Status.PENDING: {Status.PAID, Status.FAILED},
        Status.PAID: set(),
        Status.FAILED: set(),
    }

    organization = models.ForeignKey(
        "organizations.Organization", on_delete=models.PROTECT, related_name="payouts"
    )
    connected_account = models.ForeignKey(
        ConnectedAccount, on_delete=models.PROTECT, related_name="payouts"
    )
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    stripe_transfer = models.CharField(max_length=255, unique=True, null=True, blank=True)
    failure_reason = models.CharField(max_length=500, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    # NULL, not "": unique only when given.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "paid", "failed"]), name="payout_status_valid"
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="payout_amount_positive"),
            models.UniqueConstraint(
                fields=["created_by", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="payout_unique_idempotency_key",
            ),
        ]

    def __str__(self) -> str:
        return f"Payout {self.uuid} of {self.amount} {self.currency} ({self.status})"

    @property
    def amount_minor(self) -> int:
        return int(self.amount * 100)


class Debt(Account):
    """The organizations' `debt` accounts, for the operators' admin (no table of its own)."""

    class Meta:
        proxy = True
        verbose_name = "outstanding debt"
