import datetime
import logging

from celery import shared_task
from django.conf import settings

from billing import selectors, services

logger = logging.getLogger(__name__)


@shared_task(
    autoretry_for=(OSError,),
    retry_backoff=True,
    max_retries=5,
    time_limit=60,
    soft_time_limit=45,
)
def budget_alert_notify_task(alert_ids: list[int]) -> int:
    return services.budget_alert_notify(alert_ids=alert_ids)


@shared_task(time_limit=120, soft_time_limit=100)
def budget_alerts_unmailed_notify_task() -> int:
    """Periodic: mails the alerts whose mail never went (sent after the commit that recorded
    them, a message the broker may not have taken)."""
    return services.budget_alert_notify(
        alert_ids=selectors.budget_alerts_unmailed(older_than=datetime.timedelta(minutes=2))
    )


@shared_task(time_limit=300, soft_time_limit=240)
def stripe_events_process_task() -> int:
    """Processes stored events that a crash left unprocessed (the webhook view processes each
    event as it arrives; this is the safety net)."""
    return services.stripe_events_process_pending()


@shared_task(time_limit=120, soft_time_limit=100)
def top_ups_expire_task() -> int:
    """Periodic: marks expired the top-ups nobody paid within TOP_UP_PENDING_EXPIRY_MINUTES."""
    return services.top_ups_expire_abandoned(
        older_than=datetime.timedelta(minutes=settings.TOP_UP_PENDING_EXPIRY_MINUTES)
    )


@shared_task(time_limit=300, soft_time_limit=240)
def payouts_pending_send_task() -> int:
    """Periodic: sends again the transfers of payouts that Stripe did not answer (the same
    idempotency key, so a transfer that did go through is not made twice)."""
    return services.payouts_pending_send(older_than=datetime.timedelta(minutes=5))


@shared_task(time_limit=600, soft_time_limit=540)
def ledger_verify_task() -> int:
    """Checks the ledger's invariants and logs every breach as an error for the operators."""
    problems = selectors.ledger_verify()
    for problem in problems:
        logger.error("Ledger invariant broken: %s", problem)
    return len(problems)


@shared_task(time_limit=300, soft_time_limit=270)
def hold_release_batch_apply_task(batch_id: int) -> int:
    """Releases a batch of holds after the commit that decided it (an auction's losing bids)."""
    return services.hold_release_batch_apply(batch_id=batch_id)


@shared_task(time_limit=300, soft_time_limit=270)
def hold_release_batches_due_task() -> int:
    """Periodic: releases the batches whose task was lost (each once: see
    hold_release_batch_apply)."""
    return sum(
        services.hold_release_batch_apply(batch_id=batch_id)
        for batch_id in selectors.hold_release_batches_due()
    )
