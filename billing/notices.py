"""Billing's notifications (top-ups, budget thresholds) to the organization's admins, recorded
in the caller's transaction through the notifications app's one entry point."""

from collections.abc import Sequence

from django.urls import reverse

from billing.models import BudgetAlert, TopUp
from notifications.services import NotificationEvent, money_text, notifications_record


def top_up_ended(top_up: TopUp) -> None:
    """`top_up_succeeded` or `top_up_failed`, once per top-up and outcome."""
    succeeded = top_up.status == TopUp.Status.SUCCEEDED
    amount = money_text(top_up.amount)
    notifications_record(
        [
            NotificationEvent(
                kind="top_up_succeeded" if succeeded else "top_up_failed",
                key=f"top_up_{top_up.status}:top_up:{top_up.uuid}",
                title=f"Top-up of {amount} succeeded"
                if succeeded
                else f"Top-up of {amount} failed",
                body="The wallet is credited."
                if succeeded
                else f"{top_up.failure_reason or 'The payment failed.'} Nothing was charged.",
                link=reverse("organization-money", args=[top_up.organization.uuid]),
                organization_id=top_up.organization_id,
                admins_only=True,
            )
        ]
    )


def budget_thresholds_crossed(alerts: Sequence[BudgetAlert]) -> None:
    """`budget_threshold` per alert (once per organization, month and threshold, as the alert
    rows); the mail is billing's own alert mail, which honours the mail preference."""
    notifications_record(
        [
            NotificationEvent(
                kind="budget_threshold",
                key=f"budget_threshold:{alert.organization_id}:{alert.period:%Y-%m}:{alert.threshold}",
                title=f"{alert.threshold}% of the budget for {alert.period:%B %Y} is reached",
                body=f"{money_text(alert.committed_and_spent)} of "
                f"{money_text(alert.monthly_limit)} spent or committed.",
                link=reverse("organization-money", args=[alert.organization.uuid]),
                organization_id=alert.organization_id,
                admins_only=True,
                is_mailed_here=False,
            )
            for alert in alerts
        ]
    )
