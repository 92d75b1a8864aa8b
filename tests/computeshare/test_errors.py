"""The one error shape, for errors raised by services and by DRF itself."""

import pytest
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions as drf_exceptions

from computeshare.api import exception_handler
from computeshare.errors import Conflict, PaymentRequired, ValidationFailed


def render(exception: Exception) -> tuple[int, dict, dict]:
    response = exception_handler(exception, {})
    assert response is not None
    return response.status_code, response.data, dict(response.headers)


def test_application_errors_keep_their_status_code_and_extra():
    class OfferNotOpen(Conflict):
        code = "offer_not_open"
        default_detail = "The offer is not open."

    assert render(OfferNotOpen(extra={"status": "cleared"}))[:2] == (
        409,
        {
            "detail": "The offer is not open.",
            "code": "offer_not_open",
            "extra": {"status": "cleared"},
        },
    )
    assert render(PaymentRequired())[0] == 402


def test_validation_failed_lists_fields():
    status, body, _ = render(ValidationFailed(fields={"name": ["Required."]}))

    assert status == 400
    assert body == {
        "detail": "The input is not valid.",
        "code": "invalid",
        "extra": {"fields": {"name": ["Required."]}},
    }


def test_drf_validation_errors_are_flattened_per_field():
    error = drf_exceptions.ValidationError(
        {
            "name": ["Too long."],
            "environment": {"1X": ["Not an identifier."]},
            "non_field_errors": ["Window ends before it starts."],
        }
    )

    status, body, _ = render(error)

    assert status == 400
    assert body["code"] == "invalid"
    assert body["extra"]["fields"] == {
        "name": ["Too long."],
        "environment.1X": ["Not an identifier."],
        "non_field_errors": ["Window ends before it starts."],
    }


@pytest.mark.parametrize(
    ("exception", "status", "code"),
    [
        (drf_exceptions.ParseError(), 400, "malformed_request"),
        (drf_exceptions.NotAuthenticated(), 401, "not_authenticated"),
        (drf_exceptions.AuthenticationFailed(), 401, "authentication_failed"),
        (drf_exceptions.PermissionDenied(), 403, "permission_denied"),
        (drf_exceptions.MethodNotAllowed("PATCH"), 405, "method_not_allowed"),
        (drf_exceptions.UnsupportedMediaType("text/csv"), 415, "unsupported_media_type"),
        (Http404(), 404, "not_found"),
        (DjangoValidationError("bad"), 400, "invalid"),
    ],
)
def test_framework_errors_get_stable_codes(exception, status, code):
    rendered_status, body, _ = render(exception)

    assert rendered_status == status
    assert body["code"] == code
    assert set(body) == {"detail", "code", "extra"}


def test_throttled_says_when_to_retry():
    status, body, headers = render(drf_exceptions.Throttled(wait=12))

    assert status == 429
    assert body["code"] == "throttled"
    assert body["extra"] == {"retry_after_seconds": 12}
    assert headers["Retry-After"] == "12"


def test_unexpected_exceptions_are_left_to_django():
    assert exception_handler(RuntimeError("bug"), {}) is None


def test_field_errors_collect_every_problem_and_raise_them_together():
    from computeshare.errors import FieldErrors, ValidationFailed

    errors = FieldErrors()
    errors.raise_if_any()  # nothing collected, nothing raised
    assert not errors

    errors.add("quantity", "At least 1.")
    errors.add("quantity", "A whole number of units.")
    errors.add("window_end", "After the start.")
    assert errors and "quantity" in errors and "price" not in errors

    with pytest.raises(ValidationFailed) as raised:
        errors.raise_if_any("Check the offer.")
    assert raised.value.detail == "Check the offer."
    assert raised.value.extra == {
        "fields": {
            "quantity": ["At least 1.", "A whole number of units."],
            "window_end": ["After the start."],
        }
    }
