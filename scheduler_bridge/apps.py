from django.apps import AppConfig


class SchedulerBridgeConfig(AppConfig):
    name = "scheduler_bridge"
    verbose_name = "Scheduler bridge"
    default_auto_field = "django.db.models.BigAutoField"
