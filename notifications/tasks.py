"""Celery tasks of notifications: the mails after the commit that made them, the notice batches
recorded after their change's commit, and the sweeps of both."""

from smtplib import SMTPException

from celery import shared_task

from notifications import selectors, services


@shared_task(
    autoretry_for=(SMTPException, ConnectionError),
    retry_backoff=True,
    max_retries=5,
    time_limit=120,
    soft_time_limit=100,
)
def notification_emails_send_task(notification_ids: list[int]) -> int:
    return services.notification_emails_send(notification_ids)


@shared_task(time_limit=300, soft_time_limit=270)
def notification_emails_due_task() -> int:
    """Mails the notifications whose task was lost (a broker that did not take it)."""
    return services.notification_emails_send(selectors.notification_emails_due())


@shared_task(time_limit=300, soft_time_limit=270)
def notice_batch_record_task(batch_id: int) -> int:
    return services.notice_batch_record(batch_id=batch_id)


@shared_task(time_limit=600, soft_time_limit=570)
def notice_batches_due_task() -> int:
    """Records the notice batches whose task was lost (each once: see notice_batch_record)."""
    return sum(
        services.notice_batch_record(batch_id=batch_id)
        for batch_id in selectors.notice_batches_due()
    )
