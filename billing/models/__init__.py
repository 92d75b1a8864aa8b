"""Billing's models, one module per part: the ledger (accounts, transactions, entries, holds),
budgets, payments through Stripe, and payouts. Every model is imported here, where Django looks
for them, and callers import them from here: `from billing.models import Hold`."""

from billing.models.budgets import DEFAULT_ALERT_THRESHOLDS, Budget, BudgetAlert
from billing.models.ledger import (
    HALF_MICRO_UNIT,
    ZERO,
    Account,
    Debt,
    Entry,
    Hold,
    HoldReleaseBatch,
    ReferenceKind,
    Transaction,
    money_field,
)
from billing.models.payments import Dispute, StripeEvent, TopUp, TopUpRefund
from billing.models.payouts import ConnectedAccount, Payout

__all__ = [
    "DEFAULT_ALERT_THRESHOLDS",
    "HALF_MICRO_UNIT",
    "ZERO",
    "Account",
    "Budget",
    "BudgetAlert",
    "ConnectedAccount",
    "Debt",
    "Dispute",
    "Entry",
    "Hold",
    "HoldReleaseBatch",
    "Payout",
    "ReferenceKind",
    "StripeEvent",
    "TopUp",
    "TopUpRefund",
    "Transaction",
    "money_field",
]
