"""Celery tasks of notifications: the mails after the commit that made them, and the sweep."""

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
