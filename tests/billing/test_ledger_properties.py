"""Random sequences of credits, holds, resizes, captures, releases and replays keep the ledger
sound, and match a model of the balances kept by the test itself.

Each example runs in a savepoint that is rolled back at its end, so examples do not see each
other's money (the test's own transaction is shared by all of them)."""

from dataclasses import dataclass, field
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import transaction
from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from billing import selectors, services
from billing.errors import HoldNotOpen, HoldTooSmall, InsufficientFunds
from billing.models import Account, Entry, Hold, ReferenceKind, Transaction
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db

D = Decimal
ZERO = D(0)
MICRO = D("0.000001")
PAYERS = (0, 1)  # organizations with wallets that place holds
PAYEES = (1, 2)  # organizations paid by captures: one also pays, one only earns

# --- Operations --------------------------------------------------------------------------------

amounts = st.one_of(
    st.decimals(min_value=MICRO, max_value=D("0.0001"), places=6),
    st.decimals(min_value=MICRO, max_value=D("150"), places=6),
    st.integers(min_value=1, max_value=150).map(D),
)


@dataclass(frozen=True)
class Share:
    """A per cent of what the hold holds when the operation runs (rounded down to the
    micro-unit, at least one micro-unit), so that captures and releases often fit."""

    percent: int

    def of(self, amount: Decimal) -> Decimal:
        return max(MICRO, (amount * self.percent / 100).quantize(MICRO, rounding=ROUND_DOWN))


shares = st.integers(min_value=1, max_value=100).map(Share)
hold_index = st.integers(min_value=0, max_value=31)
operations = st.one_of(
    st.tuples(st.just("credit"), st.sampled_from(PAYERS), amounts),
    st.tuples(st.just("place"), st.sampled_from(PAYERS), amounts),
    st.tuples(st.just("resize"), hold_index, st.just(ZERO) | amounts),
    st.tuples(st.just("capture"), hold_index, shares | amounts, st.sampled_from(PAYEES)),
    st.tuples(st.just("release"), hold_index, st.none() | shares | amounts),
    st.tuples(st.just("replay"), hold_index),
)


# --- The model ---------------------------------------------------------------------------------


def fee_of(amount: Decimal) -> Decimal:
    return (amount / 10).quantize(MICRO, rounding=ROUND_HALF_UP)


@dataclass
class HoldModel:
    pk: int
    organization: int
    amount: Decimal
    placed: Decimal
    captured: Decimal = ZERO
    released: Decimal = ZERO
    open: bool = True


@dataclass
class Model:
    available: list[Decimal] = field(default_factory=lambda: [ZERO] * 3)
    held: list[Decimal] = field(default_factory=lambda: [ZERO] * 3)
    earnings: list[Decimal] = field(default_factory=lambda: [ZERO] * 3)
    fees: Decimal = ZERO
    holds: list[HoldModel] = field(default_factory=list)
    # (idempotency reference, hold, amount, payee, transaction pk) of each capture made.
    captures: list[tuple[str, HoldModel, Decimal, int, int]] = field(default_factory=list)


class Skipped(Exception):
    """Marks an operation on a hold (or a replay) when there is nothing to act on yet."""


SKIPPED = Skipped


class World:
    def __init__(self) -> None:
        self.organizations = [OrganizationFactory() for _ in range(3)]
        self.fees_before = self.fees()
        self.model = Model()
        self.serial = 0

    def fees(self) -> Decimal:
        return selectors.platform_balance(Account.Kind.FEES)

    def reference(self, kind: str) -> str:
        self.serial += 1
        return f"{kind}:{self.organizations[0].pk}:{self.serial}"

    def snapshot(self) -> tuple[Any, ...]:
        organizations = self.organizations
        return (
            Transaction.objects.filter(organization__in=organizations).count(),
            Entry.objects.filter(transaction__organization__in=organizations).count(),
            list(
                Hold.objects.filter(organization__in=organizations)
                .order_by("id")
                .values_list("id", "status", "amount", "placed", "captured", "released")
            ),
            [selectors.wallet_get(organization) for organization in organizations],
            self.fees(),
        )

    # --- Running one operation ---

    def run(self, operation: tuple[Any, ...]) -> None:
        kind, *arguments = operation
        before = self.snapshot()
        expected = getattr(self, kind)(*arguments)
        if expected is SKIPPED:
            event(f"{kind}: nothing to act on")
            return
        event(f"{kind}: {expected.__name__ if expected else 'done'}")
        if expected is not None:
            # The model refused: the service must refuse the same way and write nothing.
            assert self.snapshot() == before, f"{operation} was refused but wrote"

    def hold(self, index: int) -> HoldModel | None:
        return self.model.holds[index % len(self.model.holds)] if self.model.holds else None

    def credit(self, organization: int, amount: Decimal) -> None:
        services.wallet_credit(
            organization=self.organizations[organization],
            amount=amount,
            idempotency_reference=self.reference("credit"),
        )
        self.model.available[organization] += amount

    def place(self, organization: int, amount: Decimal) -> type[Exception] | None:
        model = self.model
        if amount > model.available[organization]:
            with pytest.raises(InsufficientFunds):
                services.hold_place(
                    organization=self.organizations[organization],
                    amount=amount,
                    reference_kind=ReferenceKind.BID,
                )
            return InsufficientFunds
        hold = services.hold_place(
            organization=self.organizations[organization],
            amount=amount,
            reference_kind=ReferenceKind.BID,
        )
        model.available[organization] -= amount
        model.held[organization] += amount
        model.holds.append(HoldModel(hold.pk, organization, amount, amount))
        return None

    def resize(self, index: int, target: Decimal) -> type[Exception] | None:
        hold = self.hold(index)
        if hold is None:
            return SKIPPED
        model = self.model
        change = target - hold.amount
        expected: type[Exception] | None = None
        if not hold.open:
            expected = HoldNotOpen
        elif change > model.available[hold.organization]:
            expected = InsufficientFunds
        if expected is not None:
            with pytest.raises(expected):
                services.hold_resize(hold=Hold(pk=hold.pk), amount=target)
            return expected
        services.hold_resize(hold=Hold(pk=hold.pk), amount=target)
        model.available[hold.organization] -= change
        model.held[hold.organization] += change
        if change > 0:
            hold.placed += change
        else:
            hold.released -= change
        hold.amount = target
        return None

    def capture(self, index: int, amount: Decimal | Share, payee: int) -> type[Exception] | None:
        hold = self.hold(index)
        if hold is None:
            return SKIPPED
        if isinstance(amount, Share):
            amount = amount.of(hold.amount)
        reference = self.reference("capture")
        expected: type[Exception] | None = None
        if not hold.open:
            expected = HoldNotOpen
        elif amount > hold.amount:
            expected = HoldTooSmall
        call = {
            "hold": Hold(pk=hold.pk),
            "amount": amount,
            "payee": self.organizations[payee],
            "idempotency_reference": reference,
        }
        if expected is not None:
            with pytest.raises(expected):
                services.hold_capture(**call)
            return expected
        posted = services.hold_capture(**call)
        fee = fee_of(amount)
        hold.amount -= amount
        hold.captured += amount
        self.model.held[hold.organization] -= amount
        self.model.earnings[payee] += amount - fee
        self.model.fees += fee
        self.model.captures.append((reference, hold, amount, payee, posted.pk))
        return None

    def release(self, index: int, amount: Decimal | Share | None) -> type[Exception] | None:
        hold = self.hold(index)
        if hold is None:
            return SKIPPED
        if isinstance(amount, Share):
            amount = amount.of(hold.amount)
        expected: type[Exception] | None = None
        if not hold.open:
            if amount is None:
                before = self.snapshot()
                services.hold_release(hold=Hold(pk=hold.pk))
                assert self.snapshot() == before, "releasing a closed hold again wrote"
                return None
            expected = HoldNotOpen
        elif amount is not None and amount > hold.amount:
            expected = HoldTooSmall
        if expected is not None:
            with pytest.raises(expected):
                services.hold_release(hold=Hold(pk=hold.pk), amount=amount)
            return expected
        services.hold_release(hold=Hold(pk=hold.pk), amount=amount)
        release = hold.amount if amount is None else amount
        hold.amount -= release
        hold.released += release
        hold.open = amount is not None
        self.model.held[hold.organization] -= release
        self.model.available[hold.organization] += release
        return None

    def replay(self, index: int) -> type[Exception] | None:
        """The same capture again (a retried job accounting run): the first charge is
        returned and nothing is written, whatever happened to the hold since."""
        if not self.model.captures:
            return SKIPPED
        reference, hold, amount, payee, posted = self.model.captures[
            index % len(self.model.captures)
        ]
        before = self.snapshot()
        replay = services.hold_capture(
            hold=Hold(pk=hold.pk),
            amount=amount,
            payee=self.organizations[payee],
            idempotency_reference=reference,
        )
        assert replay.pk == posted
        assert self.snapshot() == before, "a replayed capture wrote"
        return None

    # --- The invariants ---

    def check(self) -> None:
        organizations = self.organizations
        model = self.model
        transactions = Transaction.objects.filter(organization__in=organizations).annotate(
            total=Coalesce(Sum("entries__amount"), ZERO), lines=Count("entries")
        )
        assert not transactions.filter(~Q(total=0) | Q(lines__lt=2)).exists()

        holds = {hold.pk: hold for hold in Hold.objects.filter(organization__in=organizations)}
        assert set(holds) == {hold.pk for hold in model.holds}
        for expected in model.holds:
            hold = holds[expected.pk]
            assert (hold.amount, hold.placed, hold.captured, hold.released, hold.is_open) == (
                expected.amount,
                expected.placed,
                expected.captured,
                expected.released,
                expected.open,
            )
            assert hold.placed == hold.amount + hold.captured + hold.released
            assert hold.is_open or hold.amount == 0

        wallets = [selectors.wallet_get(organization) for organization in organizations]
        for index, (organization, wallet) in enumerate(zip(organizations, wallets, strict=True)):
            assert wallet.available >= 0
            assert (wallet.available, wallet.held, wallet.earnings) == (
                model.available[index],
                model.held[index],
                model.earnings[index],
            )
            open_holds = sum(
                (
                    h.amount
                    for h in holds.values()
                    if h.organization_id == organization.pk and h.is_open
                ),
                ZERO,
            )
            assert wallet.held == open_holds

        fees = self.fees() - self.fees_before
        assert fees == model.fees
        captured = sum((hold.captured for hold in holds.values()), ZERO)
        earned = sum((wallet.earnings for wallet in wallets), ZERO)
        assert earned + fees == captured
        assert selectors.ledger_verify() == []


class _RollBack(Exception):
    pass


@settings(
    max_examples=40,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    credits=st.tuples(*[st.decimals(min_value=D(10), max_value=D(150), places=6)] * 2),
    holds=st.tuples(*[st.decimals(min_value=MICRO, max_value=D(20), places=6)] * 2),
    steps=st.lists(operations, min_size=5, max_size=30),
)
def test_random_sequences_of_money_movements_keep_the_ledger_sound(credits, holds, steps):
    assert D(django_settings.PLATFORM_FEE_PERCENT) == 10
    try:
        with transaction.atomic():
            world = World()
            first = [
                ("credit", payer, amount) for payer, amount in zip(PAYERS, credits, strict=True)
            ]
            first += [("place", payer, amount) for payer, amount in zip(PAYERS, holds, strict=True)]
            for step in [*first, *steps]:
                world.run(step)
                world.check()
            raise _RollBack
    except _RollBack:
        pass
