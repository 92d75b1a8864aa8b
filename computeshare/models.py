import uuid

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models


class BaseModel(models.Model):
    """Every model carries a public `uuid` (shown by the API as `id`; the integer key never
    leaves the server) and its creation and update times."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class User(BaseModel, AbstractUser):
    """The platform's user; its own model from the first migration so that it can grow."""

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"

    def __str__(self) -> str:
        return self.username


class IdempotencyRecord(models.Model):
    """The first answer to a create request that carried an `Idempotency-Key` header.

    Stored in the same transaction as what the request created, so either both exist or
    neither does; a replay returns the stored answer."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    key = models.CharField(max_length=255)
    request_fingerprint = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_unique_user_key"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key}"
