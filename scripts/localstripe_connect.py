"""Stripe Connect, refunds' events, disputes and idempotency keys for the local Stripe server.

localstripe implements none of these. This module adds exactly what ComputeShare's code and
tests use, shaped as Stripe's API reference documents the objects and events:

- `POST /v1/accounts` (Express accounts requesting the `transfers` capability) and
  `GET /v1/accounts/{id}`. An account starts with `details_submitted`, `payouts_enabled` false
  and its capabilities `inactive`; finishing onboarding turns them on and sends
  `account.updated` (with `account` and `data.previous_attributes`, as a Connect event has).
- `POST /v1/account_links` (`type=account_onboarding`): a single-use link that expires after
  300 seconds, to an onboarding page served here at `/connect/onboarding/{token}`. Its button
  stands for Stripe's test-mode form; a used or expired link redirects to `refresh_url`, as
  Stripe's does.
- `POST /v1/transfers`, `GET /v1/transfers/{id}`: refused with
  `insufficient_capabilities_for_transfer` while the destination cannot receive transfers.
- Refunds (localstripe's own `POST /v1/refunds`) now send `charge.refunded` with the charge
  (`amount_refunded`, `refunded`), and are refused past the unrefunded amount
  (`amount_too_large`) or on a disputed charge (`charge_disputed`).
- Disputes, as in Stripe's test mode: a charge paid with the card 4000000000000259 succeeds and
  is then disputed (`charge.dispute.created`, funds withdrawn, status `needs_response`);
  `POST /v1/disputes/{id}` with `evidence[uncategorized_text]` `winning_evidence` or
  `losing_evidence` closes it won or lost, and `POST /v1/disputes/{id}/close` accepts it (lost),
  each sending `charge.dispute.closed`. `GET /v1/disputes/{id}`.
- `Idempotency-Key` on every POST under /v1/: the same key with the same request answers the
  first (successful) answer again with `Idempotent-Replayed: true` and does nothing; with other
  parameters it is refused (400 `idempotency_error`); while the first is still running, 409.

Not imitated: the platform's balance (transfers are never short of funds), transfer reversals,
Stripe's fees on disputes, `refund.failed`, and requirements beyond "everything submitted".
"""

import html
import secrets
import time
from typing import Any

from aiohttp import web
from localstripe import server
from localstripe.errors import UserError
from localstripe.resources import Charge, Event, PaymentIntent, PaymentMethod, Refund, StripeObject
from localstripe.webhooks import schedule_webhook

ACCOUNT_LINK_LIFETIME_SECONDS = 300
DISPUTED_CARD = "4000000000000259"
ONBOARDING_PATH = "/connect/onboarding/"
WINNING_EVIDENCE = "winning_evidence"
LOSING_EVIDENCE = "losing_evidence"


def _error(status: int, message: str, code: str | None = None, **extra: Any) -> UserError:
    contents: dict[str, Any] = dict(extra)
    if code:
        contents["code"] = code
    error = UserError(status, message, contents)
    if "type" in extra:  # UserError makes every error an invalid_request_error
        error.body["error"]["type"] = extra["type"]
    return error


def _is_true(value: Any) -> bool:
    return value is True or value == "true"


def _event(kind: str, obj: StripeObject, *, account: str | None = None, **previous: Any) -> None:
    event = Event(kind, obj)
    if previous:
        event.data["previous_attributes"] = previous
    if account is not None:
        event.account = account
    schedule_webhook(event)


# --- Connect -----------------------------------------------------------------------------------


class Account(StripeObject):
    object = "account"
    _id_prefix = "acct_"

    def __init__(
        self,
        type: Any = None,
        country: Any = None,
        email: Any = None,
        capabilities: Any = None,
        metadata: Any = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise UserError(400, "Unexpected " + ", ".join(kwargs.keys()))
        if type not in ("express", "standard", "custom"):
            raise _error(
                400,
                "Invalid type: must be one of express, standard, custom",
                "parameter_invalid_empty",
                param="type",
            )
        if capabilities is not None and not isinstance(capabilities, dict):
            raise _error(400, "Invalid capabilities: must be an object", param="capabilities")
        requested = {
            name: options
            for name, options in (capabilities or {}).items()
            if isinstance(options, dict) and _is_true(options.get("requested"))
        }
        super().__init__()
        self.type = type
        self.country = country or "US"
        self.email = email
        self.default_currency = "usd"
        self.metadata = metadata or {}
        self.business_type = None
        self.capabilities = {name: "inactive" for name in sorted(requested)}
        self.charges_enabled = False
        self.payouts_enabled = False
        self.details_submitted = False
        self.requirements = self._requirements(
            ["business_type", "external_account", "tos_acceptance.date", "tos_acceptance.ip"]
        )

    @staticmethod
    def _requirements(due: list[str]) -> dict[str, Any]:
        return {
            "alternatives": [],
            "current_deadline": None,
            "currently_due": due,
            "disabled_reason": "requirements.past_due" if due else None,
            "errors": [],
            "eventually_due": due,
            "past_due": due,
            "pending_verification": [],
        }

    def _complete_onboarding(self) -> None:
        previous = {
            "capabilities": dict(self.capabilities),
            "charges_enabled": self.charges_enabled,
            "details_submitted": self.details_submitted,
            "payouts_enabled": self.payouts_enabled,
            "requirements": dict(self.requirements),
        }
        self.business_type = "individual"
        self.capabilities = {name: "active" for name in self.capabilities}
        self.charges_enabled = "card_payments" in self.capabilities
        self.payouts_enabled = True
        self.details_submitted = True
        self.requirements = self._requirements([])
        _event("account.updated", self, account=self.id, **previous)

    @classmethod
    def _api_update(cls, id: str, **data: Any) -> "Account":
        raise UserError(405, "Method Not Allowed")

    @classmethod
    def _api_delete(cls, id: str) -> Any:
        raise UserError(405, "Method Not Allowed")


class _AccountLinks:
    """The single-use onboarding links, by the token in their URL."""

    def __init__(self) -> None:
        self.links: dict[str, dict[str, Any]] = {}

    def create(self, base: str, data: dict[str, Any]) -> dict[str, Any]:
        unexpected = set(data) - {"account", "type", "refresh_url", "return_url", "collect"}
        if unexpected:
            raise UserError(400, "Unexpected " + ", ".join(sorted(unexpected)))
        for name in ("account", "type"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise _error(
                    400, f"Missing required param: {name}.", "parameter_missing", param=name
                )
        if data["type"] not in ("account_onboarding", "account_update"):
            raise _error(400, "Invalid type", "parameter_invalid_empty", param="type")
        for name in ("refresh_url", "return_url"):
            url = data.get(name)
            if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
                raise _error(400, f"Not a valid URL: {name}", "url_invalid", param=name)
        account = Account._api_retrieve(data["account"])
        token = secrets.token_urlsafe(18)
        created = int(time.time())
        self.links[token] = {
            "account": account.id,
            "refresh_url": data["refresh_url"],
            "return_url": data["return_url"],
            "expires_at": created + ACCOUNT_LINK_LIFETIME_SECONDS,
            "used": False,
        }
        return {
            "object": "account_link",
            "created": created,
            "expires_at": created + ACCOUNT_LINK_LIFETIME_SECONDS,
            "url": f"{base}{ONBOARDING_PATH}{token}",
        }

    def usable(self, token: str) -> dict[str, Any] | None:
        link = self.links.get(token)
        if link is None or link["used"] or link["expires_at"] < time.time():
            return None
        return link


account_links = _AccountLinks()

ONBOARDING_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>Stripe Express onboarding (local test mode)</title>
<style>body{{font-family:system-ui,sans-serif;max-width:32rem;margin:2rem auto;padding:0 1rem}}
button{{font-size:1rem;padding:.6rem 1.2rem}}</style></head>
<body><h1>Set up payouts</h1>
<p>Account <code>{account}</code>. This is the local Stripe server: submitting stands for
Stripe's onboarding form filled with test data.</p>
<form method="post"><button type="submit" id="submit-onboarding">Agree and submit</button></form>
</body></html>
"""


@web.middleware
async def onboarding_pages(request: web.Request, handler: Any) -> web.StreamResponse:
    """The page an account link opens. In front of the auth middleware: the owner's browser
    has no API key, the link's token is what lets it in."""
    if not request.path.startswith(ONBOARDING_PATH):
        return await handler(request)
    token = request.path[len(ONBOARDING_PATH) :]
    link = account_links.links.get(token)
    if link is None:
        raise UserError(404, "Not Found")
    if account_links.usable(token) is None:
        raise web.HTTPSeeOther(link["refresh_url"])
    if request.method == "GET":
        page = ONBOARDING_PAGE.format(account=html.escape(link["account"]))
        return web.Response(text=page, content_type="text/html")
    if request.method != "POST":
        raise UserError(405, "Method Not Allowed")
    link["used"] = True
    Account._api_retrieve(link["account"])._complete_onboarding()
    raise web.HTTPSeeOther(link["return_url"])


class Transfer(StripeObject):
    object = "transfer"
    _id_prefix = "tr_"

    def __init__(
        self,
        amount: Any = None,
        currency: Any = None,
        destination: Any = None,
        description: Any = None,
        metadata: Any = None,
        transfer_group: Any = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise UserError(400, "Unexpected " + ", ".join(kwargs.keys()))
        try:
            amount = int(amount)
        except (TypeError, ValueError):
            raise _error(
                400, "Invalid integer: amount", "parameter_invalid_integer", param="amount"
            ) from None
        if amount <= 0:
            raise _error(
                400,
                "This value must be greater than or equal to 1.",
                "parameter_invalid_integer",
                param="amount",
            )
        if not isinstance(currency, str) or len(currency) != 3:
            raise _error(400, "Invalid currency", "parameter_invalid_empty", param="currency")
        if not isinstance(destination, str):
            raise _error(
                400,
                "Missing required param: destination.",
                "parameter_missing",
                param="destination",
            )
        account = _account_or_none(destination)
        if account is None:
            raise _error(
                400,
                f"No such destination: '{destination}'",
                "resource_missing",
                param="destination",
            )
        if account.capabilities.get("transfers") != "active":
            raise _error(
                400,
                "Your destination account needs to have at least one of the following "
                "capabilities enabled: transfers, crypto_transfers, legacy_payments",
                "insufficient_capabilities_for_transfer",
                param="destination",
            )
        super().__init__()
        self.amount = amount
        self.amount_reversed = 0
        self.balance_transaction = "txn_" + secrets.token_hex(12)
        self.currency = currency.lower()
        self.description = description
        self.destination = destination
        self.destination_payment = "py_" + secrets.token_hex(12)
        self.metadata = metadata or {}
        self.reversals = {
            "object": "list",
            "data": [],
            "has_more": False,
            "total_count": 0,
            "url": f"/v1/transfers/{self.id}/reversals",
        }
        self.reversed = False
        self.source_transaction = None
        self.source_type = "card"
        self.transfer_group = transfer_group

    @classmethod
    def _api_update(cls, id: str, **data: Any) -> "Transfer":
        raise UserError(405, "Method Not Allowed")


def _account_or_none(account_id: str) -> Account | None:
    try:
        return Account._api_retrieve(account_id)
    except UserError:
        return None


# --- Disputes and refunds ----------------------------------------------------------------------


class Dispute(StripeObject):
    object = "dispute"
    _id_prefix = "dp_"

    def __init__(self, charge: Charge) -> None:
        super().__init__()
        self.currency = charge.currency
        self.amount = charge.amount
        self.balance_transactions = [
            self._balance_transaction(-charge.amount, "Chargeback withdrawal")
        ]
        self.charge = charge.id
        self.evidence = {"uncategorized_text": None}
        self.evidence_details = {
            "due_by": self.created + 7 * 86400,
            "has_evidence": False,
            "past_due": False,
            "submission_count": 0,
        }
        self.is_charge_refundable = False
        self.metadata: dict[str, Any] = {}
        self.payment_intent = charge.payment_intent
        self.reason = "fraudulent"
        self.status = "needs_response"

    def _balance_transaction(self, amount: int, description: str) -> dict[str, Any]:
        return {
            "id": "txn_" + secrets.token_hex(12),
            "object": "balance_transaction",
            "amount": amount,
            "currency": self.currency,
            "description": description,
            "reporting_category": "dispute" if amount < 0 else "dispute_reversal",
            "type": "adjustment",
        }

    def _close(self, won: bool) -> None:
        if self.status in ("won", "lost"):
            raise _error(
                400, f"This dispute is already closed ({self.status}).", "dispute_already_closed"
            )
        previous = {"status": self.status}
        self.status = "won" if won else "lost"
        if won:
            self.balance_transactions.append(
                self._balance_transaction(self.amount, "Chargeback reversal")
            )
        _event("charge.dispute.closed", self, **previous)

    @classmethod
    def _api_create(cls, **data: Any) -> "Dispute":
        raise UserError(405, "Method Not Allowed")

    @classmethod
    def _api_update(cls, id: str, **data: Any) -> "Dispute":
        dispute = cls._api_retrieve(id)
        unexpected = set(data) - {"evidence", "metadata", "submit"}
        if unexpected:
            raise UserError(400, "Unexpected " + ", ".join(sorted(unexpected)))
        evidence = data.get("evidence") or {}
        if not isinstance(evidence, dict):
            raise _error(400, "Invalid evidence: must be an object", param="evidence")
        if isinstance(data.get("metadata"), dict):
            dispute.metadata.update(data["metadata"])
        text = evidence.get("uncategorized_text")
        if text is not None:
            dispute.evidence["uncategorized_text"] = text
            dispute.evidence_details["has_evidence"] = True
            dispute.evidence_details["submission_count"] += 1
        if text in (WINNING_EVIDENCE, LOSING_EVIDENCE):
            dispute._close(won=text == WINNING_EVIDENCE)
        elif text is not None and dispute.status == "needs_response":
            dispute.status = "under_review"
        return dispute

    @classmethod
    def _api_close(cls, id: str, **kwargs: Any) -> "Dispute":
        if kwargs:
            raise UserError(400, "Unexpected " + ", ".join(kwargs.keys()))
        dispute = cls._api_retrieve(id)
        dispute._close(won=False)
        return dispute


def _charge_disputed(self: Charge) -> bool:
    return getattr(self, "_dispute", None) is not None


def _dispute_after_success() -> None:
    """The test card 4000000000000259: the payment succeeds, then it is disputed."""
    succeeded = PaymentIntent._on_success

    def on_success(self: PaymentIntent) -> None:
        succeeded(self)
        charge = self.latest_charge
        payment_method = PaymentMethod._api_retrieve(self.payment_method)
        if charge is not None and getattr(payment_method, "_card_number", None) == DISPUTED_CARD:
            charge._dispute = Dispute(charge)
            _event("charge.dispute.created", charge._dispute)

    PaymentIntent._on_success = on_success


def _refunds_send_charge_refunded() -> None:
    create = Refund._api_create

    def refund_create(cls: type[Refund], **data: Any) -> Refund:
        amount = data.get("amount")
        charge_id = data.get("charge")
        if charge_id is None and isinstance(data.get("payment_intent"), str):
            intent = PaymentIntent._api_retrieve(data["payment_intent"])
            charge_id = intent.latest_charge.id if intent.latest_charge else None
        if isinstance(charge_id, str):
            charge = Charge._api_retrieve(charge_id)
            if _charge_disputed(charge):
                raise _error(
                    400,
                    f"Charge {charge.id} has been charged back; cannot issue a refund.",
                    "charge_disputed",
                    charge=charge.id,
                )
            left = charge.amount - charge.amount_refunded
            if left <= 0:
                raise _error(
                    400,
                    f"Charge {charge.id} has already been refunded.",
                    "charge_already_refunded",
                    charge=charge.id,
                )
            try:
                asked = left if amount is None else int(amount)
            except (TypeError, ValueError):
                raise _error(
                    400, "Invalid integer: amount", "parameter_invalid_integer", param="amount"
                ) from None
            if asked > left:
                raise _error(
                    400,
                    f"Refund amount ({asked}) is greater than unrefunded amount on charge ({left})",
                    "amount_too_large",
                    param="amount",
                )
        refund = create.__func__(cls, **data)  # type: ignore[attr-defined]
        charge = Charge._api_retrieve(refund.charge)
        _event(
            "charge.refunded",
            charge,
            amount_refunded=charge.amount_refunded - refund.amount,
            refunded=False,
        )
        return refund

    Refund._api_create = classmethod(refund_create)


# --- Idempotency keys --------------------------------------------------------------------------


class _IdempotentAnswers:
    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], tuple[str, bytes, int, bytes]] = {}
        self.running: set[tuple[str, str]] = set()


_idempotent = _IdempotentAnswers()


@web.middleware
async def idempotency_keys(request: web.Request, handler: Any) -> web.StreamResponse:
    """Stripe's idempotent requests: keyed by the API key and the `Idempotency-Key` header; the
    first successful answer is kept and answered again for the same request."""
    key = request.headers.get("Idempotency-Key")
    if request.method != "POST" or not key or not request.path.startswith("/v1/"):
        return await handler(request)
    scope = (request.headers.get("Authorization", ""), key)
    body = await request.read()
    kept = _idempotent.answers.get(scope)
    if kept is not None:
        path, first_body, status, answer = kept
        if (path, first_body) != (request.path, body):
            raise _error(
                400,
                "Keys for idempotent requests can only be used with the same parameters they "
                f"were first used with. Try using a key other than '{key}' if you meant to "
                "execute a different request.",
                type="idempotency_error",
            )
        response = web.Response(body=answer, status=status, content_type="application/json")
        response.headers["Idempotent-Replayed"] = "true"
        return response
    if scope in _idempotent.running:
        raise _error(
            409,
            "There is currently another in-progress request using this idempotency key.",
            type="idempotency_error",
        )
    _idempotent.running.add(scope)
    try:
        response = await handler(request)
    finally:
        _idempotent.running.discard(scope)
    if (
        200 <= response.status < 300
        and isinstance(response, web.Response)
        and response.body is not None
    ):
        _idempotent.answers[scope] = (request.path, body, response.status, bytes(response.body))
    response.headers["Idempotency-Key"] = key
    return response


# --- Wiring ------------------------------------------------------------------------------------


def _json(obj: Any) -> web.Response:
    return server.json_response(obj._export() if isinstance(obj, StripeObject) else obj)


def install(app: web.Application) -> None:
    """Adds the routes, the middlewares and the patched behaviours; before the app starts."""
    Charge.disputed = property(_charge_disputed)  # type: ignore[attr-defined]
    _dispute_after_success()
    _refunds_send_charge_refunded()

    async def post_data(request: web.Request) -> dict[str, Any]:
        data = await server.get_post_data(request)
        return dict(data or {})

    async def account_create(request: web.Request) -> web.Response:
        return _json(Account._api_create(**await post_data(request)))

    async def account_retrieve(request: web.Request) -> web.Response:
        return _json(Account._api_retrieve(request.match_info["id"]))

    async def account_link_create(request: web.Request) -> web.Response:
        return _json(account_links.create(str(request.url.origin()), await post_data(request)))

    async def transfer_create(request: web.Request) -> web.Response:
        return _json(Transfer._api_create(**await post_data(request)))

    async def transfer_retrieve(request: web.Request) -> web.Response:
        return _json(Transfer._api_retrieve(request.match_info["id"]))

    async def dispute_retrieve(request: web.Request) -> web.Response:
        return _json(Dispute._api_retrieve(request.match_info["id"]))

    async def dispute_update(request: web.Request) -> web.Response:
        return _json(Dispute._api_update(request.match_info["id"], **await post_data(request)))

    async def dispute_close(request: web.Request) -> web.Response:
        return _json(Dispute._api_close(request.match_info["id"], **await post_data(request)))

    app.router.add_post("/v1/accounts", account_create)
    app.router.add_get("/v1/accounts/{id}", account_retrieve)
    app.router.add_post("/v1/account_links", account_link_create)
    app.router.add_post("/v1/transfers", transfer_create)
    app.router.add_get("/v1/transfers/{id}", transfer_retrieve)
    app.router.add_get("/v1/disputes/{id}", dispute_retrieve)
    app.router.add_post("/v1/disputes/{id}", dispute_update)
    app.router.add_post("/v1/disputes/{id}/close", dispute_close)

    position = list(app.middlewares).index(server.auth_middleware)
    app.middlewares.insert(position, onboarding_pages)
    # After the auth middleware: a request without a valid key is refused, not replayed.
    app.middlewares.insert(
        list(app.middlewares).index(server.auth_middleware) + 1, idempotency_keys
    )
