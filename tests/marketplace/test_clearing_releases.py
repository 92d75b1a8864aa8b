"""A clearing's losing bids are released after its commit (ADR 0025): in the clearing's
transaction their holds move to `releasing` and one `HoldReleaseBatch` lists them; a task on
the `money` queue releases them, once, however many tasks, sweeps and workers reach the batch;
a batch whose task was lost is released by the periodic sweep. Until then the bid shows its
hold as `releasing` and its money stays on the team's `held` balance. Real PostgreSQL, real
Celery worker."""

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from billing import selectors as billing_selectors
from billing.models import Account, Hold, HoldReleaseBatch, Transaction
from billing.services import hold_release_batch_apply
from billing.services.ledger import accounts_open
from billing.tasks import hold_release_batch_apply_task, hold_release_batches_due_task
from marketplace import services
from marketplace.models import Bid, Offer
from organizations.models import Membership, Organization
from tests.concurrency import run_together
from tests.conftest import client_for, wait_for
from tests.factories import MembershipFactory, PartitionFactory, funded_organization

D = Decimal
API = "/api/v1"
# The worked example of DESIGN.md: 100 units clear at 1.80; A, B win, C partly, D loses.
WORKED_EXAMPLE = [("A", 40, "2.50"), ("B", 30, "2.00"), ("C", 50, "1.80"), ("D", 20, "1.20")]


# The admin of each bidding team, by name (emptied before each test).
TEAMS: dict[str, Membership] = {}


@pytest.fixture(autouse=True)
def _teams_of_this_test() -> None:
    TEAMS.clear()


def admin_of(organization: Organization) -> Membership:
    return MembershipFactory(organization=organization, role=Membership.Role.ADMIN)


def auction_with_bids(bids: list[tuple[str, int, str]]) -> tuple[Offer, dict[str, Bid]]:
    """An offer of 100 units whose auction has closed, with `bids` placed through the service
    by teams with 500 each, named by the bids' names (a name twice: the same team bids twice,
    and its second bid is named with its position too, `D4`)."""
    partition = PartitionFactory()
    owner = admin_of(partition.cluster.organization)
    now = timezone.now()
    offer = services.offer_create(
        actor=owner,
        cluster=partition.cluster,
        partition=partition.name,
        resource="cpu",
        quantity=100,
        window_start=now + timedelta(hours=2),
        window_end=now + timedelta(days=30),
        reserve_price="1.00",
        auction_closes_at=now + timedelta(hours=1),
    )
    placed: dict[str, Bid] = {}
    for index, (name, quantity, price) in enumerate(bids):
        if name not in TEAMS:
            TEAMS[name] = admin_of(funded_organization("500", name=name))
        key = name if name not in placed else f"{name}{index}"
        placed[key] = services.bid_place(
            actor=TEAMS[name], offer=offer, quantity=quantity, price=price
        )
    Offer.objects.filter(pk=offer.pk).update(
        auction_closes_at=timezone.now() - timedelta(seconds=1)
    )
    return offer, placed


def wallet(bid: Bid) -> tuple[Decimal, Decimal]:
    found = billing_selectors.wallet_get(bid.organization)
    return found.available, found.held


def hold_row(bid: Bid) -> tuple[object, ...]:
    return Hold.objects.values_list("status", "placed", "amount", "captured", "released").get(
        pk=bid.hold_id
    )


def releases_of(offer: Offer) -> list[tuple[str, Decimal]]:
    """Each release transaction about the offer: the organization and what went back."""
    return sorted(
        Transaction.objects.filter(reference=offer.uuid, kind=Transaction.Kind.RELEASE)
        .filter(entries__account__kind=Account.Kind.AVAILABLE)
        .values_list("organization__name", "entries__amount")
    )


# --- In the clearing's transaction: releasing, still held ---------------------------------------


@pytest.mark.django_db
def test_the_clearing_leaves_the_losers_holds_releasing_and_their_money_held(
    django_capture_on_commit_callbacks,
):
    offer, bids = auction_with_bids(WORKED_EXAMPLE)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.auction_clear(offer_id=offer.pk)

    # Winners settled at once, as before; the loser's hold is releasing and still holds 24.
    assert [hold_row(bids[name]) for name in "ABCD"] == [
        ("open", D(100), D(72), D(0), D(28)),
        ("open", D(60), D(54), D(0), D(6)),
        ("open", D(90), D(54), D(0), D(36)),
        ("releasing", D(24), D(24), D(0), D(0)),
    ]
    assert [wallet(bids[name]) for name in "ABCD"] == [
        (D(428), D(72)),
        (D(446), D(54)),
        (D(446), D(54)),
        (D(476), D(24)),
    ]
    assert releases_of(offer) == [("A", D(28)), ("B", D(6)), ("C", D(36))]
    batch = HoldReleaseBatch.objects.get()
    assert (batch.hold_ids, batch.reference, batch.reference_kind) == (
        [bids["D"].hold_id],
        offer.uuid,
        "offer",
    )
    # The bid's outcome is known at once: lost.
    bids["D"].refresh_from_db()
    assert (bids["D"].status, bids["D"].quantity_won) == (Bid.Status.LOST, 0)
    # The task is sent after the commit (with the notices'); here the commit never comes.
    assert len(callbacks) >= 2
    assert billing_selectors.ledger_verify() == []


@pytest.mark.django_db
def test_a_released_batch_is_exact_to_the_micro_unit_and_applied_once():
    """Prices with six places: what each team gets back is its holds to the micro-unit, and
    applying the batch again (a duplicate task, the sweep, a retry) changes nothing."""
    offer, bids = auction_with_bids(
        [
            ("A", 60, "3.000001"),
            ("B", 40, "2.500001"),
            ("C", 7, "1.234567"),
            ("D", 3, "1.000003"),
            ("D", 9, "1.100007"),
        ]
    )
    services.auction_clear(offer_id=offer.pk)
    batch = HoldReleaseBatch.objects.get()
    assert hold_release_batch_apply_task(batch.pk) == 3
    assert hold_release_batch_apply_task(batch.pk) == 0
    assert hold_release_batches_due_task() == 0

    c, d_low, d_high = bids["C"], bids["D"], bids["D4"]
    assert [hold_row(each) for each in (c, d_low, d_high)] == [
        ("closed", D("8.641969"), D(0), D(0), D("8.641969")),
        ("closed", D("3.000009"), D(0), D(0), D("3.000009")),
        ("closed", D("9.900063"), D(0), D(0), D("9.900063")),
    ]
    assert [wallet(each) for each in (c, d_low)] == [(D(500), D(0)), (D(500), D(0))]
    # One release line per team for its losing bids; D's two bids in one.
    assert [row for row in releases_of(offer) if row[0] in "CD"] == [
        ("C", D("8.641969")),
        ("D", D("12.900072")),
    ]
    assert HoldReleaseBatch.objects.count() == 0
    assert billing_selectors.ledger_verify() == []


@pytest.mark.django_db
def test_a_team_that_won_and_lost_gets_its_winning_bid_s_change_now_and_its_loss_after():
    offer, bids = auction_with_bids(
        [("A", 50, "2.00"), ("A", 20, "1.20"), ("B", 50, "1.50"), ("C", 10, "1.50")]
    )
    a_high, a_low = bids["A"], bids["A1"]

    services.auction_clear(offer_id=offer.pk)

    assert releases_of(offer) == [("A", D(25))]
    assert wallet(a_high) == (D(401), D(99))  # 75 for the allocation, 24 releasing

    assert hold_release_batches_due_task() == 2

    assert releases_of(offer) == [("A", D(24)), ("A", D(25)), ("C", D(15))]
    assert wallet(a_high) == (D(425), D(75))
    assert hold_row(a_low) == ("closed", D(24), D(0), D(0), D(24))
    assert billing_selectors.ledger_verify() == []


# --- The API and the schema ----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_api_shows_a_lost_bid_s_hold_releasing_until_it_is_released():
    offer, bids = auction_with_bids(WORKED_EXAMPLE)
    loser, winner = bids["D"], bids["A"]
    client = client_for(TEAMS["D"].user)
    services.auction_clear(offer_id=offer.pk)

    before = client.get(f"{API}/bids/{loser.uuid}/").json()
    listed = client.get(f"{API}/bids/", {"offer": str(offer.uuid)}).json()["results"]
    hold_release_batches_due_task()
    after = client.get(f"{API}/bids/{loser.uuid}/").json()
    winning = client_for(TEAMS["A"].user).get(f"{API}/bids/{winner.uuid}/")

    assert (before["status"], before["held"], before["hold_status"]) == (
        "lost",
        "24.000000",
        "releasing",
    )
    assert [(bid["id"], bid["hold_status"]) for bid in listed] == [(str(loser.uuid), "releasing")]
    assert (after["status"], after["held"], after["hold_status"]) == ("lost", "0.000000", "closed")
    assert (winning.json()["held"], winning.json()["hold_status"]) == ("72.000000", "open")


@pytest.mark.django_db
def test_the_schema_names_the_releasing_hold_status(api_client):
    schema = api_client.get(f"{API}/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    bid = schema["components"]["schemas"]["Bid"]["properties"]
    assert "hold_status" in bid
    assert "held" in bid and "status" in bid  # the fields before it, unchanged
    reference = bid["hold_status"].get("$ref") or bid["hold_status"]["allOf"][0]["$ref"]
    enum = schema["components"]["schemas"][reference.rsplit("/", 1)[-1]]["enum"]
    assert enum == ["open", "releasing", "closed"]


# --- Crash after the commit, duplicates, two workers at once ----------------------------------


@pytest.mark.django_db
def test_a_release_whose_task_was_lost_is_applied_by_the_sweep(django_capture_on_commit_callbacks):
    """The process dies between the clearing's commit and the task's message: the batch is in
    the database, and beat's sweep (every HOLD_RELEASE_SWEEP_SECONDS) releases it."""
    offer, bids = auction_with_bids(WORKED_EXAMPLE)
    with django_capture_on_commit_callbacks(execute=False):  # the task is never sent
        services.auction_clear(offer_id=offer.pk)
    assert hold_row(bids["D"])[0] == "releasing"

    assert hold_release_batches_due_task() == 1

    assert hold_row(bids["D"]) == ("closed", D(24), D(0), D(0), D(24))
    assert wallet(bids["D"]) == (D(500), D(0))
    assert HoldReleaseBatch.objects.count() == 0
    assert hold_release_batches_due_task() == 0
    schedule = settings.CELERY_BEAT_SCHEDULE["hold-release-batches-due"]
    assert schedule["task"] == "billing.tasks.hold_release_batches_due_task"
    assert float(schedule["schedule"]) <= 5  # type: ignore[arg-type]
    assert billing_selectors.ledger_verify() == []


@pytest.fixture
def platform_accounts() -> None:
    """The platform's accounts, as migration 0002 leaves them (a transactional test's flush
    removes them)."""
    accounts_open([(None, kind) for kind in Account.PLATFORM_KINDS])


@pytest.mark.django_db(transaction=True)
def test_workers_applying_one_batch_at_once_release_it_once(platform_accounts):
    """Eight workers (threads, each with its own connection and transaction) take the same
    batch at once, and the sweep with them: one releases it, the others find it locked or
    gone."""
    offer, bids = auction_with_bids(
        [("A", 100, "3.00")] + [(name, 10, "1.50") for name in "BCDEFGH"]
    )
    clear_as_if_the_process_died_after_its_commit(offer)
    batch = HoldReleaseBatch.objects.get()

    outcomes = run_together(
        [lambda: hold_release_batch_apply(batch_id=batch.pk) for _ in range(8)]
        + [hold_release_batches_due_task]
    )

    assert sorted(outcomes) == [0] * 8 + [7], outcomes
    # A won all 100 units at 1.50 (the clearing's own release, 150); the seven losers, once.
    assert releases_of(offer) == [("A", D(150))] + [(name, D(15)) for name in "BCDEFGH"]
    assert [wallet(bids[name]) for name in "BCDEFGH"] == [(D(500), D(0))] * 7
    assert Hold.objects.filter(status="releasing").count() == 0
    assert billing_selectors.ledger_verify() == []


def clear_as_if_the_process_died_after_its_commit(offer: Offer) -> None:
    """The clearing, committed, without the messages its commit sends (the process died right
    after the commit): otherwise the session's Celery worker, when one runs, could release the
    batch before the test's own workers reach it."""
    with transaction.atomic():
        services.auction_clear(offer_id=offer.pk)
        transaction.get_connection().run_on_commit.clear()


@pytest.mark.django_db(transaction=True)
def test_a_committed_clearing_s_losers_are_released_by_the_money_worker_within_seconds(
    platform_accounts, celery_worker
):
    offer, bids = auction_with_bids(WORKED_EXAMPLE)

    services.auction_clear(offer_id=offer.pk)
    committed = time.monotonic()

    wait_for(lambda: hold_row(bids["D"])[0] == "closed", timeout=30, interval=0.05)
    took = time.monotonic() - committed
    assert took < 5, took
    assert wallet(bids["D"]) == (D(500), D(0))
    assert releases_of(offer) == [("A", D(28)), ("B", D(6)), ("C", D(36)), ("D", D(24))]
    assert HoldReleaseBatch.objects.count() == 0
    assert billing_selectors.ledger_verify() == []
