"""The ledger by example: credits, holds and their resizing, captures with the platform's fee,
releases, replays, refusals (which write nothing), append-only entries, the ledger's own check
and the budget's alerts. Every amount is exact."""

from dataclasses import dataclass
from decimal import Decimal

import pytest
from django.db import InternalError, transaction

from billing import selectors, services
from billing.errors import (
    BudgetExceeded,
    HoldNotOpen,
    HoldTooSmall,
    InsufficientFunds,
)
from billing.models import (
    Account,
    BudgetAlert,
    Entry,
    Hold,
    ReferenceKind,
    Transaction,
)
from billing.selectors import Wallet
from billing.tasks import budget_alert_notify_task
from computeshare.errors import ValidationFailed
from organizations.models import Membership
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db

D = Decimal


# --- Helpers -----------------------------------------------------------------------------------


def platform_balance(kind: str) -> Decimal:
    return selectors.platform_balance(kind)


def fees() -> Decimal:
    return platform_balance(Account.Kind.FEES)


@dataclass(frozen=True)
class Snapshot:
    """Everything a refused call must leave as it was."""

    transactions: int
    entries: int
    holds: list[tuple[object, ...]]
    wallets: tuple[Wallet, ...]
    platform: tuple[Decimal, ...]
    alerts: int


def snapshot(*organizations: object) -> Snapshot:
    return Snapshot(
        transactions=Transaction.objects.count(),
        entries=Entry.objects.count(),
        holds=list(
            Hold.objects.order_by("id").values_list(
                "id", "status", "amount", "placed", "captured", "released"
            )
        ),
        wallets=tuple(selectors.wallet_get(organization) for organization in organizations),
        platform=tuple(platform_balance(kind) for kind in Account.PLATFORM_KINDS),
        alerts=BudgetAlert.objects.count(),
    )


def place(organization: object, amount: str, **kwargs: object) -> Hold:
    return services.hold_place(
        organization=organization, amount=D(amount), reference_kind=ReferenceKind.BID, **kwargs
    )


def credit(organization: object, amount: str, reference: str | None = None) -> Transaction:
    return services.wallet_credit(
        organization=organization,
        amount=D(amount),
        idempotency_reference=reference or f"top-up:{organization.pk}:{amount}",
    )


def wallet(organization: object) -> tuple[Decimal, Decimal, Decimal]:
    current = selectors.wallet_get(organization)
    return current.available, current.held, current.earnings


@pytest.fixture(autouse=True)
def sound_ledger():
    """Whatever a test does, the ledger it leaves behind is sound."""
    yield
    assert selectors.ledger_verify() == []


@pytest.fixture
def team():
    return OrganizationFactory(name="Quantum Lab")


@pytest.fixture
def owner():
    return OrganizationFactory(name="Aurora Cluster Owners")


# --- Credits -----------------------------------------------------------------------------------


def test_a_credit_makes_money_available_from_the_stripe_clearing_account(team):
    posted = credit(team, "100", reference="pi_1")

    assert wallet(team) == (D("100"), D(0), D(0))
    assert platform_balance(Account.Kind.STRIPE_CLEARING) == D("-100")
    assert posted.kind == Transaction.Kind.TOP_UP
    assert posted.idempotency_reference == "pi_1"
    entries = sorted(
        (entry.account.kind, entry.kind, entry.amount, entry.balance_after)
        for entry in posted.entries.select_related("account")
    )
    assert entries == [
        ("available", "top_up", D("100"), D("100")),
        ("stripe_clearing", "top_up", D("-100"), D("-100")),
    ]


def test_a_replayed_credit_posts_once(team):
    first = credit(team, "100", reference="pi_1")
    before = snapshot(team)

    replay = credit(team, "100", reference="pi_1")

    assert replay.pk == first.pk
    assert snapshot(team) == before
    assert wallet(team) == (D("100"), D(0), D(0))
    assert Transaction.objects.filter(idempotency_reference="pi_1").count() == 1


# --- Holds -------------------------------------------------------------------------------------


def test_a_hold_moves_money_from_available_to_held(team):
    credit(team, "100")

    hold = place(team, "30")

    assert wallet(team) == (D("70"), D("30"), D(0))
    hold.refresh_from_db()
    assert (hold.status, hold.amount, hold.placed, hold.captured, hold.released) == (
        Hold.Status.OPEN,
        D("30"),
        D("30"),
        D(0),
        D(0),
    )
    posted = Transaction.objects.get(hold=hold)
    assert posted.kind == Transaction.Kind.HOLD
    assert sorted(posted.entries.values_list("amount", flat=True)) == [D("-30"), D("30")]


def test_a_replayed_hold_is_placed_once(team):
    credit(team, "100")
    first = place(team, "30", idempotency_reference="bid:1")
    before = snapshot(team)

    replay = place(team, "30", idempotency_reference="bid:1")

    assert replay.pk == first.pk
    assert snapshot(team) == before
    assert wallet(team) == (D("70"), D("30"), D(0))
    assert Hold.objects.filter(organization=team).count() == 1


def test_resizing_a_hold_up_takes_from_available_and_down_releases(team):
    credit(team, "100")
    hold = place(team, "30")

    hold = services.hold_resize(hold=hold, amount=D("45.5"))

    assert wallet(team) == (D("54.5"), D("45.5"), D(0))
    assert (hold.amount, hold.placed, hold.released) == (D("45.5"), D("45.5"), D(0))

    hold = services.hold_resize(hold=hold, amount=D("20"))

    assert wallet(team) == (D("80"), D("20"), D(0))
    hold.refresh_from_db()
    assert (hold.status, hold.amount, hold.placed, hold.released) == (
        Hold.Status.OPEN,
        D("20"),
        D("45.5"),
        D("25.5"),
    )
    assert list(Transaction.objects.filter(hold=hold).order_by("id").values_list("kind")) == [
        ("hold",),
        ("hold",),
        ("release",),
    ]


def test_resizing_a_hold_to_what_it_holds_writes_nothing(team):
    credit(team, "100")
    hold = place(team, "30")
    before = snapshot(team)

    services.hold_resize(hold=hold, amount=D("30.000000"))

    assert snapshot(team) == before


@pytest.mark.parametrize(
    ("charge", "earned", "fee"),
    [
        ("12.5", "11.25", "1.25"),
        # 10 % of 0.000005 is 0.0000005: half a micro-unit rounds up to the platform.
        ("0.000005", "0.000004", "0.000001"),
        ("0.000015", "0.000013", "0.000002"),
        # 10 % of 0.000004 is below half a micro-unit: no fee, no fee entry.
        ("0.000004", "0.000004", "0"),
        ("33.333333", "30", "3.333333"),
    ],
)
def test_a_capture_pays_the_payee_the_charge_minus_the_fee_to_the_micro_unit(
    team, owner, charge, earned, fee
):
    credit(team, "100")
    hold = place(team, "50")

    posted = services.hold_capture(
        hold=hold,
        amount=D(charge),
        payee=owner,
        idempotency_reference="job:1",
        source_name="Aurora",
    )

    assert posted.kind == Transaction.Kind.CHARGE
    assert posted.source_name == "Aurora"
    assert wallet(team) == (D("50"), D("50") - D(charge), D(0))
    assert wallet(owner) == (D(0), D(0), D(earned))
    assert fees() == D(fee)
    assert D(earned) + D(fee) == D(charge)
    lines = sorted((entry.kind, entry.amount) for entry in posted.entries.all())
    expected = [("charge", -D(charge)), ("earning", D(earned))]
    if D(fee):
        expected.append(("fee", D(fee)))
    assert lines == sorted(expected)
    hold.refresh_from_db()
    assert (hold.status, hold.amount, hold.captured) == (
        Hold.Status.OPEN,
        D("50") - D(charge),
        D(charge),
    )


def test_a_replayed_capture_charges_once(team, owner):
    credit(team, "100")
    hold = place(team, "30")
    first = services.hold_capture(
        hold=hold, amount=D("12.5"), payee=owner, idempotency_reference="job:1"
    )
    before = snapshot(team, owner)

    replay = services.hold_capture(
        hold=hold, amount=D("12.5"), payee=owner, idempotency_reference="job:1"
    )

    assert replay.pk == first.pk
    assert snapshot(team, owner) == before
    assert wallet(owner) == (D(0), D(0), D("11.25"))
    assert fees() == D("1.25")


def test_a_capture_of_zero_writes_nothing(team, owner):
    credit(team, "100")
    hold = place(team, "30")
    before = snapshot(team, owner)

    assert (
        services.hold_capture(hold=hold, amount=D(0), payee=owner, idempotency_reference="job:0")
        is None
    )

    assert snapshot(team, owner) == before


def test_the_whole_life_of_a_hold(team, owner):
    """credit 100, hold 30, shrink to 20, charge 12.5, release the rest: the hold closes."""
    credit(team, "100")
    hold = place(team, "30")
    hold = services.hold_resize(hold=hold, amount=D("20"))
    services.hold_capture(hold=hold, amount=D("12.5"), payee=owner, idempotency_reference="job:1")

    hold = services.hold_release(hold=hold)

    assert wallet(team) == (D("87.5"), D(0), D(0))
    assert wallet(owner) == (D(0), D(0), D("11.25"))
    assert fees() == D("1.25")
    hold.refresh_from_db()
    assert (hold.status, hold.amount, hold.placed, hold.captured, hold.released) == (
        Hold.Status.CLOSED,
        D(0),
        D("30"),
        D("12.5"),
        D("17.5"),
    )
    assert hold.placed == hold.amount + hold.captured + hold.released
    assert list(Transaction.objects.filter(hold=hold).order_by("id").values_list("kind")) == [
        ("hold",),
        ("release",),
        ("charge",),
        ("release",),
    ]


def test_a_partial_release_keeps_the_hold_open(team):
    credit(team, "100")
    hold = place(team, "30")

    hold = services.hold_release(hold=hold, amount=D("30"))

    assert wallet(team) == (D("100"), D(0), D(0))
    hold.refresh_from_db()
    assert (hold.status, hold.amount, hold.released) == (Hold.Status.OPEN, D(0), D("30"))


def test_releasing_a_closed_hold_again_writes_nothing(team):
    credit(team, "100")
    hold = place(team, "30")
    services.hold_release(hold=hold)
    before = snapshot(team)

    again = services.hold_release(hold=hold)

    assert again.status == Hold.Status.CLOSED
    assert snapshot(team) == before


def test_closing_a_hold_that_holds_nothing_posts_nothing(team, owner):
    """The usual end of a hold: a job charged all of it, then the hold is released to close it.
    Nothing moves, so no transaction is posted; the hold is closed."""
    credit(team, "100")
    hold = place(team, "30")
    services.hold_capture(hold=hold, amount=D("30"), payee=owner, idempotency_reference="j")
    transactions = Transaction.objects.count()

    hold = services.hold_release(hold=hold)

    assert hold.status == Hold.Status.CLOSED
    assert Transaction.objects.count() == transactions
    assert not Transaction.objects.filter(entries__isnull=True).exists()


# --- Refusals write nothing --------------------------------------------------------------------


def test_a_hold_beyond_available_is_refused(team):
    credit(team, "10")
    before = snapshot(team)

    with pytest.raises(InsufficientFunds) as refused:
        place(team, "10.000001")

    assert (refused.value.status_code, refused.value.code) == (402, "insufficient_funds")
    assert refused.value.extra["available"] == "10.000000"
    assert snapshot(team) == before


def test_a_hold_of_everything_available_is_allowed(team):
    credit(team, "10")

    place(team, "10")

    assert wallet(team) == (D(0), D("10"), D(0))


def test_resizing_a_hold_beyond_available_is_refused(team):
    credit(team, "50")
    hold = place(team, "30")
    before = snapshot(team)

    with pytest.raises(InsufficientFunds):
        services.hold_resize(hold=hold, amount=D("50.000001"))

    assert snapshot(team) == before
    services.hold_resize(hold=hold, amount=D("50"))
    assert wallet(team) == (D(0), D("50"), D(0))


def test_a_capture_beyond_the_hold_is_refused(team, owner):
    credit(team, "100")
    hold = place(team, "30")
    before = snapshot(team, owner)

    with pytest.raises(HoldTooSmall) as refused:
        services.hold_capture(
            hold=hold, amount=D("30.000001"), payee=owner, idempotency_reference="job:1"
        )

    assert (refused.value.status_code, refused.value.code) == (409, "hold_too_small")
    assert snapshot(team, owner) == before
    assert not Transaction.objects.filter(idempotency_reference="job:1").exists()


def test_a_release_beyond_the_hold_is_refused(team):
    credit(team, "100")
    hold = place(team, "30")
    before = snapshot(team)

    with pytest.raises(HoldTooSmall):
        services.hold_release(hold=hold, amount=D("30.000001"))

    assert snapshot(team) == before


def test_a_closed_hold_cannot_be_captured_resized_or_partly_released(team, owner):
    credit(team, "100")
    hold = place(team, "30")
    services.hold_release(hold=hold)
    before = snapshot(team, owner)

    with pytest.raises(HoldNotOpen) as refused:
        services.hold_capture(hold=hold, amount=D("1"), payee=owner, idempotency_reference="j")
    assert (refused.value.status_code, refused.value.code) == (409, "hold_not_open")
    with pytest.raises(HoldNotOpen):
        services.hold_resize(hold=hold, amount=D("10"))
    with pytest.raises(HoldNotOpen):
        services.hold_release(hold=hold, amount=D("1"))

    assert snapshot(team, owner) == before


def test_the_budget_refuses_what_would_pass_the_limit_and_allows_reaching_it(team, owner):
    """Committed (held now) plus spent (charged this month) plus the new hold must not pass
    the monthly limit; reaching it exactly is allowed."""
    credit(team, "500")
    services.budget_set(organization=team, monthly_limit=D("100.00"), alert_thresholds=[])
    first = place(team, "60")
    services.hold_capture(hold=first, amount=D("40"), payee=owner, idempotency_reference="j1")
    # Held 20 + spent 40 = 60 used.
    before = snapshot(team, owner)

    with pytest.raises(BudgetExceeded) as refused:
        place(team, "40.000001")

    assert (refused.value.status_code, refused.value.code) == (402, "budget_exceeded")
    assert refused.value.extra["committed_and_spent"] == "60.000000"
    assert snapshot(team, owner) == before

    second = place(team, "40")

    assert wallet(team) == (D("400"), D("60"), D(0))
    assert selectors.budget_status(team).remaining == D(0)
    before = snapshot(team, owner)
    with pytest.raises(BudgetExceeded):
        services.hold_resize(hold=second, amount=D("40.000001"))
    assert snapshot(team, owner) == before
    # Shrinking is always allowed, and frees budget.
    services.hold_resize(hold=second, amount=D("30"))
    place(team, "10")
    assert wallet(team) == (D("400"), D("60"), D(0))


def test_a_budget_checks_funds_first(team):
    credit(team, "10")
    services.budget_set(organization=team, monthly_limit=D("5.00"), alert_thresholds=[])
    before = snapshot(team)

    with pytest.raises(InsufficientFunds):
        place(team, "20")

    assert snapshot(team) == before


# --- Validation --------------------------------------------------------------------------------

NOT_MONEY = ["0.0000001", "1.1234567", "NaN", "Infinity", "-Infinity"]


@pytest.mark.parametrize("amount", [*NOT_MONEY, "0", "-0", "-1", "-0.000001"])
def test_a_credit_of_anything_but_a_positive_six_place_amount_is_refused(team, amount):
    before = snapshot(team)

    with pytest.raises(ValidationFailed) as refused:
        services.wallet_credit(organization=team, amount=D(amount), idempotency_reference="x")

    assert refused.value.code == "invalid"
    assert "amount" in refused.value.extra["fields"]
    assert snapshot(team) == before


@pytest.mark.parametrize("amount", [*NOT_MONEY, "0", "-1", "-0.000001"])
def test_a_hold_of_anything_but_a_positive_six_place_amount_is_refused(team, amount):
    credit(team, "100")
    before = snapshot(team)

    with pytest.raises(ValidationFailed):
        place(team, amount)

    assert snapshot(team) == before


@pytest.mark.parametrize("amount", [*NOT_MONEY, "-1", "-0.000001"])
def test_a_resize_to_a_negative_or_seven_place_amount_is_refused(team, amount):
    credit(team, "100")
    hold = place(team, "30")
    before = snapshot(team)

    with pytest.raises(ValidationFailed):
        services.hold_resize(hold=hold, amount=D(amount))

    assert snapshot(team) == before


@pytest.mark.parametrize("amount", [*NOT_MONEY, "-1", "-0.000001"])
def test_a_capture_of_a_negative_or_seven_place_amount_is_refused(team, owner, amount):
    credit(team, "100")
    hold = place(team, "30")
    before = snapshot(team, owner)

    with pytest.raises(ValidationFailed):
        services.hold_capture(hold=hold, amount=D(amount), payee=owner, idempotency_reference="j")

    assert snapshot(team, owner) == before


@pytest.mark.parametrize("amount", ["0", "-1", "0.0000001"])
def test_a_partial_release_of_a_non_positive_or_seven_place_amount_is_refused(team, amount):
    credit(team, "100")
    hold = place(team, "30")
    before = snapshot(team)

    with pytest.raises(ValidationFailed):
        services.hold_release(hold=hold, amount=D(amount))

    assert snapshot(team) == before


@pytest.mark.parametrize("amount", ["100000000000000", "1E+30", "123456789012345678901234.5"])
def test_an_amount_too_large_for_the_ledger_is_refused_as_invalid(team, amount):
    before = snapshot(team)

    with pytest.raises(ValidationFailed), transaction.atomic():
        services.wallet_credit(organization=team, amount=D(amount), idempotency_reference="x")

    assert snapshot(team) == before


# --- Adjustments -------------------------------------------------------------------------------


def test_an_adjustment_moves_money_between_the_platform_and_available(team):
    staff = UserFactory(is_staff=True)
    credit(team, "10")

    given = services.wallet_adjust(
        organization=team, amount=D("2.5"), memo="  Goodwill   credit ", actor=staff
    )
    taken = services.wallet_adjust(
        organization=team, amount=D("-12.5"), memo="Refund reversed", actor=staff
    )

    assert wallet(team) == (D(0), D(0), D(0))
    assert platform_balance(Account.Kind.ADJUSTMENTS) == D("10")
    assert (given.kind, given.memo, given.created_by) == ("adjustment", "Goodwill credit", staff)
    assert taken.memo == "Refund reversed"


def test_an_adjustment_taking_more_than_available_is_refused(team):
    staff = UserFactory(is_staff=True)
    credit(team, "10")
    place(team, "4")
    before = snapshot(team)

    with pytest.raises(InsufficientFunds):
        services.wallet_adjust(
            organization=team, amount=D("-6.000001"), memo="Chargeback", actor=staff
        )

    assert snapshot(team) == before


@pytest.mark.parametrize(
    ("amount", "memo", "field"),
    [
        ("0", "Nothing", "amount"),
        ("1.0000001", "Too precise", "amount"),
        ("5", "", "memo"),
        ("5", "   \n ", "memo"),
        ("5", None, "memo"),
    ],
)
def test_an_adjustment_of_zero_or_without_a_memo_is_refused(team, amount, memo, field):
    staff = UserFactory(is_staff=True)
    credit(team, "10")
    before = snapshot(team)

    with pytest.raises(ValidationFailed) as refused:
        services.wallet_adjust(organization=team, amount=D(amount), memo=memo, actor=staff)

    assert list(refused.value.extra["fields"]) == [field]
    assert snapshot(team) == before


def test_a_replayed_adjustment_posts_once(team):
    staff = UserFactory(is_staff=True)
    first = services.wallet_adjust(
        organization=team, amount=D("3"), memo="Credit", actor=staff, idempotency_reference="adj"
    )
    before = snapshot(team)

    replay = services.wallet_adjust(
        organization=team, amount=D("3"), memo="Credit", actor=staff, idempotency_reference="adj"
    )

    assert replay.pk == first.pk
    assert snapshot(team) == before


# --- Entries are append-only -------------------------------------------------------------------


def test_an_entry_cannot_be_edited_or_deleted_through_the_model(team):
    credit(team, "100")
    entry = Entry.objects.filter(account__organization=team).get()

    entry.amount = D("1000")
    with pytest.raises(ValueError, match="never edited"):
        entry.save()
    with pytest.raises(ValueError, match="never deleted"):
        entry.delete()

    entry.refresh_from_db()
    assert entry.amount == D("100")
    assert wallet(team) == (D("100"), D(0), D(0))


def test_the_database_refuses_to_update_an_entry(team):
    credit(team, "100")
    entries = Entry.objects.filter(account__organization=team)

    with pytest.raises(InternalError, match="append-only"), transaction.atomic():
        entries.update(amount=D("1000"))

    assert list(entries.values_list("amount", "balance_after")) == [(D("100"), D("100"))]


def test_the_database_refuses_to_delete_an_entry(team):
    credit(team, "100")
    entries = Entry.objects.filter(account__organization=team)

    with pytest.raises(InternalError, match="append-only"), transaction.atomic():
        Entry.objects.filter(pk__in=list(entries.values_list("pk", flat=True))).delete()

    assert entries.count() == 1


# --- The ledger's own check --------------------------------------------------------------------


def test_the_check_finds_a_cached_balance_that_its_entries_do_not_explain(team, owner):
    credit(team, "100")
    hold = place(team, "30")
    services.hold_capture(hold=hold, amount=D("12.5"), payee=owner, idempotency_reference="j")
    assert selectors.ledger_verify() == []
    available = Account.objects.get(organization=team, kind=Account.Kind.AVAILABLE)

    Account.objects.filter(pk=available.pk).update(balance=D("1070"))

    assert selectors.ledger_verify() == [
        f"account {available} caches 1070.000000, its entries sum to 70.000000, "
        "its last entry left 70.000000"
    ]
    Account.objects.filter(pk=available.pk).update(balance=D("70"))
    assert selectors.ledger_verify() == []


# --- Budget alerts -----------------------------------------------------------------------------


@pytest.fixture
def eager_tasks():
    """Runs `.delay()` in the test's thread, so that the mail lands in `mailoutbox`."""
    conf = budget_alert_notify_task.app.conf
    before = conf.task_always_eager
    conf.task_always_eager = True
    yield
    conf.task_always_eager = before


def test_crossing_budget_thresholds_records_each_once_a_month_and_mails_the_admins(
    team, eager_tasks, django_capture_on_commit_callbacks, mailoutbox
):
    MembershipFactory(
        organization=team, role=Membership.Role.ADMIN, user__username="bob", user__email="b@x.org"
    )
    MembershipFactory(
        organization=team, role=Membership.Role.ADMIN, user__username="ann", user__email="a@x.org"
    )
    MembershipFactory(organization=team, role=Membership.Role.MEMBER, user__email="m@x.org")
    credit(team, "200")
    services.budget_set(
        organization=team, monthly_limit=D("100.00"), alert_thresholds=[50, 80, 100]
    )
    period = selectors.month_start().date()

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        place(team, "49.999999")
    assert (len(callbacks), len(mailoutbox), BudgetAlert.objects.count()) == (0, 0, 0)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        second = place(team, "5.000001")  # 55 committed

    assert len(callbacks) == 1
    alert = BudgetAlert.objects.get()
    assert (alert.organization, alert.period, alert.threshold) == (team, period, 50)
    assert (alert.monthly_limit, alert.committed_and_spent) == (D("100"), D("55"))
    assert alert.notified_at is not None
    assert len(mailoutbox) == 1
    mail = mailoutbox[0]
    assert mail.to == ["a@x.org", "b@x.org"]
    assert mail.subject == f"Quantum Lab has reached 50% of its budget for {period:%B %Y}"
    assert "Quantum Lab has committed and spent 55.00 USD this month, 50% or more" in mail.body

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        services.hold_resize(hold=second, amount=D("35.000001"))  # 85 committed

    assert len(callbacks) == 1
    assert list(BudgetAlert.objects.order_by("threshold").values_list("threshold", flat=True)) == [
        50,
        80,
    ]
    assert BudgetAlert.objects.get(threshold=80).committed_and_spent == D("85")
    assert len(mailoutbox) == 2
    assert mailoutbox[1].subject.startswith("Quantum Lab has reached 80% of its budget")

    # Down below both thresholds and up again in the same month: nothing new.
    services.hold_resize(hold=second, amount=D("0.000001"))
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        place(team, "35")  # 85 committed again

    assert len(callbacks) == 0
    assert BudgetAlert.objects.count() == 2
    assert len(mailoutbox) == 2


def test_a_refused_hold_records_no_alert(team, eager_tasks, django_capture_on_commit_callbacks):
    credit(team, "200")
    services.budget_set(organization=team, monthly_limit=D("100.00"), alert_thresholds=[50])
    before = snapshot(team)

    with (
        django_capture_on_commit_callbacks(execute=True) as callbacks,
        pytest.raises(BudgetExceeded),
    ):
        place(team, "100.01")

    assert callbacks == []
    assert snapshot(team) == before
