from django.apps import AppConfig


class SchedulerBridgeConfig(AppConfig):
    name = "scheduler_bridge"
    verbose_name = "Scheduler bridge"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduler_bridge import signals  # noqa: F401  (connects the receivers)
