"""Celery tasks of the webhooks: a batch sent after the commit that made it, and the sweep."""

from celery import shared_task

from hpc.batches import batched
from webhooks import services


@shared_task(time_limit=600, soft_time_limit=570)
def webhook_deliveries_send_task(delivery_ids: list[int]) -> dict[str, int]:
    return services.deliveries_send(delivery_ids)


@shared_task(time_limit=600, soft_time_limit=570)
def webhook_deliveries_due_task() -> int:
    """Sends every due delivery in batches to the workers (retries, lost wake-ups)."""
    due = services.deliveries_due()
    for batch in batched(due, services.TASK_BATCH):
        webhook_deliveries_send_task.delay(batch)
    return len(due)
