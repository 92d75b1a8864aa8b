"""The Celery tasks of organizations: they take ids and call one service."""

from celery import shared_task

from organizations import services


@shared_task(
    autoretry_for=(OSError,),
    retry_backoff=True,
    max_retries=5,
    time_limit=60,
    soft_time_limit=45,
)
def invitation_notify_task(invitation_id: int) -> bool:
    return services.invitation_notify(invitation_id=invitation_id)


@shared_task(
    autoretry_for=(OSError,),
    retry_backoff=True,
    max_retries=5,
    time_limit=60,
    soft_time_limit=45,
)
def login_unlock_mail_task(user_id: int) -> bool:
    return services.login_unlock_mail(user_id=user_id)
