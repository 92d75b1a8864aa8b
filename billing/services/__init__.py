"""Every write of billing. Other apps call these by name; nothing else changes money."""

from billing.services.budgets import (
    budget_alert_dismiss,
    budget_alert_notify,
    budget_get,
    budget_set,
)
from billing.services.ledger import (
    LARGEST as LARGEST_AMOUNT,
)
from billing.services.ledger import (
    hold_capture,
    hold_place,
    hold_place_within,
    hold_release,
    hold_resize,
    holds_settle,
    money,
    platform_fee,
    wallet_adjust,
    wallet_credit,
    wallet_open,
)
from billing.services.top_ups import (
    stripe_event_process,
    stripe_events_process_pending,
    stripe_webhook_receive,
    top_up_create,
)

__all__ = [
    "LARGEST_AMOUNT",
    "budget_alert_dismiss",
    "budget_alert_notify",
    "budget_get",
    "budget_set",
    "hold_capture",
    "hold_place",
    "hold_place_within",
    "hold_release",
    "hold_resize",
    "holds_settle",
    "money",
    "platform_fee",
    "stripe_event_process",
    "stripe_events_process_pending",
    "stripe_webhook_receive",
    "top_up_create",
    "wallet_adjust",
    "wallet_credit",
    "wallet_open",
]
