from django.apps import AppConfig


class ComputeshareConfig(AppConfig):
    name = "computeshare"
    verbose_name = "ComputeShare platform"
    default_auto_field = "django.db.models.BigAutoField"
