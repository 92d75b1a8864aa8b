"""The errors of money. Codes are part of the public contract (API.md)."""

from computeshare.errors import ApplicationError, Conflict, PaymentRequired


class InsufficientFunds(PaymentRequired):
    code = "insufficient_funds"
    default_detail = "The wallet's available balance does not cover this."


class BudgetExceeded(PaymentRequired):
    code = "budget_exceeded"
    default_detail = "This would take the organization past its monthly budget."


class HoldNotOpen(Conflict):
    code = "hold_not_open"
    default_detail = "This hold is closed."


class HoldTooSmall(Conflict):
    code = "hold_too_small"
    default_detail = "The hold does not cover this amount."


class InvalidSignature(ApplicationError):
    code = "invalid_signature"
    default_detail = "The webhook signature is missing, invalid or too old."


class PaymentProviderUnavailable(ApplicationError):
    status_code = 502
    code = "payment_provider_unavailable"
    default_detail = "The payment provider could not be reached; nothing was charged."
