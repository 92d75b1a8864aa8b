"""Each kind of notification is made where its event happens (the apps' services), once per event
and user, to the right people, and as each user's preference says."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from billing import services as billing
from billing.models import ReferenceKind
from marketplace import notices as market_notices
from marketplace import services as market
from marketplace.models import Offer
from notifications.models import NoticeBatch, Notification, NotificationPreference
from notifications.services import notifications_record_after_commit_from
from notifications.tasks import notice_batch_record_task, notice_batches_due_task
from organizations import services as organization_services
from organizations.models import Membership
from scheduler_bridge.models import Job, JobState
from scheduler_bridge.services.submission import job_state_record
from tests.billing.test_webhook import deliver, payment_event
from tests.factories import (
    MembershipFactory,
    OrganizationFactory,
    PartitionFactory,
    UserFactory,
    allocation_bought,
    funded_organization,
)

pytestmark = pytest.mark.django_db


def told(kind: str) -> list[tuple[str, str]]:
    """(username, key) of every notification of `kind`, sorted."""
    return sorted(Notification.objects.filter(kind=kind).values_list("user__username", "key"))


def admin(organization, username: str) -> Membership:
    return MembershipFactory(
        organization=organization,
        role=Membership.Role.ADMIN,
        user=UserFactory(username=username, email=f"{username}@example.org"),
    )


def member(organization, username: str) -> Membership:
    return MembershipFactory(
        organization=organization,
        role=Membership.Role.MEMBER,
        user=UserFactory(username=username, email=f"{username}@example.org"),
    )


def auction_of(partition, owner: Membership, *, quantity: int) -> Offer:
    """An auction of `quantity` units at a reserve of 1.00, closing in an hour."""
    now = timezone.now()
    return market.offer_create(
        actor=owner,
        cluster=partition.cluster,
        partition=partition.name,
        resource="cpu",
        quantity=quantity,
        window_start=now + timedelta(hours=2),
        window_end=now + timedelta(days=30),
        reserve_price="1.00",
        buy_now_price=None,
        auction_closes_at=now + timedelta(hours=1),
    )


def clear_and_tell(offer_id: int, capture) -> None:
    """Clears the auction, then does what a worker does with the task its commit hands over:
    records the auction's notices (their mails stay pending, for their own task)."""
    with capture() as callbacks:
        market.auction_clear(offer_id=offer_id)
    batches = list(NoticeBatch.objects.values_list("pk", flat=True))
    assert len(callbacks) >= len(batches)
    for batch_id in batches:
        notice_batch_record_task(batch_id)


def test_an_auction_tells_the_winner_the_loser_and_the_owner_once_each(
    django_capture_on_commit_callbacks,
):
    partition = PartitionFactory()
    owner = admin(partition.cluster.organization, "olivia")
    member(partition.cluster.organization, "oscar")  # the owner's member: not told
    now = timezone.now()
    offer = auction_of(partition, owner, quantity=100)
    winner = admin(funded_organization("500", name="Nimbus"), "tom")
    member(winner.organization, "mia")  # a member of the winner: bids are the admins' business
    loser = admin(funded_organization("500", name="Helix"), "hana")
    won = market.bid_place(actor=winner, offer=offer, quantity=100, price="2.00")
    lost = market.bid_place(actor=loser, offer=offer, quantity=50, price="1.50")
    Offer.objects.filter(pk=offer.pk).update(auction_closes_at=now - timedelta(seconds=1))

    clear_and_tell(offer.pk, django_capture_on_commit_callbacks)
    # Again: nothing more happens, nobody is told again.
    clear_and_tell(offer.pk, django_capture_on_commit_callbacks)

    # One notice per organization and auction (its key names both), not per bid.
    winners = f"auction_won:offer:{offer.uuid}:organization:{won.organization_id}"
    losers = f"bid_outbid:offer:{offer.uuid}:organization:{lost.organization_id}"
    assert told("auction_won") == [("tom", winners)]
    assert told("bid_outbid") == [("hana", losers)]
    assert told("auction_cleared") == [("olivia", f"auction_cleared:offer:{offer.uuid}")]
    outbid = Notification.objects.get(kind="bid_outbid")
    assert outbid.title == f"Your bid on {partition.cluster.name} lost"
    # Uniform price: the highest bid left out sets it.
    assert "you bid 1.50 USD for 50 units; the auction cleared at 1.50 USD" in outbid.body
    assert outbid.link == f"/offers/{offer.uuid}/"
    assert outbid.email_state == Notification.EmailState.PENDING
    assert NoticeBatch.objects.count() == 0


def test_an_auctions_notices_are_read_after_its_commit_and_a_withdrawn_bid_is_not_told(
    django_capture_on_commit_callbacks,
):
    """The clearing's transaction writes one row naming the offer; the notices are read from
    the settled bids once it has committed, so a team whose only bid was withdrawn before the
    clearing hears nothing of it."""
    partition = PartitionFactory()
    owner = admin(partition.cluster.organization, "olga")
    now = timezone.now()
    offer = auction_of(partition, owner, quantity=10)
    winner = admin(funded_organization("500", name="Kestrel"), "kai")
    gone = admin(funded_organization("500", name="Wren"), "wes")
    market.bid_place(actor=winner, offer=offer, quantity=10, price="3.00")
    withdrawn = market.bid_place(actor=gone, offer=offer, quantity=5, price="4.00")
    market.bid_withdraw(actor=gone, bid=withdrawn)
    Offer.objects.filter(pk=offer.pk).update(auction_closes_at=now - timedelta(seconds=1))

    with django_capture_on_commit_callbacks():
        market.auction_clear(offer_id=offer.pk)
    batch = NoticeBatch.objects.get()
    assert (batch.events, batch.source, batch.arguments) == (
        [],
        "marketplace.notices.auction_cleared_events",
        {"offer": offer.pk},
    )
    notice_batch_record_task(batch.pk)

    assert told("auction_won") == [
        ("kai", f"auction_won:offer:{offer.uuid}:organization:{winner.organization_id}")
    ]
    assert told("bid_outbid") == []
    [cleared] = Notification.objects.filter(kind="auction_cleared")
    assert "10 of 10 units sold at 1.00 USD per unit, from 1 bids." in cleared.body


def test_a_notice_source_not_named_in_the_settings_is_refused_and_writes_nothing():
    with pytest.raises(ValueError, match="NOTICE_SOURCES"):
        notifications_record_after_commit_from("os.system", command="true")
    assert NoticeBatch.objects.count() == 0


def test_a_team_with_many_bids_is_told_once_with_what_it_won_over_all_of_them(
    django_capture_on_commit_callbacks,
):
    partition = PartitionFactory()
    owner = admin(partition.cluster.organization, "olivia")
    now = timezone.now()
    offer = auction_of(partition, owner, quantity=10)
    busy = admin(funded_organization("500", name="Nimbus"), "tom")
    loser = admin(funded_organization("500", name="Helix"), "hana")
    for price in ("3.00", "2.50", "2.00"):  # 8 of its 12 units win
        market.bid_place(actor=busy, offer=offer, quantity=4, price=price)
    market.bid_place(actor=loser, offer=offer, quantity=5, price="1.20")
    market.bid_place(actor=loser, offer=offer, quantity=5, price="1.10")
    Offer.objects.filter(pk=offer.pk).update(auction_closes_at=now - timedelta(seconds=1))

    clear_and_tell(offer.pk, django_capture_on_commit_callbacks)

    won = Notification.objects.get(kind="auction_won")
    assert (won.user.username, won.title) == (
        "tom",
        f"You won 10 of the 12 units you bid for on {partition.cluster.name} over 3 bids",
    )
    assert "clearing price 2.00 USD per unit (you bid 2.00 USD to 3.00 USD)" in won.body
    assert "3 of your 3 bids won units." in won.body
    lost = Notification.objects.get(kind="bid_outbid")
    assert (lost.user.username, lost.title) == (
        "hana",
        f"Your 2 bids on {partition.cluster.name} lost",
    )
    assert "you bid 1.10 USD to 1.20 USD for 10 units over 2 bids" in lost.body
    assert Notification.objects.count() == 3  # and the owner's


def test_an_auction_s_notices_wait_for_its_commit_and_the_sweep_records_a_lost_task(
    django_capture_on_commit_callbacks,
):
    """The clearing writes one batch of events; a batch whose task never ran (the broker lost
    it, the worker died) is recorded by the sweep, once however often it runs."""
    partition = PartitionFactory()
    owner = admin(partition.cluster.organization, "olivia")
    now = timezone.now()
    offer = auction_of(partition, owner, quantity=10)
    winner = admin(funded_organization("500", name="Nimbus"), "tom")
    market.bid_place(actor=winner, offer=offer, quantity=10, price="2.00")
    Offer.objects.filter(pk=offer.pk).update(auction_closes_at=now - timedelta(seconds=1))

    with django_capture_on_commit_callbacks(execute=False) as callbacks:  # the task is lost
        market.auction_clear(offer_id=offer.pk)

    assert len(callbacks) >= 1
    assert Notification.objects.count() == 0
    batch = NoticeBatch.objects.get()
    assert notice_batches_due_task() == 0  # not yet due: its task may still be on its way
    NoticeBatch.objects.filter(pk=batch.pk).update(created_at=now - timedelta(minutes=2))

    assert notice_batches_due_task() == 2  # the winner's admin and the owner's
    assert notice_batches_due_task() == 0
    assert notice_batch_record_task(batch.pk) == 0
    assert told("auction_won") == [
        ("tom", f"auction_won:offer:{offer.uuid}:organization:{winner.organization_id}")
    ]
    assert told("auction_cleared") == [("olivia", f"auction_cleared:offer:{offer.uuid}")]
    assert NoticeBatch.objects.count() == 0


def test_a_loser_who_turned_both_off_is_not_told_and_one_who_wants_no_mail_is_not_mailed(
    django_capture_on_commit_callbacks,
):
    partition = PartitionFactory()
    owner = admin(partition.cluster.organization, "olivia")
    now = timezone.now()
    offer = auction_of(partition, owner, quantity=10)
    winner = admin(funded_organization("500", name="Nimbus"), "tom")
    loser = admin(funded_organization("500", name="Helix"), "hana")
    quiet = admin(loser.organization, "quentin")
    NotificationPreference.objects.create(
        user=loser.user, kind="bid_outbid", in_site=False, by_email=False
    )
    NotificationPreference.objects.create(user=quiet.user, kind="bid_outbid", by_email=False)
    market.bid_place(actor=winner, offer=offer, quantity=10, price="2.00")
    market.bid_place(actor=loser, offer=offer, quantity=10, price="1.50")
    Offer.objects.filter(pk=offer.pk).update(auction_closes_at=now - timedelta(seconds=1))

    clear_and_tell(offer.pk, django_capture_on_commit_callbacks)

    rows = list(
        Notification.objects.filter(kind="bid_outbid").values_list(
            "user__username", "is_shown", "email_state"
        )
    )
    assert rows == [("quentin", True, "none")]


def test_an_ended_job_tells_the_one_who_submitted_it_with_its_state_and_cost():
    allocation = allocation_bought()
    submitter = member(allocation.organization, "mia")
    job = Job.objects.create(
        allocation=allocation,
        organization=allocation.organization,
        cluster=allocation.cluster,
        submitted_by=submitter.user,
        name="render",
        script="#!/bin/bash\ntrue\n",
        time_limit_minutes=10,
        partition_name=allocation.partition.name,
        reserved_units=Decimal(1),
        state=JobState.QUEUED,
    )

    job_state_record(job, JobState.CANCELLED, "Cancelled by mia")
    job_state_record(job, JobState.CANCELLED, "Cancelled by mia")  # no change: no second notice
    market_notices_again = Notification.objects.filter(kind="job_ended").count()

    assert told("job_ended") == [("mia", f"job_ended:job:{job.uuid}")]
    assert market_notices_again == 1
    notice = Notification.objects.get(kind="job_ended")
    assert notice.title == "Job render cancelled"
    assert notice.body.startswith("State cancelled; cost so far 0.00 USD")
    assert notice.link == f"/jobs/{job.uuid}/"


@pytest.mark.parametrize(
    ("state", "reason", "exit_code", "title", "body"),
    [
        (
            JobState.FAILED,
            "NonZeroExitCode",
            3,
            "Job render failed",
            "State failed: exited with code 3; cost so far 0.00 USD "
            "(runs still being accounted add to it).",
        ),
        (
            JobState.TIMEOUT,
            "TimeLimit",
            0,
            "Job render timed out",
            "State timed out, exit code 0; cost so far 0.00 USD "
            "(runs still being accounted add to it).\nReached its time limit",
        ),
    ],
)
def test_an_ended_jobs_notice_says_slurms_reason_in_words(state, reason, exit_code, title, body):
    """Issue 30: the notice said "NonZeroExitCode"."""
    allocation = allocation_bought()
    submitter = member(allocation.organization, "mia")
    job = Job.objects.create(
        allocation=allocation,
        organization=allocation.organization,
        cluster=allocation.cluster,
        submitted_by=submitter.user,
        name="render",
        script="#!/bin/bash\nexit 3\n",
        time_limit_minutes=10,
        partition_name=allocation.partition.name,
        reserved_units=Decimal(1),
        state=JobState.RUNNING,
        exit_code=exit_code,
    )

    job_state_record(job, state, reason)

    notice = Notification.objects.get(kind="job_ended")
    assert (notice.title, notice.body) == (title, body)


def test_an_allocation_tells_every_member_when_it_starts_and_when_it_ends_soon_once(settings):
    settings.WEBHOOK_ALLOCATION_ENDING_LEAD_SECONDS = 3 * 3600
    organization = funded_organization("0", name="Nimbus")
    admin(organization, "tom")
    member(organization, "mia")
    allocation = allocation_bought(organization, window_end=timedelta(hours=2))

    market_notices.allocation_notices_due()
    market_notices.allocation_notices_due()  # the next minute's run: nobody is told twice

    assert told("allocation_starting") == [
        ("mia", f"allocation_starting:allocation:{allocation.uuid}"),
        ("tom", f"allocation_starting:allocation:{allocation.uuid}"),
    ]
    assert told("allocation_ending") == [
        ("mia", f"allocation_ending:allocation:{allocation.uuid}"),
        ("tom", f"allocation_ending:allocation:{allocation.uuid}"),
    ]


def test_a_top_up_tells_the_admins_once_however_often_stripe_repeats_it(client: Client):
    from billing.models import TopUp

    organization = OrganizationFactory(name="Nimbus")
    tom = admin(organization, "tom")
    member(organization, "mia")
    billing.wallet_open(organization)
    succeeded = TopUp.objects.create(
        organization=organization,
        created_by=tom.user,
        amount=Decimal("40.00"),
        currency="USD",
        payment_intent="pi_notify_ok",
        client_secret="secret",
    )
    failed = TopUp.objects.create(
        organization=organization,
        created_by=tom.user,
        amount=Decimal("25.00"),
        currency="USD",
        payment_intent="pi_notify_declined",
        client_secret="secret",
    )

    for _ in range(3):
        deliver(client, payment_event(succeeded))
    deliver(client, payment_event(failed, "payment_intent.payment_failed"))

    assert told("top_up_succeeded") == [("tom", f"top_up_succeeded:top_up:{succeeded.uuid}")]
    assert told("top_up_failed") == [("tom", f"top_up_failed:top_up:{failed.uuid}")]
    assert Notification.objects.get(kind="top_up_failed").body == (
        "Your card was declined. Nothing was charged."
    )


def test_a_budget_threshold_tells_the_admins_once_a_month_and_its_mail_stays_billing_s():
    organization = OrganizationFactory(name="Photon Lab")
    admin(organization, "ada")
    member(organization, "mia")
    billing.wallet_credit(organization=organization, amount=Decimal(500), idempotency_reference="c")
    billing.budget_set(
        organization=organization, monthly_limit=Decimal("200.00"), alert_thresholds=[50]
    )

    billing.hold_place(
        organization=organization, amount=Decimal(110), reference_kind=ReferenceKind.BID
    )
    billing.hold_place(
        organization=organization, amount=Decimal(5), reference_kind=ReferenceKind.BID
    )

    rows = list(Notification.objects.values_list("user__username", "kind", "email_state"))
    assert rows == [("ada", "budget_threshold", "none")]  # mailed by billing's alert mail


def test_an_invitation_tells_the_invitee_only_if_the_name_is_a_user_and_only_once():
    organization = OrganizationFactory(name="Nimbus")
    tom = admin(organization, "tom")
    invitee = UserFactory(username="ines")

    first = organization_services.invitation_create(actor=tom, username="ines", role="member")
    again = organization_services.invitation_create(actor=tom, username="ines", role="member")
    unknown = organization_services.invitation_create(
        actor=tom, username="nobody-by-this-name", role="member"
    )
    # The task each invitation enqueues (after the commit; here called as the worker would,
    # twice for the first, as a retried task would).
    for invitation in (first, again, unknown):
        organization_services.invitation_notify(invitation_id=invitation.pk)

    assert first.pk == again.pk
    assert told("invitation") == [("ines", f"invitation:{first.uuid}")]
    notice = Notification.objects.get(user=invitee)
    assert (notice.title, notice.email_state) == ("You are invited to join Nimbus", "none")


def test_an_invitee_who_turned_off_mail_of_invitations_is_told_only_in_the_site(mailoutbox):
    organization = OrganizationFactory(name="Nimbus")
    tom = admin(organization, "tom")
    ines = UserFactory(username="ines", email="ines@example.org")
    ivan = UserFactory(username="ivan", email="ivan@example.org")
    NotificationPreference.objects.create(user=ivan, kind="invitation", by_email=False)

    for name in ("ines", "ivan"):
        invitation = organization_services.invitation_create(
            actor=tom, username=name, role="member"
        )
        organization_services.invitation_notify(invitation_id=invitation.pk)

    assert [mail.to for mail in mailoutbox] == [[ines.email]]
    assert told("invitation") == sorted(
        (name, f"invitation:{invitation.uuid}")
        for name, invitation in ((user.username, user.invitations.get()) for user in (ines, ivan))
    )


def test_an_auction_with_many_bidders_finds_their_admins_in_one_query(
    django_assert_max_num_queries,
):
    from notifications.services import NotificationEvent, notifications_record

    organizations = [OrganizationFactory(name=f"Team {number}") for number in range(30)]
    for number, organization in enumerate(organizations):
        admin(organization, f"admin{number}")
        member(organization, f"member{number}")
    events = [
        NotificationEvent(
            kind="bid_outbid",
            key=f"bid_outbid:bid:{number}",
            title="lost",
            organization_id=organization.pk,
            admins_only=True,
        )
        for number, organization in enumerate(organizations)
    ]

    # Members, preferences, users, the insert, the pending mails: not one per bidder.
    with django_assert_max_num_queries(6):
        written = notifications_record(events)

    assert written == 30
    assert sorted(Notification.objects.values_list("user__username", flat=True)) == sorted(
        f"admin{number}" for number in range(30)
    )
