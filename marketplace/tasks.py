from celery import shared_task

from marketplace import services


@shared_task(
    autoretry_for=(OSError,),
    retry_backoff=True,
    max_retries=5,
    time_limit=60,
    soft_time_limit=45,
)
def membership_notify_task(membership_id: int) -> bool:
    return services.membership_notify(membership_id=membership_id)
