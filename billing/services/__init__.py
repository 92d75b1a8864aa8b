"""Every write of billing. Other apps call these by name; nothing else changes money."""

from billing.services.budgets import (
    budget_alert_dismiss,
    budget_alert_notify,
    budget_set,
)
from billing.services.bulk_settlement import hold_release_batch_apply, holds_settle
from billing.services.chargebacks import top_up_refund
from billing.services.holds import (
    hold_capture,
    hold_place,
    hold_place_within,
    hold_release,
    hold_resize,
)
from billing.services.ledger import (
    LARGEST as LARGEST_AMOUNT,
)
from billing.services.ledger import (
    money,
    platform_fee,
    wallet_adjust,
    wallet_credit,
    wallet_debit,
    wallet_open,
)
from billing.services.payouts import (
    connected_account_onboard,
    payout_create,
    payout_transfer,
    payouts_pending_send,
)
from billing.services.top_ups import (
    stripe_event_process,
    stripe_events_process_pending,
    stripe_webhook_receive,
    top_up_create,
    top_ups_expire_abandoned,
)

__all__ = [
    "LARGEST_AMOUNT",
    "budget_alert_dismiss",
    "budget_alert_notify",
    "budget_set",
    "connected_account_onboard",
    "hold_capture",
    "hold_place",
    "hold_place_within",
    "hold_release",
    "hold_release_batch_apply",
    "hold_resize",
    "holds_settle",
    "money",
    "payout_create",
    "payout_transfer",
    "payouts_pending_send",
    "platform_fee",
    "stripe_event_process",
    "stripe_events_process_pending",
    "stripe_webhook_receive",
    "top_up_create",
    "top_up_refund",
    "top_ups_expire_abandoned",
    "wallet_adjust",
    "wallet_credit",
    "wallet_debit",
    "wallet_open",
]
