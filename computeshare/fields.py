"""A model field that keeps secrets (SSH private keys) encrypted at rest.

Fernet (AES-128-CBC with HMAC-SHA256) from `cryptography`, keyed by FIELD_ENCRYPTION_KEY. Several
comma-separated keys rotate: the first encrypts, every key decrypts."""

import json
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models


@lru_cache(maxsize=4)
def _fernet_for(keys: str) -> MultiFernet:
    try:
        return MultiFernet([Fernet(key.strip().encode()) for key in keys.split(",") if key.strip()])
    except (ValueError, TypeError) as error:
        raise ImproperlyConfigured(
            "FIELD_ENCRYPTION_KEY must be one or more comma-separated Fernet keys "
            "(32 url-safe base64-encoded bytes each)."
        ) from error


def fernet() -> MultiFernet:
    return _fernet_for(settings.FIELD_ENCRYPTION_KEY)


class EncryptedTextField(models.TextField):  # type: ignore[type-arg]
    """Stores the Fernet token; Python code only ever sees the plain text."""

    description = "Text encrypted at rest"

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return fernet().encrypt(str(value).encode()).decode()

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        if value is None or value == "":
            return value
        try:
            return fernet().decrypt(value.encode()).decode()
        except InvalidToken as error:
            raise ImproperlyConfigured(
                f"{self.model.__name__}.{self.name} cannot be decrypted with FIELD_ENCRYPTION_KEY."
            ) from error

    def get_lookup(self, lookup_name: str) -> Any:
        # The stored text is randomised per write: comparing it with anything is meaningless.
        if lookup_name not in ("isnull",):
            return None
        return super().get_lookup(lookup_name)


class EncryptedJSONField(EncryptedTextField):
    """A JSON object (a job's secret variables) stored as one Fernet token; Python code sees the
    object. An empty object is stored as the empty text, so rows without secrets hold no token.
    Like its base it cannot be compared in queries (only `isnull`)."""

    description = "JSON object encrypted at rest"
    # What django-stubs types the attribute as (its base says text).
    _pyi_private_set_type: dict[str, str] | str  # type: ignore[assignment]
    _pyi_private_get_type: dict[str, str]  # type: ignore[assignment]

    def get_prep_value(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):
            value = json.dumps(value, sort_keys=True) if value else ""
        return super().get_prep_value(value)

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        text = super().from_db_value(value, expression, connection)
        if text is None:
            return None
        return json.loads(text) if text else {}

    def value_to_string(self, obj: models.Model) -> str:
        # What `dumpdata` writes: never the plain text of a secret.
        return "" if not self.value_from_object(obj) else "(encrypted)"
