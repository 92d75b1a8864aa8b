"""Budgets: a monthly limit on what an organization commits and spends, and alerts when it
crosses a threshold.

"Committed plus spent" for the current month is the money on hold now plus what was charged
from holds since the first of the month. Committing money (a hold, or a hold grown) is what the
limit refuses; a charge only turns committed money into spent money, so it never needs one."""

import datetime
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone

from billing import notices, webhook_events
from billing.errors import BudgetExceeded
from billing.models import Budget, BudgetAlert
from billing.selectors import month_start, spent_since
from computeshare.errors import ValidationFailed
from computeshare.queue import enqueue_after_commit
from notifications import selectors as notification_selectors
from organizations import selectors as organization_selectors
from organizations.models import Organization

MAX_THRESHOLDS = 10


def _clean_thresholds(thresholds: Any) -> list[int]:
    if not isinstance(thresholds, list | tuple):
        raise ValidationFailed(fields={"alert_thresholds": ["A list of per cent values."]})
    cleaned: set[int] = set()
    for value in thresholds:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
            raise ValidationFailed(
                fields={"alert_thresholds": ["Each threshold is a whole per cent, 1 to 100."]}
            )
        cleaned.add(value)
    if len(cleaned) > MAX_THRESHOLDS:
        raise ValidationFailed(
            fields={"alert_thresholds": [f"At most {MAX_THRESHOLDS} thresholds."]}
        )
    return sorted(cleaned)


@transaction.atomic
def budget_set(
    *, organization: Organization, monthly_limit: Decimal | None, alert_thresholds: Any
) -> Budget:
    """Sets the monthly limit (None: no limit) and the alert thresholds. A limit below what is
    already committed and spent is allowed: it refuses new commitments, it takes nothing back."""
    if monthly_limit is not None and (
        monthly_limit < 0 or monthly_limit != monthly_limit.quantize(Decimal("0.01"))
    ):
        raise ValidationFailed(
            fields={"monthly_limit": ["A non-negative amount with at most 2 places."]}
        )
    thresholds = _clean_thresholds(alert_thresholds)
    budget, _ = Budget.objects.select_for_update().get_or_create(
        organization=organization,
        defaults={"monthly_limit": monthly_limit, "alert_thresholds": thresholds},
    )
    budget.monthly_limit = monthly_limit
    budget.alert_thresholds = thresholds
    budget.save(update_fields=["monthly_limit", "alert_thresholds", "updated_at"])
    return budget


def budget_commit(
    *, organization: Organization, held: Decimal, additional: Decimal
) -> list[BudgetAlert]:
    """Admits committing `additional` more money, or refuses with `BudgetExceeded` when it
    would take this month's committed plus spent money past the limit. Once admitted, records
    each threshold the commitment reaches that was not recorded this month, and has the
    admins told after the commit. The caller holds the wallet's locks, so `held` is current:
    no concurrent commitment slips past the limit or records the same threshold."""
    budget = Budget.objects.filter(organization=organization).first()
    if budget is None or budget.monthly_limit is None:
        return []
    period_start = month_start()
    used = held + spent_since(organization, period_start)
    if used + additional > budget.monthly_limit:
        raise BudgetExceeded(
            extra={
                "monthly_limit": str(budget.monthly_limit),
                "committed_and_spent": str(used),
                "requested": str(additional),
                "currency": settings.PLATFORM_CURRENCY,
            }
        )
    return _alerts_record(budget, period_start.date(), used + additional)


def _alerts_record(budget: Budget, period: datetime.date, used: Decimal) -> list[BudgetAlert]:
    limit = budget.monthly_limit
    if not limit or not budget.alert_thresholds:
        return []
    reached = [t for t in budget.alert_thresholds if used * 100 >= limit * t]
    if not reached:
        return []
    recorded = set(
        BudgetAlert.objects.filter(
            organization_id=budget.organization_id, period=period, threshold__in=reached
        ).values_list("threshold", flat=True)
    )
    alerts = [
        BudgetAlert.objects.create(
            organization_id=budget.organization_id,
            period=period,
            threshold=threshold,
            monthly_limit=limit,
            committed_and_spent=used,
        )
        for threshold in reached
        if threshold not in recorded
    ]
    if alerts:
        webhook_events.budget_thresholds_crossed(alerts)
        notices.budget_thresholds_crossed(alerts)
        ids = [alert.pk for alert in alerts]
        enqueue_after_commit(
            "billing.tasks.budget_alert_notify_task",
            ids,
            recovered_by="the periodic mail of unmailed alerts",
        )
    return alerts


def budget_alert_notify(*, alert_ids: Sequence[int]) -> int:
    """Mails the organization's admins about alerts not yet mailed. Returns how many mails
    went. An alert is marked before its mail goes, in the same transaction as the row lock, so
    that two workers never both send it; a failed send rolls the mark back for the retry."""
    sent = 0
    for alert_id in alert_ids:
        with transaction.atomic():
            alert = (
                BudgetAlert.objects.select_for_update()
                .select_related("organization")
                .filter(pk=alert_id, notified_at__isnull=True)
                .first()
            )
            if alert is None:
                continue
            recipients = notification_selectors.addresses_wanting_email(
                organization_selectors.organization_admin_emails(alert.organization),
                "budget_threshold",
            )
            alert.notified_at = timezone.now()
            alert.save(update_fields=["notified_at", "updated_at"])
            if recipients:
                context = {
                    "alert": alert,
                    "organization": alert.organization,
                    "currency": settings.PLATFORM_CURRENCY,
                    "site_url": settings.SITE_URL,
                }
                send_mail(
                    subject=(
                        f"{alert.organization.name} has reached {alert.threshold}% "
                        f"of its budget for {alert.period:%B %Y}"
                    ),
                    message=render_to_string("billing/email/budget_alert.txt", context),
                    from_email=None,
                    recipient_list=recipients,
                )
                sent += 1
    return sent


@transaction.atomic
def budget_alert_dismiss(*, organization: Organization, alert_uuid: uuid.UUID) -> int:
    return BudgetAlert.objects.filter(
        organization=organization, uuid=alert_uuid, dismissed_at__isnull=True
    ).update(dismissed_at=timezone.now())
