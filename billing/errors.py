"""The errors of money. Codes are part of the public contract (docs/api.md, Error codes)."""

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


class OutstandingDebt(PaymentRequired):
    code = "outstanding_debt"
    default_detail = (
        "The organization owes the platform money (a refund or a lost dispute its wallet could "
        "not cover); top up the wallet to repay it before committing more."
    )


class AmountNotPayable(Conflict):
    code = "amount_not_payable"
    default_detail = "That is more than the earnings payable now, or less than the minimum payout."


class PayoutsNotEnabled(Conflict):
    code = "payouts_not_enabled"
    default_detail = "Connect a Stripe account and finish its onboarding before paying out."


class TopUpNotRefundable(Conflict):
    code = "top_up_not_refundable"
    default_detail = "Only a succeeded top-up can be refunded, up to what is not refunded yet."


class RefundPending(Conflict):
    code = "refund_pending"
    default_detail = "A refund of this top-up is still waiting for Stripe's answer; ask again."


class PaymentProviderRefused(ApplicationError):
    status_code = 502
    code = "payment_provider_refused"
    default_detail = "The payment provider refused the request; nothing was done."
