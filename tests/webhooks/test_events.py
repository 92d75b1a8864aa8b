"""Events emitted by the real code paths: a Stripe webhook's top-up, an auction's clearing, an
allocation's window, a budget threshold, and a job on the real Slurm test cluster that ends
(delivered by the real Celery worker after the commit, with no test calling the delivery)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from billing import services as billing
from billing.models import TopUp
from marketplace import services as market
from marketplace import webhook_events as market_events
from marketplace.models import Offer
from organizations.models import Membership
from tests.billing.test_webhook import deliver, payment_event
from tests.conftest import client_for, tenants_jobs_cancel, wait_for
from tests.factories import (
    MembershipFactory,
    PartitionFactory,
    allocation_bought,
    cluster_on_testcluster,
    funded_organization,
)
from tests.webhooks.receiver import Receiver, readme_verify_signature, receiver_running
from webhooks import services
from webhooks.models import EventType, WebhookDelivery, WebhookEndpoint, WebhookEvent

verify_signature = readme_verify_signature()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiver_running() as running:
        yield running


def listen(organization: Any, receiver: Receiver, *types: str) -> WebhookEndpoint:
    return services.endpoint_create(
        organization=organization, url=receiver.url, events=list(types or EventType.values)
    )


def sent(receiver: Receiver, endpoint: WebhookEndpoint) -> list[dict[str, Any]]:
    """Attempts every pending delivery of the endpoint and returns what the receiver got,
    each checked with the README's snippet."""
    for delivery in WebhookDelivery.objects.filter(endpoint=endpoint).order_by("pk"):
        services.delivery_attempt(delivery_id=delivery.pk)
    bodies = []
    for request in receiver.received:
        assert verify_signature(
            request.body, request.headers["ComputeShare-Signature"], endpoint.secret
        )
        bodies.append(json.loads(request.body))
    return bodies


@pytest.mark.django_db
def test_stripe_confirming_or_refusing_a_top_up_sends_top_up_events(receiver):
    organization = funded_organization("0")
    endpoint = listen(organization, receiver, "top_up.succeeded", "top_up.failed")
    top_up = TopUp.objects.create(
        organization=organization,
        created_by=MembershipFactory(organization=organization, role="admin").user,
        amount=Decimal("40.00"),
        currency=settings.PLATFORM_CURRENCY,
        payment_intent=f"pi_{uuid.uuid4().hex[:20]}",
    )
    client = Client()

    deliver(client, payment_event(top_up, "payment_intent.payment_failed"))
    deliver(client, payment_event(top_up))
    deliver(client, payment_event(top_up))  # Stripe repeats itself: no second event

    events = sent(receiver, endpoint)
    assert [(event["type"], event["data"]["status"]) for event in events] == [
        ("top_up.failed", "failed"),
        ("top_up.succeeded", "succeeded"),
    ]
    assert events[1]["data"] == {
        "id": str(top_up.uuid),
        "amount": "40.00",
        "currency": settings.PLATFORM_CURRENCY,
        "status": "succeeded",
        "failure_reason": "",
    }
    assert events[0]["data"]["failure_reason"] == "Your card was declined."


@pytest.mark.django_db
def test_an_auction_clearing_tells_owner_and_bidders_and_the_outbid(receiver):
    partition = PartitionFactory()
    owner = MembershipFactory(organization=partition.cluster.organization, role="admin")
    now = timezone.now()
    offer = market.offer_create(
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
    bidders = {}
    for name, quantity, price in [("A", 70, "2.50"), ("B", 50, "2.00"), ("C", 20, "1.20")]:
        bidders[name] = MembershipFactory(
            organization=funded_organization("500", name=name), role=Membership.Role.ADMIN
        )
        market.bid_place(actor=bidders[name], offer=offer, quantity=quantity, price=price)
    owner_hook = listen(owner.organization, receiver, "auction.cleared")
    b_hook = listen(bidders["B"].organization, receiver, "bid.outbid", "auction.cleared")
    c_hook = listen(bidders["C"].organization, receiver, "bid.outbid")
    Offer.objects.filter(pk=offer.pk).update(auction_closes_at=now - timedelta(seconds=1))

    market.auction_clear(offer_id=offer.pk)

    def of(endpoint: WebhookEndpoint) -> list[tuple[str, dict[str, Any]]]:
        return [
            (event.type, event.data)
            for event in WebhookEvent.objects.filter(deliveries__endpoint=endpoint).order_by("pk")
        ]

    cleared = {
        "offer": str(offer.uuid),
        "cluster": str(partition.cluster.uuid),
        "clearing_price": "2.000000",
        "quantity": 100,
        "quantity_sold": 100,
        "currency": settings.PLATFORM_CURRENCY,
    }
    assert of(owner_hook) == [("auction.cleared", cleared)]
    b_events = of(b_hook)
    assert b_events[0] == ("auction.cleared", cleared)
    assert b_events[1][0] == "bid.outbid"
    assert {k: b_events[1][1][k] for k in ("status", "quantity", "quantity_won")} == {
        "status": "partially_won",
        "quantity": 50,
        "quantity_won": 30,
    }
    [(kind, lost)] = of(c_hook)
    assert (kind, lost["status"], lost["quantity_won"]) == ("bid.outbid", "lost", 0)
    # The signed body reaches C's endpoint.
    assert [event["type"] for event in sent(receiver, c_hook)] == ["bid.outbid"]


@pytest.mark.django_db
def test_allocation_windows_starting_and_ending_are_told_once(receiver, settings):
    settings.WEBHOOK_ALLOCATION_ENDING_LEAD_SECONDS = 3 * 3600
    organization = funded_organization("0")
    endpoint = listen(organization, receiver, "allocation.starting", "allocation.ending")
    ending_soon = allocation_bought(organization, window_end=timedelta(hours=2))
    allocation_bought(organization, window_end=timedelta(days=3))

    market_events.allocation_events_due()
    market_events.allocation_events_due()  # the next minute: nothing new

    events = WebhookEvent.objects.filter(deliveries__endpoint=endpoint)
    assert sorted(events.values_list("type", flat=True)) == [
        "allocation.ending",
        "allocation.starting",
        "allocation.starting",
    ]
    assert events.get(type="allocation.ending").data["id"] == str(ending_soon.uuid)
    assert len(sent(receiver, endpoint)) == 3


@pytest.mark.django_db
def test_crossing_a_budget_threshold_is_told_once(receiver):
    organization = funded_organization("1000")
    endpoint = listen(organization, receiver, "budget.threshold")
    billing.budget_set(
        organization=organization, monthly_limit=Decimal("200.00"), alert_thresholds=[50, 80]
    )

    allocation_bought(organization, quantity=60, price="2.00")  # 120 of 200: 50 % crossed
    allocation_bought(organization, quantity=5, price="2.00")  # 130: nothing new

    [event] = sent(receiver, endpoint)
    assert event["type"] == "budget.threshold"
    assert event["data"]["threshold"] == 50
    assert event["data"]["monthly_limit"] == "200.00"


def ours(receiver: Receiver, job_id: str) -> list[Any]:
    return [
        each for each in list(receiver.received) if json.loads(each.body)["data"]["id"] == job_id
    ]


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_job_that_ends_on_the_cluster_is_delivered_by_the_worker(
    testcluster, celery_worker, poller, receiver
):
    cluster = cluster_on_testcluster(testcluster, pool="fixed")
    organization = funded_organization("1000", name="Hooked Team")
    member = MembershipFactory(organization=organization, role="member").user
    endpoint = listen(organization, receiver, "job.ended")
    allocation = allocation_bought(
        organization, partition=cluster.partitions.get(), quantity=10, price=Decimal("1.00")
    )
    client = client_for(member)
    try:
        answer = client.post(
            "/api/v1/jobs/",
            {
                "allocation": str(allocation.uuid),
                "name": "tells a hook",
                "script": "#!/bin/bash\nexit 3\n",
                "time_limit_minutes": 2,
            },
            format="json",
        )
        assert answer.status_code == 201, answer.json()
        job_id = answer.json()["id"]
        wait_for(lambda: ours(receiver, job_id), timeout=240, interval=0.5)
    finally:
        tenants_jobs_cancel(testcluster)

    # Jobs that other runs left on the shared tenant accounts count as the team's own (origin
    # `tenant`) and end too: this job's event is the one with its id. Under a loaded machine an
    # answer slower than the time-out is retried with the same body (receivers deduplicate).
    mine = ours(receiver, job_id)
    request = mine[0]
    assert {each.body for each in mine} == {request.body}
    assert verify_signature(
        request.body, request.headers["ComputeShare-Signature"], endpoint.secret
    )
    event = json.loads(request.body)
    job = client.get(f"/api/v1/jobs/{job_id}/").json()
    assert event["type"] == "job.ended"
    assert event["data"]["id"] == job_id
    assert event["data"]["state"] == job["state"] == "failed"
    assert event["data"]["exit_code"] == job["exit_code"] == 3
    assert event["data"]["cost"] == str(Decimal(job["cost"]).quantize(Decimal("0.000001")))
    assert event["data"]["scheduler_job_id"] == job["scheduler_job_id"]
    delivery = wait_for(
        lambda: WebhookDelivery.objects.filter(
            status="delivered", object_key=f"job:{job_id}"
        ).first(),
        timeout=30,
    )
    assert delivery.attempt_count == len(mine)
