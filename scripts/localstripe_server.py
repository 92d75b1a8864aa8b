#!/usr/bin/env python3
"""Runs localstripe, the fake Stripe server, for the tests and the demo.

Run it with the project's interpreter:

    .venv/bin/python scripts/localstripe_server.py [--port 8420]
        [--webhook-url URL --webhook-secret SECRET]

It is localstripe's own aiohttp application, started differently and with three fixes:

- Loopback only. localstripe's `start()` binds `::`, i.e. every interface of the machine; a
  payment fake that accepts any card has no business answering the network.
- No disk state. localstripe pickles its whole store to /tmp/localstripe.pickle after every
  change and reloads it at start, so every localstripe on the machine (the tests, the demo,
  another checkout) shares one file and one run's objects leak into the next. Here the store
  lives in memory only and every run starts empty.
- Stripe.js can pay. localstripe's Stripe.js (`localstripe-v3.js`) ignores the card Element in
  `stripe.confirmCardPayment(clientSecret, {payment_method: {card: element}})` and only
  finishes 3-D Secure on a PaymentIntent that already requires it, so the standard card flow
  cannot pay a fresh PaymentIntent. The script served here is localstripe's with a shim
  appended that sends the card the way real Stripe.js does (a POST to
  /v1/payment_intents/{id}/confirm with the publishable key and the client secret), and this
  server accepts that publishable-key confirm.

It also makes the "declined" test cards (4000000000000002 and friends) decline the charge, as
Stripe does; localstripe declines them only when a card is attached to a customer, so a
PaymentIntent paid with one would succeed.

Stripe Connect (accounts, account links and their onboarding page, transfers), refunds'
`charge.refunded`, disputes and idempotency keys come from scripts/localstripe_connect.py.

`--webhook-url` and `--webhook-secret` register a webhook at start, so that the demo need not
call /_config/webhooks/ itself; that route still works for the tests.
"""

import argparse
import logging
import re
from pathlib import Path
from typing import Any

import localstripe
from aiohttp import web
from localstripe import resources, server
from localstripe.errors import UserError
from localstripe.resources import PaymentIntent, PaymentMethod
from localstripe.webhooks import register_webhook
from localstripe_connect import install as install_connect

STRIPE_JS_PATH = "/js.stripe.com/v3/"
LOCALSTRIPE_JS = Path(localstripe.__file__).with_name("localstripe-v3.js")
CONFIRM_PATH = re.compile(r"^/v1/payment_intents/(pi_[A-Za-z0-9]+)/confirm$")
WEBHOOK_ID = "cli"

# Fields real Stripe.js may send with a publishable-key confirm. Anything else is refused, as
# localstripe refuses unknown parameters everywhere, so that a typo does not pass silently.
PUBLISHABLE_CONFIRM_FIELDS = {
    "key",
    "client_secret",
    "payment_method_data",
    "payment_user_agent",
    "referrer",
    "use_stripe_sdk",
    "return_url",
    "expected_payment_method_type",
}

logger = logging.getLogger("localstripe_server")

# Appended to localstripe-v3.js inside the same function scope (see `stripe_js`), so that it
# sees localstripe's `Element` class and `LOCALSTRIPE_BASE_API` constant.
STRIPE_JS_SHIM = r"""
// --- ComputeShare shim, appended by scripts/localstripe_server.py --------------------------
// localstripe's confirmCardPayment() ignores the card Element and only finishes 3-D Secure, so
// stripe.confirmCardPayment(clientSecret, {payment_method: {card: element}}) cannot pay a
// fresh PaymentIntent. Like real Stripe.js, this POSTs the card to the confirm endpoint with
// the publishable key and the client secret, and hands 3-D Secure to localstripe's modal.
(function () {
  const localstripeFactory = window.Stripe;

  // Stripe's form encoding: {a: {b: 1}} becomes a[b]=1.
  function formEncode(value, prefix, pairs) {
    if (value === undefined || value === null || value === '') {
      return pairs;
    }
    if (typeof value === 'object') {
      Object.keys(value).forEach((key) => {
        formEncode(value[key], prefix ? `${prefix}[${key}]` : key, pairs);
      });
    } else {
      pairs.push(`${encodeURIComponent(prefix)}=${encodeURIComponent(value)}`);
    }
    return pairs;
  }

  // Stripe.js refuses an incomplete card before any request, with these errors.
  function incompleteCardError(card) {
    const checks = [
      ['number', 'incomplete_number', 'Your card number is incomplete.'],
      ['exp_month', 'incomplete_expiry', "Your card's expiration date is incomplete."],
      ['exp_year', 'incomplete_expiry', "Your card's expiration date is incomplete."],
      ['cvc', 'incomplete_cvc', "Your card's security code is incomplete."],
    ];
    for (const [field, code, message] of checks) {
      if (!card || !card[field]) {
        return {type: 'validation_error', code, message};
      }
    }
    return null;
  }

  // The card as a person types it: "4242 4242 4242 4242" (spaces or dashes, as printed on the
  // card) and a two- or four-digit year, as real Stripe.js accepts. localstripe's Element
  // keeps the number as typed and prefixes the year with "20" (making 2034 into 202034).
  function typedCard(element) {
    const inputs = element._inputs;
    if (!inputs) {
      return (element.value || {}).card;
    }
    const year = inputs.exp_year.value.trim();
    return {
      number: inputs.number.value.replace(/[\s-]/g, ''),
      exp_month: inputs.exp_month.value.trim(),
      exp_year: /^\d{1,2}$/.test(year) ? `20${year.padStart(2, '0')}` : year,
      cvc: inputs.cvc.value.trim(),
    };
  }

  // localstripe's inputs carry a placeholder only; a screen reader needs a name for each.
  const INPUT_LABELS = {
    number: 'Card number', exp_month: 'Expiry month', exp_year: 'Expiry year',
    cvc: 'Security code (CVC)', postal_code: 'Postal code',
  };
  const mount = Element.prototype.mount;
  Element.prototype.mount = function (domElement) {
    mount.call(this, domElement);
    Object.entries(this._inputs || {}).forEach(([field, input]) => {
      input.setAttribute('aria-label', INPUT_LABELS[field] || field);
      input.setAttribute('inputmode', field === 'postal_code' ? 'text' : 'numeric');
      input.setAttribute('autocomplete', 'off');
    });
  };

  // localstripe's modal resolves a failed authentication as {paymentIntent} back in
  // requires_payment_method; Stripe.js resolves it as {error}.
  function authenticationResult(result) {
    const intent = result && result.paymentIntent;
    if (intent && intent.status === 'requires_payment_method' && intent.last_payment_error) {
      return {error: {type: 'invalid_request_error', ...intent.last_payment_error,
                      payment_intent: intent}};
    }
    return result;
  }

  async function confirmWithCard(apiKey, clientSecret, data, authenticate) {
    const match = /^(pi_[A-Za-z0-9]+)_secret_/.exec(clientSecret || '');
    if (!match) {
      throw new Error('Invalid value for confirmCardPayment intent secret: value should be ' +
                      `a client_secret string. You specified: ${clientSecret}.`);
    }
    const {card: element, ...paymentMethod} = data.payment_method;
    const value = {...(element.value || {}), card: typedCard(element)};
    const invalid = incompleteCardError(value.card);
    if (invalid) {
      return {error: invalid};
    }
    const billing = {...paymentMethod.billing_details};
    billing.address = {...billing.address};
    if (!billing.address.postal_code && value.postal_code) {
      billing.address.postal_code = value.postal_code;
    }
    const body = formEncode({
      key: apiKey,
      client_secret: clientSecret,
      payment_method_data: {
        ...paymentMethod, type: 'card', card: value.card, billing_details: billing,
      },
    }, '', []).join('&');

    let response;
    let answer;
    try {
      response = await fetch(
        `${LOCALSTRIPE_BASE_API}/v1/payment_intents/${match[1]}/confirm`, {
          method: 'POST',
          headers: {'Content-Type': 'application/x-www-form-urlencoded'},
          body,
        });
      answer = await response.json().catch(() => ({}));
    } catch (err) {
      return {error: {type: 'api_connection_error', message: String(err)}};
    }
    if (!response.ok || answer.error) {
      return {error: answer.error ||
        {type: 'api_error', message: `localstripe answered HTTP ${response.status}`}};
    }
    if (answer.status === 'requires_action') {
      return authenticationResult(await authenticate(clientSecret));
    }
    return {paymentIntent: answer};
  }

  window.Stripe = function (apiKey, options) {
    const stripe = localstripeFactory(apiKey, options);
    const authenticate = stripe.confirmCardPayment;
    stripe.confirmCardPayment = async (clientSecret, data) => {
      const card = data && data.payment_method && data.payment_method.card;
      if (card instanceof Element) {
        return confirmWithCard(apiKey, clientSecret, data, authenticate);
      }
      return authenticationResult(await authenticate(clientSecret, data));
    };
    return stripe;
  };
})();
"""


def stripe_js() -> str:
    """localstripe's Stripe.js with the shim, in one function scope. As a classic script,
    localstripe's top-level `class Element` would replace the page's global `Element` (the DOM
    interface) for every other script: Bootstrap's `instanceof Element` checks then throw, and
    its menus and alerts stop working on the Money page. Only `window.Stripe` leaves the scope
    (localstripe assigns it without a declaration)."""
    return "(function () {\n" + LOCALSTRIPE_JS.read_text() + "\n" + STRIPE_JS_SHIM + "\n})();\n"


def _keep_store_in_memory() -> None:
    # localstripe's Store writes /tmp/localstripe.pickle on every __setitem__/__delitem__ and
    # its server middleware after every POST; both go through these two methods.
    def nowhere(self: resources.Store) -> None:
        pass

    resources.Store.try_load_from_disk = nowhere
    resources.Store.dump_to_disk = nowhere


def _decline_charges_like_stripe() -> None:
    # On Stripe, 4000000000000002 and the other "declined" test cards fail the charge itself
    # (a PaymentIntent confirm); localstripe only refuses to attach them to a customer.
    # Card._charging_is_declined delegates to PaymentMethod's, so this covers both.
    declined_at_attach = PaymentMethod._attaching_is_declined
    declined_at_charge = PaymentMethod._charging_is_declined

    def charging_is_declined(self: Any) -> bool:
        return bool(declined_at_charge(self) or declined_at_attach(self))

    PaymentMethod._charging_is_declined = charging_is_declined


def _confirm_with_client_secret(payment_intent_id: str, data: dict[str, Any]) -> PaymentIntent:
    unexpected = set(data) - PUBLISHABLE_CONFIRM_FIELDS
    if unexpected:
        raise UserError(400, "Unexpected " + ", ".join(sorted(unexpected)))

    intent = PaymentIntent._api_retrieve(payment_intent_id)
    # The client secret is what lets a browser holding only the publishable key act on this
    # one PaymentIntent.
    if data.get("client_secret") != intent.client_secret:
        raise UserError(401, "Unauthorized")
    payment_method_data = data.get("payment_method_data")
    if not isinstance(payment_method_data, dict):
        raise UserError(400, "payment_method_data is required with a publishable key")
    if intent.status not in ("requires_payment_method", "requires_confirmation"):
        raise UserError(
            400,
            f"This PaymentIntent's status is {intent.status}; it cannot be confirmed.",
            {"code": "payment_intent_unexpected_state"},
        )

    payment_method = PaymentMethod._api_create(**payment_method_data)
    if intent.latest_charge is not None and intent.latest_charge.status == "failed":
        # Stripe lets the customer retry with another card after a decline. localstripe
        # derives the status from the latest charge, so while the failed one is latest the
        # PaymentIntent would stay in requires_payment_method and refuse the confirm.
        intent.latest_charge = None
    PaymentIntent._api_update(payment_intent_id, payment_method=payment_method.id)

    try:
        return PaymentIntent._api_confirm(payment_intent_id)
    except UserError as error:
        if error.code == 402:
            # Stripe.js resolves a decline as {error} with the card error's type and the
            # PaymentIntent and PaymentMethod in it; pages read error.payment_intent.
            error.body["error"].update(
                type="card_error",
                payment_intent=intent._export(),
                payment_method=payment_method._export(),
            )
        raise


@web.middleware
async def publishable_key_confirm(request: web.Request, handler: Any) -> web.StreamResponse:
    """Confirms a PaymentIntent for Stripe.js; sits in front of localstripe's auth middleware,
    which accepts only secret keys on this path."""
    match = CONFIRM_PATH.match(request.path)
    if request.method != "POST" or match is None or server.get_api_key(request) is not None:
        return await handler(request)
    data = await server.get_post_data(request, remove_auth=False) or {}
    key = data.get("key")
    if not (isinstance(key, str) and key.startswith("pk_")):
        # localstripe's own auth middleware answers 401, as it always did.
        return await handler(request)
    intent = _confirm_with_client_secret(match.group(1), dict(data))
    return server.json_response(intent._export())


def _stripe_js_middleware(script: str) -> Any:
    # localstripe's route for the script cannot be removed from its router, so this answers
    # the path before the router is consulted.
    @web.middleware
    async def serve_stripe_js(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method in ("GET", "HEAD") and request.path == STRIPE_JS_PATH:
            return web.Response(text=script, content_type="application/javascript")
        return await handler(request)

    return serve_stripe_js


def build_app(webhook_url: str | None = None, webhook_secret: str | None = None) -> web.Application:
    """localstripe's application, patched; call once, before the application starts."""
    _keep_store_in_memory()
    _decline_charges_like_stripe()

    app = server.app
    script = stripe_js()
    # Inside error_middleware, so that UserError becomes localstripe's JSON error answer, and
    # in front of auth_middleware, which would refuse the publishable key.
    position = list(app.middlewares).index(server.auth_middleware)
    app.middlewares.insert(position, publishable_key_confirm)
    app.middlewares.insert(position, _stripe_js_middleware(script))
    install_connect(app)

    if webhook_url and webhook_secret:
        register_webhook(WEBHOOK_ID, webhook_url, webhook_secret, None)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="localstripe on 127.0.0.1, in memory, with a Stripe.js that can pay."
    )
    parser.add_argument("--port", type=int, default=8420)
    parser.add_argument("--webhook-url", help="send every event to this URL")
    parser.add_argument("--webhook-secret", help="sign the events with this secret (whsec_...)")
    args = parser.parse_args(argv)
    if bool(args.webhook_url) != bool(args.webhook_secret):
        parser.error("--webhook-url and --webhook-secret go together")
    if args.webhook_url and not args.webhook_url.startswith(("http://", "https://")):
        parser.error("--webhook-url must be an http(s) URL")

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    app = build_app(args.webhook_url, args.webhook_secret)
    if args.webhook_url:
        logger.info("webhook %r: every event goes to %s", WEBHOOK_ID, args.webhook_url)
    web.run_app(app, host="127.0.0.1", port=args.port, print=logger.info)


if __name__ == "__main__":
    main()
