"""The webhook events of billing (top-ups, budget thresholds, payouts), recorded in the caller's
transaction through the webhooks app's one entry point."""

from collections.abc import Sequence

from django.conf import settings

from billing.models import BudgetAlert, Payout, TopUp
from webhooks.services import Event, event_record, events_record


def top_up_ended(top_up: TopUp) -> None:
    """`top_up.succeeded` or `top_up.failed`: a failed top-up can still succeed later (another
    card), so each is recorded every time it happens, in order for the top-up."""
    event_record(
        organization_id=top_up.organization_id,
        type=f"top_up.{top_up.status}",
        object_key=f"top_up:{top_up.uuid}",
        data={
            "id": str(top_up.uuid),
            "amount": str(top_up.amount),
            "currency": top_up.currency,
            "status": top_up.status,
            "failure_reason": top_up.failure_reason,
        },
    )


def budget_thresholds_crossed(alerts: Sequence[BudgetAlert]) -> None:
    """`budget.threshold`, once per organization, month and threshold (as the alert rows)."""
    events_record(
        [
            Event(
                organization_id=alert.organization_id,
                type="budget.threshold",
                object_key=f"budget:{alert.period:%Y-%m}:{alert.threshold}",
                data={
                    "threshold": alert.threshold,
                    "period": f"{alert.period:%Y-%m}",
                    "monthly_limit": str(alert.monthly_limit),
                    "committed_and_spent": str(alert.committed_and_spent),
                    "currency": settings.PLATFORM_CURRENCY,
                },
            )
            for alert in alerts
        ]
    )


def payout_paid(payout: Payout) -> None:
    """`payout.paid`, once per payout: Stripe made the transfer to the owner's account."""
    event_record(
        organization_id=payout.organization_id,
        type="payout.paid",
        object_key=f"payout:{payout.uuid}",
        once=True,
        data={
            "id": str(payout.uuid),
            "amount": str(payout.amount),
            "currency": payout.currency,
            "stripe_transfer": payout.stripe_transfer,
            "paid_at": payout.paid_at,
        },
    )
