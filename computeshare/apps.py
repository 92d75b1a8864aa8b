from django.apps import AppConfig


class ComputeshareConfig(AppConfig):
    name = "computeshare"
    verbose_name = "ComputeShare platform"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from computeshare import signals  # noqa: F401  (connects the receivers)
