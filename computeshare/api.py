"""API plumbing shared by every app: the error shape, pagination and Idempotency-Key replays."""

import functools
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.paginator import EmptyPage, Page, Paginator
from django.db import IntegrityError, transaction
from django.http import Http404, HttpRequest, JsonResponse
from django.utils.crypto import salted_hmac
from drf_spectacular.utils import inline_serializer
from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import PageNumberPagination
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from computeshare.authentication import request_user
from computeshare.errors import (
    ApplicationError,
    IdempotencyKeyReused,
    NotFound,
    PermissionDenied,
    Throttled,
    ValidationFailed,
)
from computeshare.models import IdempotencyRecord
from computeshare.numbers import whole_number

logger = logging.getLogger(__name__)


class Pagination(PageNumberPagination):
    """`?page=` and `?page_size=` (1 to 200, default 50). A page size out of range or not a
    number is refused with 400 rather than silently replaced."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.getlist(self.page_size_query_param)
        if not raw:
            return self.page_size
        size = whole_number(raw[0]) if len(raw) == 1 else None
        if size is None or not 1 <= size <= self.max_page_size:
            raise ValidationFailed(
                fields={
                    self.page_size_query_param: [
                        f"A whole number from 1 to {self.max_page_size}, given once."
                    ]
                }
            )
        return size


class ContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, with its most common case answered without parsing the header: a
    request that accepts anything (no Accept header, or `*/*`) and names no format gets the
    first renderer when that is JSON, which DRF picks then too (a tenth of a millisecond of
    every request, a few hundredths of the offers list's CPU)."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderers = list(renderers)
        first = renderers[0]
        if (
            first.media_type == "application/json"
            and format_suffix is None
            and request.headers.get("accept", "*/*") == "*/*"
            and self.settings.URL_FORMAT_OVERRIDE not in request.query_params
        ):
            return first, first.media_type
        chosen: tuple[BaseRenderer, str] = super().select_renderer(
            request, renderers, format_suffix
        )
        return chosen


class _Counts:
    """Counts of lists by key, each reused for a few seconds, in this process only (a dict, no
    round trip), the most recent 512."""

    def __init__(self, size: int = 512) -> None:
        self._size = size
        self._entries: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, seconds: float) -> int | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or time.monotonic() - entry[0] >= seconds:
                return None
            return entry[1]

    def put(self, key: str, count: int) -> None:
        with self._lock:
            self._entries[key] = (time.monotonic(), count)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


LIST_COUNTS = _Counts()


# Past any list's length, and within PostgreSQL's bigint OFFSET.
LARGEST_OFFSET = 2**62


class LookAheadPaginator(Paginator):
    """Reads one row past the page, so that whether a next page exists is always exact and a
    page that ends the list knows the list's count without counting. Only a page with more
    after it needs the count: that one is reused for `OFFER_LIST_COUNT_CACHE_SECONDS` under
    `count_key` (the list's filters), so a busy list is not counted on every request; it may
    then be that many seconds old, never less than the rows seen."""

    def __init__(self, object_list: Any, per_page: int, *, count_key: str) -> None:
        super().__init__(object_list, per_page)
        self.count_key = count_key

    def page(self, number: Any) -> Page:
        try:
            if isinstance(number, float) and not number.is_integer():
                raise ValueError
            number = int(number)
        except (TypeError, ValueError):
            return super().page(number)  # Django's own refusal: PageNotAnInteger
        if number < 1:
            raise EmptyPage(self.error_messages["min_page"])
        bottom = (number - 1) * self.per_page
        if bottom > LARGEST_OFFSET:
            # PostgreSQL's OFFSET is a bigint: a page this far cannot hold a row.
            raise EmptyPage(self.error_messages["no_results"])
        rows = list(self.object_list[bottom : bottom + self.per_page + 1])
        more = len(rows) > self.per_page
        rows = rows[: self.per_page]
        if not rows and number > 1:
            raise EmptyPage(self.error_messages["no_results"])
        # With more after the page: at least the rows seen and one; else exactly the rows seen.
        count = max(self._recent_count(), bottom + len(rows) + 1) if more else bottom + len(rows)
        # `count` and `num_pages` are cached properties: set before anything reads them.
        self.__dict__["count"] = count
        self.__dict__.pop("num_pages", None)
        return Page(rows, number, self)

    def _recent_count(self) -> int:
        seconds = settings.OFFER_LIST_COUNT_CACHE_SECONDS
        count = LIST_COUNTS.get(self.count_key, seconds) if seconds > 0 else None
        if count is None:
            count = cast(Any, self.object_list).count()
            LIST_COUNTS.put(self.count_key, count)
        return count


def validated(serializer_class: type[serializers.BaseSerializer], data: Any) -> dict[str, Any]:
    """The serializer's validated data, or 400 `invalid` with every field's messages."""
    payload = serializer_class(data=data)
    payload.is_valid(raise_exception=True)
    return dict(payload.validated_data)


def paginated_response(
    request: Request,
    view: Any,
    queryset: Any,
    serializer_class: type[serializers.BaseSerializer],
    context: dict[str, Any] | None = None,
    count_key: str | None = None,
) -> Response:
    """One page of `queryset`, serialized, in the shape `Pagination` renders. With `count_key`
    (what identifies the list, such as its filters), the page comes from `LookAheadPaginator`:
    the count of a busy list is reused for a few seconds."""
    paginator = Pagination()
    if count_key is not None:
        paginator.django_paginator_class = functools.partial(  # type: ignore[assignment]
            LookAheadPaginator, count_key=count_key
        )
    page: Any = paginator.paginate_queryset(queryset, request, view=view)
    data = serializer_class(page, many=True, context=context or {}).data
    return paginator.get_paginated_response(data)


class ErrorSerializer(serializers.Serializer):
    """The one shape of every error answer (for the OpenAPI schema)."""

    detail = serializers.CharField()
    code = serializers.CharField()
    extra = serializers.DictField()


def paginated(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    """The schema of a page of `serializer_class` as `Pagination` renders it."""
    name = serializer_class.__name__.removesuffix("Serializer")
    return inline_serializer(
        name=f"Paginated{name}List",
        fields={
            "count": serializers.IntegerField(),
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": serializer_class(many=True),
        },
    )


def _error_body(detail: str, code: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"detail": detail, "code": code, "extra": extra or {}}


def _field_messages(detail: Any) -> dict[str, list[str]]:
    """Flattens DRF's nested validation detail into `{field: [messages]}`."""
    if isinstance(detail, dict):
        fields: dict[str, list[str]] = {}
        for name, value in detail.items():
            nested = _field_messages(value)
            if set(nested) == {"non_field_errors"}:
                fields[str(name)] = nested["non_field_errors"]
            else:
                for sub, messages in nested.items():
                    key = str(name) if sub == "non_field_errors" else f"{name}.{sub}"
                    fields.setdefault(key, []).extend(messages)
        return fields
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return {"non_field_errors": [str(item) for item in detail]}
        merged: dict[str, list[str]] = {}
        for index, item in enumerate(detail):
            for sub, messages in _field_messages(item).items():
                key = str(index) if sub == "non_field_errors" else f"{index}.{sub}"
                merged.setdefault(key, []).extend(messages)
        return merged
    return {"non_field_errors": [str(detail)]}


# The codes of the errors DRF itself raises (docs/api.md lists them with the platform's own).
DRF_ERROR_CODES: dict[type[drf_exceptions.APIException], str] = {
    drf_exceptions.ParseError: "malformed_request",
    drf_exceptions.NotAuthenticated: "not_authenticated",
    drf_exceptions.AuthenticationFailed: "authentication_failed",
    drf_exceptions.PermissionDenied: "permission_denied",
    drf_exceptions.NotFound: "not_found",
    drf_exceptions.MethodNotAllowed: "method_not_allowed",
    drf_exceptions.NotAcceptable: "not_acceptable",
    drf_exceptions.UnsupportedMediaType: "unsupported_media_type",
    drf_exceptions.Throttled: "throttled",
}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Renders every error as `{"detail", "code", "extra"}`; anything else (a real bug) is left
    to Django so that it is logged and answered with a 500."""
    if isinstance(exc, DjangoValidationError):
        exc = ValidationFailed(fields={"non_field_errors": list(exc.messages)})
    elif isinstance(exc, Http404):
        exc = NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = PermissionDenied()

    if isinstance(exc, ApplicationError):
        retry_after = (
            {"Retry-After": str(exc.retry_after_seconds)} if isinstance(exc, Throttled) else None
        )
        return Response(
            _error_body(exc.detail, exc.code, exc.extra),
            status=exc.status_code,
            headers=retry_after,
        )

    if isinstance(exc, drf_exceptions.ValidationError):
        fields = _field_messages(exc.detail)
        return Response(
            _error_body("The input is not valid.", "invalid", {"fields": fields}), status=400
        )

    if isinstance(exc, drf_exceptions.APIException):
        code = next(
            (code for cls, code in DRF_ERROR_CODES.items() if isinstance(exc, cls)),
            str(exc.default_code),
        )
        extra: dict[str, Any] = {}
        headers: dict[str, str] = {}
        wait = getattr(exc, "wait", None)
        if isinstance(exc, drf_exceptions.Throttled) and wait is not None:
            extra["retry_after_seconds"] = int(wait)
            headers["Retry-After"] = str(int(wait))
        if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
            # DRF answers 403 here when no authenticator names a scheme; the token one does.
            headers["WWW-Authenticate"] = "Token"
            # The token authenticator names why a key failed (`token_expired`, `token_revoked`).
            reason = exc.get_codes()
            code = reason if isinstance(reason, str) else code
            return Response(_error_body(str(exc.detail), code), status=401, headers=headers)
        return Response(
            _error_body(str(exc.detail), code, extra), status=exc.status_code, headers=headers
        )
    return None


def json_not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(_error_body("Not found.", "not_found"), status=404)


def json_server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        _error_body("The server failed to answer this request.", "server_error"), status=500
    )


_FINGERPRINT_SALT = "computeshare.api.idempotency-fingerprint"


def _fingerprint_value(value: Any) -> str:
    """How a value JSON cannot write enters the fingerprint: an uploaded file as its name as
    sent and its size (not its content, which would be read again whole), anything else as
    text."""
    size = getattr(value, "size", None)
    if size is not None and hasattr(value, "chunks"):
        return f"file:{getattr(value, 'sent_name', None) or value.name}:{size}"
    return str(value)


def _request_fingerprint(request: Request) -> str:
    body = request.data if isinstance(request.data, dict | list) else {}
    if hasattr(body, "lists"):  # a form: every value of every field, files among them
        body = {key: values for key, values in body.lists()}
    canonical = json.dumps(
        {"method": request.method, "path": request.path, "body": body},
        sort_keys=True,
        default=_fingerprint_value,
    )
    # Keyed, not a bare hash: the body may carry a job's secret variables, and a plain digest
    # of a short secret could be searched for by whoever reads the table.
    return salted_hmac(_FINGERPRINT_SALT, canonical, algorithm="sha256").hexdigest()


def _replay(record: IdempotencyRecord, fingerprint: str) -> Response:
    if record.request_fingerprint != fingerprint:
        raise IdempotencyKeyReused(extra={"key": record.key})
    return Response(record.response_body, status=record.response_status)


def idempotent_replay(request: Request) -> Response | None:
    """The stored answer to a request whose `Idempotency-Key` has been answered already (or
    409 `idempotency_key_reused` for another body under it), None otherwise: for a view that
    must do work outside `idempotent`'s transaction before it (a purchase's reservation), and
    should not do it again for a retry."""
    key = request.headers.get("Idempotency-Key")
    if not key or len(key) > 255:
        return None
    record = IdempotencyRecord.objects.filter(user=request_user(request), key=key).first()
    if record is None or record.response_status == 0:
        return None
    return _replay(record, _request_fingerprint(request))


def idempotent(request: Request, create: Callable[[], Response]) -> Response:
    """Runs `create` at most once per (user, Idempotency-Key).

    The key is claimed first, by inserting its record at the start of the transaction: a
    concurrent request with the same key waits on the unique index until the first commits (and
    then replays its answer) or rolls back (and then runs itself). The answer is stored in the
    same transaction as whatever `create` writes, so a crash leaves both or neither."""
    key = request.headers.get("Idempotency-Key")
    if not key:
        return create()
    if len(key) > 255:
        raise ValidationFailed(fields={"Idempotency-Key": ["At most 255 characters."]})
    fingerprint = _request_fingerprint(request)
    user = request_user(request)  # the views that call this require authentication
    record = IdempotencyRecord.objects.filter(user=user, key=key).first()
    if record is not None:
        return _replay(record, fingerprint)
    with transaction.atomic():
        try:
            with transaction.atomic():
                record = IdempotencyRecord.objects.create(
                    user=user,
                    key=key,
                    request_fingerprint=fingerprint,
                    response_status=0,
                    response_body={},
                )
        except IntegrityError:
            record = IdempotencyRecord.objects.get(user=user, key=key)
            return _replay(record, fingerprint)
        response = create()
        record.response_status = response.status_code
        record.response_body = json.loads(JSONRenderer().render(response.data) or b"null")
        record.save(update_fields=["response_status", "response_body"])
    return response
