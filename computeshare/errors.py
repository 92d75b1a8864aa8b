"""The exception hierarchy of the platform. Services raise these; the API's exception handler
renders them as `{"detail", "code", "extra"}` with the status each class names, and the HTML
views show `detail` to the user. `code` values are part of the public contract."""

from typing import Any


class ApplicationError(Exception):
    status_code = 400
    code = "error"
    default_detail = "The request could not be completed."

    def __init__(self, detail: str | None = None, *, extra: dict[str, Any] | None = None) -> None:
        self.detail = detail or self.default_detail
        self.extra = extra or {}
        super().__init__(self.detail)


class ValidationFailed(ApplicationError):
    """Input that cannot be accepted. `fields` maps each field to its messages."""

    code = "invalid"
    default_detail = "The input is not valid."

    def __init__(
        self,
        detail: str | None = None,
        *,
        fields: dict[str, list[str]] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        extra = dict(extra or {})
        extra["fields"] = fields or {}
        super().__init__(detail, extra=extra)


class FieldErrors:
    """Collects what is wrong with each field of an input, so a form or request is answered
    with every problem at once: `add` as each check finds one, then `raise_if_any`.

        errors = FieldErrors()
        if quantity < 1:
            errors.add("quantity", "At least 1.")
        errors.raise_if_any()  # ValidationFailed(fields={"quantity": ["At least 1."]})
    """

    def __init__(self) -> None:
        self.fields: dict[str, list[str]] = {}

    def add(self, field: str, message: str) -> None:
        self.fields.setdefault(field, []).append(message)

    def __bool__(self) -> bool:
        return bool(self.fields)

    def __contains__(self, field: str) -> bool:
        return field in self.fields

    def raise_if_any(self, detail: str | None = None) -> None:
        if self.fields:
            raise ValidationFailed(detail, fields=self.fields)


class InvalidCredentials(ApplicationError):
    code = "invalid_credentials"
    default_detail = "Unable to log in with the username and password given."


class AuthenticationFailed(ApplicationError):
    """The credentials sent with a request do not sign anyone in (401)."""

    status_code = 401
    code = "authentication_failed"
    default_detail = "Invalid token."


class TokenExpired(AuthenticationFailed):
    code = "token_expired"
    default_detail = "This token has expired."


class TokenRevoked(AuthenticationFailed):
    code = "token_revoked"
    default_detail = "This token was revoked."


class PermissionDenied(ApplicationError):
    status_code = 403
    code = "permission_denied"
    default_detail = "Your role does not allow this."


class NotFound(ApplicationError):
    status_code = 404
    code = "not_found"
    default_detail = "Not found."


class Conflict(ApplicationError):
    """The object's current state does not allow the request."""

    status_code = 409
    code = "conflict"
    default_detail = "The request conflicts with the current state."


class AlreadyMember(Conflict):
    code = "already_member"
    default_detail = "This user is already a member of the organization."


class TokenLimitReached(Conflict):
    code = "token_limit_reached"
    default_detail = "You have as many live API tokens as one may have; revoke one first."


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"
    default_detail = "This Idempotency-Key was already used with a different request."


class PaymentRequired(ApplicationError):
    """Not enough money, budget or allocation."""

    status_code = 402
    code = "payment_required"
    default_detail = "Not enough funds."


class AddressNotAllowed(ValidationFailed):
    """A host the user gave resolves to an address the platform never connects to (loopback,
    the private network, the cloud's metadata service...: computeshare/outbound.py)."""

    code = "address_not_allowed"
    default_detail = (
        "This host resolves to an address the platform does not connect to: a loopback, "
        "private, link-local or otherwise reserved address. Give the host's public name or "
        "address."
    )


class Throttled(ApplicationError):
    """Too many requests of one kind in a period; `retry_after_seconds` says when to try
    again (the API also sends it as `Retry-After`)."""

    status_code = 429
    code = "throttled"
    default_detail = "Too many requests: try again later."

    def __init__(self, detail: str | None = None, *, retry_after_seconds: int) -> None:
        self.retry_after_seconds = max(1, int(retry_after_seconds))
        super().__init__(detail, extra={"retry_after_seconds": self.retry_after_seconds})
