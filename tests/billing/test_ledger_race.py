"""The ledger under real concurrency on PostgreSQL: threads, each with its own connection and
transaction, started together. Row locks must serialize what competes for the same money, and
the fixed lock order must keep two organizations that pay each other out of deadlock."""

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from billing import selectors, services
from billing.errors import HoldTooSmall, InsufficientFunds
from billing.models import Account, Entry, Hold, ReferenceKind, Transaction
from billing.services.ledger import accounts_open, platform_shard
from tests.concurrency import kinds, run_together
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db(transaction=True)

D = Decimal


def fees() -> Decimal:
    return selectors.platform_balance(Account.Kind.FEES)


def place(organization: Any, amount: str) -> Hold:
    return services.hold_place(
        organization=organization, amount=D(amount), reference_kind=ReferenceKind.BID
    )


@pytest.fixture
def platform_accounts() -> None:
    """The platform's accounts, as migration 0002 leaves them (a transactional test's flush
    removes them)."""
    accounts_open([(None, kind) for kind in Account.PLATFORM_KINDS])


def opened_organization(**kwargs: Any) -> Any:
    """An organization as `organization_create` makes it: with its wallet's accounts."""
    organization = OrganizationFactory(**kwargs)
    services.wallet_open(organization)
    return organization


@pytest.mark.parametrize("wallet_opened", [True, False], ids=["opened", "lazy-accounts"])
def test_fifty_concurrent_holds_on_money_for_ten_place_exactly_ten(
    platform_accounts, wallet_opened
):
    team = opened_organization() if wallet_opened else OrganizationFactory()
    services.wallet_credit(organization=team, amount=D("7.25") * 10, idempotency_reference="pi")

    outcomes = run_together([lambda: place(team, "7.25")] * 50)

    assert kinds(outcomes) == {"Hold": 10, "InsufficientFunds": 40}, outcomes
    assert all(isinstance(outcome, Hold | InsufficientFunds) for outcome in outcomes), outcomes
    wallet = selectors.wallet_get(team)
    assert (wallet.available, wallet.held) == (D(0), D("72.50"))
    assert Hold.objects.filter(organization=team).count() == 10
    assert set(Hold.objects.values_list("amount", "placed", "status")) == {
        (D("7.25"), D("7.25"), Hold.Status.OPEN)
    }
    assert Transaction.objects.filter(organization=team, kind="hold").count() == 10
    assert selectors.ledger_verify() == []


def test_twenty_concurrent_captures_with_one_reference_charge_once(platform_accounts):
    team = opened_organization()
    owner = opened_organization()
    services.wallet_credit(organization=team, amount=D("100"), idempotency_reference="pi")
    hold = place(team, "50")

    outcomes = run_together(
        [
            lambda: services.hold_capture(
                hold=hold, amount=D("12.5"), payee=owner, idempotency_reference="job:1:run"
            )
        ]
        * 20
    )

    assert kinds(outcomes) == {"Transaction": 20}, outcomes
    charge = Transaction.objects.get(idempotency_reference="job:1:run")
    assert {outcome.pk for outcome in outcomes} == {charge.pk}
    assert Transaction.objects.filter(kind="charge").count() == 1
    hold.refresh_from_db()
    assert (hold.amount, hold.captured) == (D("37.5"), D("12.5"))
    assert selectors.wallet_get(team).held == D("37.5")
    assert selectors.wallet_get(owner).earnings == D("11.25")
    assert fees() == D("1.25")
    assert selectors.ledger_verify() == []


def test_concurrent_captures_of_one_hold_never_take_more_than_it_holds(platform_accounts):
    team = opened_organization()
    owner = opened_organization()
    services.wallet_credit(organization=team, amount=D("100"), idempotency_reference="pi")
    hold = place(team, "50")

    def capture(number: int) -> Callable[[], Any]:
        return lambda: services.hold_capture(
            hold=hold, amount=D("7.25"), payee=owner, idempotency_reference=f"job:{number}"
        )

    outcomes = run_together([capture(number) for number in range(20)])

    # 6 x 7.25 = 43.50 fits in 50; a seventh does not.
    assert kinds(outcomes) == {"Transaction": 6, "HoldTooSmall": 14}, outcomes
    assert all(isinstance(o, Transaction | HoldTooSmall) for o in outcomes), outcomes
    hold.refresh_from_db()
    assert (hold.amount, hold.captured) == (D("6.5"), D("43.5"))
    assert selectors.wallet_get(team).held == D("6.5")
    assert selectors.wallet_get(owner).earnings == D("39.15")
    assert fees() == D("4.35")
    assert selectors.ledger_verify() == []


ROUNDS = 15


def one_round(a: Any, b: Any, number: int) -> list[Callable[[], Any]]:
    """Places this round's holds, then returns the calls to make at once."""
    a1, a2, a3 = (place(a, "10") for _ in range(3))
    b1, b2, b3 = (place(b, "10") for _ in range(3))

    def capture(hold: Hold, amount: str, payee: Any, name: str) -> Callable[[], Any]:
        return lambda: services.hold_capture(
            hold=hold, amount=D(amount), payee=payee, idempotency_reference=f"{name}:{number}"
        )

    return [
        capture(a1, "3", b, "a->b"),
        capture(b1, "4.5", a, "b->a"),
        # Each side's hold also charged to itself: the same hold locked by two captures
        # whose account locks overlap the other direction's.
        capture(a1, "1", a, "a->a"),
        capture(b1, "1", b, "b->b"),
        lambda: services.hold_release(hold=a2),
        lambda: services.hold_release(hold=b2),
        lambda: services.hold_resize(hold=a3, amount=D("15")),
        lambda: services.hold_resize(hold=b3, amount=D("5")),
        lambda: place(a, "2"),
        lambda: place(b, "2"),
    ]


def test_two_organizations_paying_each_other_at_once_never_deadlock(platform_accounts):
    """Each round, at the same time: A's hold is charged to B and B's to A, and each side also
    releases, resizes and places holds. PostgreSQL would abort a deadlocked transaction with
    `OperationalError: deadlock detected`; every call must succeed instead."""
    a = opened_organization(name="Lab A")
    b = opened_organization(name="Lab B")
    services.wallet_credit(organization=a, amount=D("1000"), idempotency_reference="pi-a")
    services.wallet_credit(organization=b, amount=D("1000"), idempotency_reference="pi-b")

    for number in range(ROUNDS):
        outcomes = run_together(one_round(a, b, number))

        failures = [o for o in outcomes if isinstance(o, Exception)]
        assert failures == [], f"round {number}: {failures!r}"

    # Per round, A: 30 placed, 10 released, 5 more by resizing, 2 placed, 3 + 1 charged;
    # B: 30 placed, 10 released, 5 released by resizing, 2 placed, 4.5 + 1 charged.
    # A earns 4.5 and 1 less 10 %, B earns 3 and 1 less 10 %.
    wallet_a, wallet_b = selectors.wallet_get(a), selectors.wallet_get(b)
    assert (wallet_a.available, wallet_a.held, wallet_a.earnings) == (
        D("1000") - 27 * ROUNDS,
        23 * ROUNDS,
        D("4.95") * ROUNDS,
    )
    assert (wallet_b.available, wallet_b.held, wallet_b.earnings) == (
        D("1000") - 17 * ROUNDS,
        D("11.5") * ROUNDS,
        D("3.6") * ROUNDS,
    )
    assert fees() == D("0.95") * ROUNDS
    for organization, wallet in ((a, wallet_a), (b, wallet_b)):
        open_holds = Hold.objects.filter(organization=organization, status=Hold.Status.OPEN)
        assert sum(hold.amount for hold in open_holds) == wallet.held
    assert selectors.ledger_verify() == []


def test_charges_of_many_teams_at_once_spread_the_fees_over_shards_and_sum_exactly(
    platform_accounts,
):
    """ADR 10: no row is locked by every charge. Twelve teams (and a thirteenth sharing a
    shard with the first) are charged at once, twice each, to one owner: each team's fee lands
    on its own shard of the platform's fees account, the shards sum to every fee exactly, and
    each shard's cached balance agrees with its entries."""
    owner = opened_organization()
    teams = [opened_organization() for _ in range(12)]
    same_shard = OrganizationFactory()
    while platform_shard(same_shard.pk) != platform_shard(teams[0].pk):
        same_shard = OrganizationFactory()
    services.wallet_open(same_shard)
    teams.append(same_shard)
    holds = []
    for team in teams:
        services.wallet_credit(
            organization=team, amount=D("100"), idempotency_reference=f"pi{team.pk}"
        )
        holds.append(place(team, "50"))

    def capture(hold: Hold, number: int) -> Callable[[], Any]:
        return lambda: services.hold_capture(
            hold=hold,
            amount=D("7.654321"),
            payee=owner,
            idempotency_reference=f"job:{hold.pk}:{number}",
        )

    outcomes = run_together([capture(hold, number) for hold in holds for number in range(2)])

    assert kinds(outcomes) == {"Transaction": 26}, outcomes
    fee = services.platform_fee(D("7.654321"))
    assert fee == D("0.765432")
    assert fees() == fee * 26
    assert selectors.wallet_get(owner).earnings == (D("7.654321") - fee) * 26
    fee_rows = Entry.objects.filter(kind=Entry.Kind.FEE).values_list(
        "transaction__organization_id", "account__organization_id", "account__shard"
    )
    assert {(payer, shard) for payer, _, shard in fee_rows} == {
        (team.pk, platform_shard(team.pk)) for team in teams
    }
    assert {platform_account for _, platform_account, _ in fee_rows} == {None}
    # Teams of different shards share no fee row; only a team of the same shard shares one.
    assert len({shard for _, _, shard in fee_rows}) == len({platform_shard(t.pk) for t in teams})
    assert selectors.ledger_verify() == []
