"""The public REST API (/api/v1/) over httpx, and nothing else of the server.

Reads (GET) are retried with backoff on time-outs, dropped connections and 429/502/503/504,
since repeating them changes nothing. Creates are retried only when they carry an
Idempotency-Key: the server answers a repeated key with the first answer and creates nothing
new, so a submit whose answer was lost is never submitted twice."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from computeshare_cli import __version__
from computeshare_cli.errors import CliError, ExitCode, api_error

API_PREFIX = "/api/v1"
RETRIED_STATUSES = {429, 502, 503, 504}
MAX_PAGE_SIZE = 200


class ApiClient:
    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.retries = retries
        self.backoff = backoff
        headers = {"User-Agent": f"computeshare-cli/{__version__}", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Token {token}"
        # trust_env=False: the server is named explicitly; an HTTP(S)_PROXY meant for the
        # internet must not carry the token to a proxy.
        self.http = httpx.Client(
            base_url=self.base_url + API_PREFIX,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            trust_env=False,
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- requests ------------------------------------------------------------------------------

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        response = self._send("GET", path, retried=True, params=_clean(params))
        return _json(response)

    def get_text(self, path: str, params: dict[str, Any] | None = None) -> str:
        response = self._send(
            "GET", path, retried=True, params=_clean(params), headers={"Accept": "text/plain"}
        )
        return response.text

    def post(
        self,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Any:
        """POSTs `body` as JSON. With an `idempotency_key` the request is safe to repeat, and
        is repeated on the failures a GET is."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        response = self._send(
            "POST", path, retried=idempotency_key is not None, json=body or {}, headers=headers
        )
        return _json(response)

    def post_multipart(
        self,
        path: str,
        fields: dict[str, str],
        files: Callable[[], list[tuple[str, tuple[str, Any, str]]]],
        *,
        idempotency_key: str,
        on_attempt: Callable[[], None] | None = None,
    ) -> Any:
        """POSTs `fields` and the file parts `files()` returns as multipart/form-data. httpx
        reads each file in chunks as it sends, so a large input never sits whole in memory.
        `files` is called again for each attempt: a retry needs the files from their start."""
        headers = {"Idempotency-Key": idempotency_key}

        def build() -> dict[str, Any]:
            if on_attempt:
                on_attempt()
            return {"data": fields, "files": files(), "headers": headers}

        response = self._send("POST", path, retried=True, build=build)
        return _json(response)

    def delete(self, path: str) -> None:
        self._send("DELETE", path, retried=False)

    def paginate(
        self, path: str, params: dict[str, Any] | None = None, *, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every row of a paginated list, page after page, up to `limit` rows."""
        query = dict(_clean(params) or {})
        query["page_size"] = min(limit or MAX_PAGE_SIZE, MAX_PAGE_SIZE)
        page = 1
        given = 0
        while True:
            data = self.get(path, {**query, "page": page})
            for row in data.get("results", []):
                yield row
                given += 1
                if limit is not None and given >= limit:
                    return
            if not data.get("next"):
                return
            page += 1

    @contextmanager
    def stream(self, path: str, params: dict[str, Any] | None = None) -> Iterator[httpx.Response]:
        """A GET whose body is read as it arrives (`iter_bytes`), for downloads. Only the
        opening of the stream is retried: a download cut off halfway is an error the caller
        shows, not something to paper over by starting again silently."""
        attempt = 0
        while True:
            attempt += 1
            request = self.http.build_request(
                "GET", path, params=_clean(params), headers={"Accept": "*/*"}
            )
            try:
                response = self.http.send(request, stream=True)
            except httpx.TransportError as error:
                if attempt <= self.retries:
                    self._sleep(attempt, None)
                    continue
                raise _network_error(self.base_url, error) from error
            if response.status_code in RETRIED_STATUSES and attempt <= self.retries:
                retry_after = response.headers.get("Retry-After")
                response.close()
                self._sleep(attempt, retry_after)
                continue
            if response.status_code >= 400:
                body = response.read()
                response.close()
                raise api_error(response.status_code, body)
            try:
                yield response
            except httpx.TransportError as error:
                raise _network_error(self.base_url, error) from error
            finally:
                response.close()
            return

    # --- plumbing ------------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        retried: bool,
        build: Callable[[], dict[str, Any]] | None = None,
        **arguments: Any,
    ) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self.http.request(method, path, **(build() if build else arguments))
            except httpx.TransportError as error:
                if retried and attempt <= self.retries:
                    self._sleep(attempt, None)
                    continue
                raise _network_error(self.base_url, error) from error
            if retried and response.status_code in RETRIED_STATUSES and attempt <= self.retries:
                self._sleep(attempt, response.headers.get("Retry-After"))
                continue
            if response.status_code >= 400:
                raise api_error(response.status_code, response.content)
            return response

    def _sleep(self, attempt: int, retry_after: str | None) -> None:
        delay = self.backoff * 2 ** (attempt - 1)
        if retry_after and retry_after.isdigit():
            delay = max(delay, min(float(retry_after), 30.0))
        time.sleep(delay)


def new_idempotency_key() -> str:
    return f"cli-{uuid.uuid4()}"


def _clean(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """Leaves out the filters not given, so that the server applies its own defaults."""
    if params is None:
        return None
    return {key: value for key, value in params.items() if value is not None and value != ()}


def _json(response: httpx.Response) -> Any:
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError as error:
        raise CliError(
            f"The server's answer to {response.request.url.path} is not JSON.",
            exit_code=ExitCode.UNAVAILABLE,
            status=response.status_code,
        ) from error


def _network_error(base_url: str, error: httpx.TransportError) -> CliError:
    kind = "timed out" if isinstance(error, httpx.TimeoutException) else "failed"
    detail = f"The connection to {base_url} {kind}: {error or type(error).__name__}"
    if isinstance(error, httpx.ConnectError):
        # Nothing answered at that address (refused, or no such host): most often a mistyped
        # address or a server not started, rather than a network that will come back.
        detail += (
            ". Check the address (--url, COMPUTESHARE_URL, or the one stored at login) and "
            "that the server is running."
        )
    return CliError(detail, code="network_error", exit_code=ExitCode.UNAVAILABLE)
