import uuid
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models
from django.utils import timezone


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


class ApiToken(BaseModel):
    """A named API key of a user, kept only as a digest: the key itself is shown once, when it
    is made, and never stored.

    A key is `cs_`, 12 random letters and digits, then 43 more (256 bits). Its first
    `LOOKUP_LENGTH` characters, stored as `prefix`, find the row (and name the token in lists);
    the SHA-256 of the whole key must then equal `digest`, compared in constant time. Keys from
    before these tokens (40 hexadecimal characters, 160 random bits) work the same way, their
    first 15 characters as the prefix.

    A plain SHA-256, without salt or stretching, is the right digest for a random secret of this
    size: nobody can precompute a table of random 256-bit keys or guess one, so a slow password
    hash would only add its delay to every request."""

    LOOKUP_LENGTH = 15

    class Status(models.TextChoices):
        """Derived from the times below, never stored."""

        ACTIVE = "active"
        EXPIRED = "expired"
        REVOKED = "revoked"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=LOOKUP_LENGTH, unique=True)
    digest = models.CharField(max_length=64)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(expires_at__isnull=True)
                | models.Q(expires_at__gt=models.F("created_at")),
                name="api_token_expires_after_creation",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def is_expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    @property
    def status(self) -> "ApiToken.Status":
        if self.is_revoked:
            return self.Status.REVOKED
        if self.is_expired(timezone.now()):
            return self.Status.EXPIRED
        return self.Status.ACTIVE
