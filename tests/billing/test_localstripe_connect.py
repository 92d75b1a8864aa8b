"""The local Stripe server's Connect, refund, dispute and idempotency additions
(scripts/localstripe_connect.py) through Stripe's own Python client, with the events it signs
and sends: the objects have the fields Stripe's reference gives them and refuse what Stripe
refuses."""

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import stripe

from tests.billing.test_localstripe_server import WebhookReceiver
from tests.localstripe import LocalStripe, http_request

WEBHOOK_SECRET = "whsec_test_localstripe_connect"
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def webhooks(localstripe: LocalStripe) -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    localstripe.register_webhook(receiver.url, WEBHOOK_SECRET, name="connect-tests")
    yield receiver
    localstripe.register_webhook("http://127.0.0.1:9/", WEBHOOK_SECRET, name="connect-tests")
    receiver.close()


def express_account(client: stripe.StripeClient) -> stripe.Account:
    return client.v1.accounts.create(
        params={"type": "express", "capabilities": {"transfers": {"requested": True}}}
    )


def onboarding_link(client: stripe.StripeClient, account_id: str) -> stripe.AccountLink:
    return client.v1.account_links.create(
        params={
            "account": account_id,
            "type": "account_onboarding",
            "refresh_url": "http://127.0.0.1:9/refresh",
            "return_url": "http://127.0.0.1:9/return",
        }
    )


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def submit_onboarding(url: str) -> tuple[int, str]:
    """Posts the onboarding page's form and answers (status, Location) without following."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect)
    request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310 (http only)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.headers.get("Location", "")
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Location", "")


def paid_intent(localstripe: LocalStripe, amount: int, card: str = "4242424242424242") -> str:
    client = localstripe.client()
    intent = client.v1.payment_intents.create(params={"amount": amount, "currency": "usd"})
    assert localstripe.pay(intent.id, card) == "succeeded"
    return intent.id


def verified(body: bytes, signature: str) -> dict[str, Any]:
    """The event, once its signature checks out against the registered secret."""
    stripe.WebhookSignature.verify_header(body.decode(), signature, WEBHOOK_SECRET, 300)
    event: dict[str, Any] = json.loads(body)
    return event


def dispute_created(webhooks: WebhookReceiver, charge_id: str) -> dict[str, object] | None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for body, _ in list(webhooks.deliveries):
            event = json.loads(body)
            dispute = event["data"]["object"]
            if event["type"] == "charge.dispute.created" and dispute["charge"] == charge_id:
                return dispute  # type: ignore[no-any-return]
        time.sleep(0.1)
    return None


def test_an_express_account_onboards_through_its_link_and_sends_account_updated(
    localstripe: LocalStripe, webhooks: WebhookReceiver
) -> None:
    client = localstripe.client()
    account = express_account(client)
    assert account.id.startswith("acct_")
    assert (account.type, account.details_submitted, account.payouts_enabled) == (
        "express",
        False,
        False,
    )
    assert account.capabilities.to_dict() == {"transfers": "inactive"}
    assert "external_account" in account.requirements.currently_due

    link = onboarding_link(client, account.id)
    assert link.object == "account_link"
    assert link.expires_at - link.created == 300
    status, _page = http_request("GET", link.url)
    assert status == 200
    assert submit_onboarding(link.url) == (303, "http://127.0.0.1:9/return")

    body, signature = webhooks.wait_for("account.updated", account.id)
    event = verified(body, signature)
    assert event["account"] == account.id
    assert event["data"]["object"]["details_submitted"] is True
    assert event["data"]["object"]["payouts_enabled"] is True
    assert event["data"]["object"]["capabilities"] == {"transfers": "active"}
    assert event["data"]["previous_attributes"]["capabilities"] == {"transfers": "inactive"}
    assert client.v1.accounts.retrieve(account.id).requirements.currently_due == []
    # A link is single use: opened again, it sends the owner to refresh_url.
    assert submit_onboarding(link.url) == (303, "http://127.0.0.1:9/refresh")


def test_a_transfer_needs_an_account_whose_transfers_are_active(localstripe: LocalStripe) -> None:
    client = localstripe.client()
    account = express_account(client)
    with pytest.raises(stripe.InvalidRequestError) as refused:
        client.v1.transfers.create(
            params={"amount": 1000, "currency": "usd", "destination": account.id}
        )
    assert refused.value.code == "insufficient_capabilities_for_transfer"

    submit_onboarding(onboarding_link(client, account.id).url)
    transfer = client.v1.transfers.create(
        params={
            "amount": 1000,
            "currency": "usd",
            "destination": account.id,
            "transfer_group": "payout-1",
            "metadata": {"payout": "1"},
        }
    )
    assert (transfer.object, transfer.amount, transfer.destination) == (
        "transfer",
        1000,
        account.id,
    )
    assert (transfer.amount_reversed, transfer.reversed, transfer.transfer_group) == (
        0,
        False,
        "payout-1",
    )
    assert client.v1.transfers.retrieve(transfer.id).metadata.to_dict() == {"payout": "1"}
    with pytest.raises(stripe.InvalidRequestError) as missing:
        client.v1.transfers.create(
            params={"amount": 1000, "currency": "usd", "destination": "acct_nobody"}
        )
    assert missing.value.code == "resource_missing"


def test_an_idempotency_key_replays_the_first_answer_and_refuses_other_parameters(
    localstripe: LocalStripe,
) -> None:
    client = localstripe.client()
    account = express_account(client)
    submit_onboarding(onboarding_link(client, account.id).url)
    key = f"test-{uuid.uuid4()}"
    params = {"amount": 700, "currency": "usd", "destination": account.id}

    first = client.v1.transfers.create(params=params, options={"idempotency_key": key})
    again = client.v1.transfers.create(params=params, options={"idempotency_key": key})

    assert again.id == first.id
    with pytest.raises(stripe.IdempotencyError):
        client.v1.transfers.create(
            params={**params, "amount": 701}, options={"idempotency_key": key}
        )


def test_a_refund_sends_charge_refunded_and_is_refused_past_what_is_left(
    localstripe: LocalStripe, webhooks: WebhookReceiver
) -> None:
    client = localstripe.client()
    intent_id = paid_intent(localstripe, 5000)

    refund = client.v1.refunds.create(params={"payment_intent": intent_id, "amount": 2000})

    body, signature = webhooks.wait_for("charge.refunded", refund.charge)
    charge = verified(body, signature)["data"]["object"]
    assert (charge["amount_refunded"], charge["refunded"], charge["payment_intent"]) == (
        2000,
        False,
        intent_id,
    )
    with pytest.raises(stripe.InvalidRequestError) as refused:
        client.v1.refunds.create(params={"payment_intent": intent_id, "amount": 3001})
    assert refused.value.code == "amount_too_large"


def test_the_dispute_card_is_disputed_and_evidence_closes_it_won_or_lost(
    localstripe: LocalStripe, webhooks: WebhookReceiver
) -> None:
    client = localstripe.client()
    outcomes = {}
    for evidence in ("winning_evidence", "losing_evidence"):
        intent_id = paid_intent(localstripe, 3000, card="4000000000000259")
        charge_id = client.v1.payment_intents.retrieve(intent_id).latest_charge
        charge_id = charge_id if isinstance(charge_id, str) else charge_id.id
        created = dispute_created(webhooks, charge_id)
        assert created is not None
        assert (created["status"], created["amount"], created["payment_intent"]) == (
            "needs_response",
            3000,
            intent_id,
        )
        assert created["balance_transactions"][0]["amount"] == -3000
        with pytest.raises(stripe.InvalidRequestError) as refused:
            client.v1.refunds.create(params={"payment_intent": intent_id})
        assert refused.value.code == "charge_disputed"

        client.v1.disputes.update(
            created["id"], params={"evidence": {"uncategorized_text": evidence}}
        )

        body, signature = webhooks.wait_for("charge.dispute.closed", created["id"])
        closed = verified(body, signature)["data"]["object"]
        outcomes[evidence] = (
            closed["status"],
            [t["amount"] for t in closed["balance_transactions"]],
        )
    assert outcomes == {
        "winning_evidence": ("won", [-3000, 3000]),
        "losing_evidence": ("lost", [-3000]),
    }
