"""Hostile input against a live server: every operation of the API (read from the server's own
OpenAPI schema) and every HTML form (found by drawing each page of the URL patterns and reading
its <form>s) is sent unicode digits, NUL bytes, lone surrogates and invalid UTF-8, overlong
strings, floats and 1e309, deep nesting, wrong types, huge bodies, path-like names, bad
content types and bad ids, by a real gunicorn on the test PostgreSQL database.

What must hold: no answer of 5xx; every 4xx under /api/ is in the API's error shape; and a
refused request writes nothing: a trigger on every table notes each row a committed statement
inserts, deletes or changes (an update that leaves the row as it was is no change), and after
a refusal that note must be empty. An accepted request (some hostile input is fine input: an
organization may be called "١٢٣") may write; its note is then cleared."""

from __future__ import annotations

import ctypes
import json
import re
import signal
import socket
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import quote, urljoin, urlsplit

import pytest
import requests
from django.conf import settings
from django.db import connection
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from computeshare.login_throttling import failures_forget_all
from computeshare.models import User
from organizations.models import Membership, Organization
from tests.factories import (
    PASSWORD,
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    PartitionFactory,
    UserFactory,
    allocation_bought,
    funded_organization,
    token_for,
)
from tests.workers import GunicornServer, database_url, worker_environment

pytestmark = pytest.mark.django_db(transaction=True)


def api_token(user: User) -> str:
    """The key a script sends in `Authorization: Token <key>`."""
    return token_for(user)


# --- The tables ---------------------------------------------------------------------------------

# Tables a refused request writes by design; each is left out of the comparison.
EXCLUDED_TABLES = {
    # The session of a page's visitor is saved whenever it changes (a log-in, a message kept
    # for the next page, a rotated CSRF token), refused form or not; it is no domain record.
    "django_session": "sessions change on any visit",
}
# Tables of django-axes, which counted failed log-ins before issue 29 (a database migrated then
# may still hold them).
EXCLUDED_TABLE_PREFIXES = ("axes_",)
# Columns that change on any authenticated request, refused or not: when a token was last used.
EXCLUDED_COLUMNS = ("last_used_at", "last_used")


# Where the triggers note each row written (the function's text names it too), and the function
# they call. The note is in the same transaction as the write, so a request that rolls back
# leaves none; an update is noted only when the row, its EXCLUDED_COLUMNS aside (the trigger's
# arguments), is not as it was.
WRITES_TABLE = "hostile_rows_written"
WRITES_FUNCTION = "hostile_row_written"
WRITES_TRIGGER = "hostile_row_written"


class WriteLog:
    """The rows each request wrote, noted by a trigger on every table (each table summed
    before and after every request cost a fifth of this suite's time)."""

    def __init__(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            )
            self.tables = sorted(
                name
                for (name,) in cursor.fetchall()
                if name not in EXCLUDED_TABLES and not name.startswith(EXCLUDED_TABLE_PREFIXES)
            )
            cursor.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'public' AND column_name = ANY(%s)",
                [list(EXCLUDED_COLUMNS)],
            )
            self.excluded: dict[str, list[str]] = {}
            for table, column in cursor.fetchall():
                self.excluded.setdefault(table, []).append(column)

    def __enter__(self) -> WriteLog:
        # The names come from information_schema and the constants above, not from a request.
        statements = [
            f"CREATE UNLOGGED TABLE {WRITES_TABLE} (table_name text NOT NULL)",
            """CREATE FUNCTION hostile_row_written() RETURNS trigger LANGUAGE plpgsql AS $$
            DECLARE
                unseen text[] := coalesce(TG_ARGV, ARRAY[]::text[]);
            BEGIN
                IF TG_OP = 'UPDATE' AND to_jsonb(OLD) - unseen = to_jsonb(NEW) - unseen THEN
                    RETURN NULL;
                END IF;
                INSERT INTO hostile_rows_written VALUES (TG_TABLE_NAME);
                RETURN NULL;
            END $$""",
        ]
        for table in self.tables:
            columns = ", ".join(f"'{column}'" for column in self.excluded.get(table, ()))
            statements.append(
                f'CREATE TRIGGER {WRITES_TRIGGER} AFTER INSERT OR UPDATE OR DELETE ON "{table}" '
                f"FOR EACH ROW EXECUTE FUNCTION {WRITES_FUNCTION}({columns})"
            )
            statements.append(
                f'CREATE TRIGGER {WRITES_TRIGGER}_truncate AFTER TRUNCATE ON "{table}" '
                f"FOR EACH STATEMENT EXECUTE FUNCTION {WRITES_FUNCTION}()"
            )
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        return self

    def __exit__(self, *exc: object) -> None:
        with connection.cursor() as cursor:
            for table in self.tables:
                cursor.execute(f'DROP TRIGGER {WRITES_TRIGGER} ON "{table}"')
                cursor.execute(f'DROP TRIGGER {WRITES_TRIGGER}_truncate ON "{table}"')
            cursor.execute(f"DROP FUNCTION {WRITES_FUNCTION}()")
            cursor.execute(f"DROP TABLE {WRITES_TABLE}")

    def taken(self) -> dict[str, int]:
        """Each table written since the last call, with the number of rows written."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"WITH taken AS (DELETE FROM {WRITES_TABLE} RETURNING table_name) "  # noqa: S608
                "SELECT table_name, count(*) FROM taken GROUP BY table_name"
            )
            return dict(cursor.fetchall())


# --- The server ---------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, killed or not (prctl PR_SET_PDEATHSIG),
    so that no server outlives an interrupted run and holds the test database."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


class LiveServer(GunicornServer):
    """gunicorn as production runs it (threads, so connections are kept alive), two workers,
    each request's method, path and status in its access log."""

    def __init__(self, environment: dict[str, str], log_path: Path) -> None:
        self.access_log_path = log_path.with_name("access.log")
        options = [
            "--workers=2",
            "--threads=2",
            "--timeout=120",
            "--keep-alive=30",
            f"--access-logfile={self.access_log_path}",
            "--access-logformat=%(m)s %(U)s %(s)s",
        ]
        super().__init__(environment, log_path, options, preexec_fn=_die_with_parent)

    def access_log_size(self) -> int:
        return self.access_log_path.stat().st_size if self.access_log_path.exists() else 0

    def logged_status(self, method: str, path: str, offset: int) -> int:
        """The status of the first `method path` request logged past `offset` (0: none)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with self.access_log_path.open("rb") as log:
                log.seek(offset)
                for line in log.read().decode(errors="replace").splitlines():
                    logged_method, logged_path, status = line.rsplit(" ", 2)
                    if logged_method == method and logged_path == path:
                        return int(status)
            time.sleep(0.1)
        return 0


# --- The data ----------------------------------------------------------------------------------


@dataclass
class Market:
    """What the hostile requests aim at: the ids each path parameter takes, per kind."""

    alice: User  # admin of the owner and of the buyer
    ids: dict[str, str]
    owner: Organization
    buyer: Organization
    other_ids: dict[str, str]  # objects of another organization: 404 to alice
    usernames: dict[str, str] = field(default_factory=dict)


def market_build() -> Market:
    """An owner with a cluster and offers, a buyer with money, bids, an allocation, jobs and a
    budget, and a second team with objects of its own. Tasks the services enqueue are dropped:
    no worker must write while the tables are compared."""
    from billing import services as billing
    from marketplace import services as market
    from scheduler_bridge import services as bridge
    from scheduler_bridge.services import JobRequest
    from webhooks import services as webhooks

    with mock.patch("celery.app.task.Task.apply_async"):
        alice = UserFactory(username="alice")
        owner = funded_organization("0", name="Owner Lab")
        buyer = funded_organization("5000", name="Buyer Lab")
        MembershipFactory(organization=owner, user=alice, role=Membership.Role.ADMIN)
        as_buyer = MembershipFactory(organization=buyer, user=alice, role=Membership.Role.ADMIN)
        MembershipFactory(organization=buyer, user=UserFactory(username="bob"))
        leaving = MembershipFactory(organization=buyer, user=UserFactory(username="dave"))
        cluster = ClusterFactory(organization=owner, name="owner-cluster")
        partition = PartitionFactory(cluster=cluster, name="debug", cpus=64, nodes=4, gpus=8)
        open_offer = OfferFactory(partition=partition, quantity=500, buy_now_price=Decimal("3"))
        doomed_offer = OfferFactory(partition=partition, quantity=10)
        bid = market.bid_place(actor=as_buyer, offer=open_offer, quantity=5, price="1.50")
        doomed_bid = market.bid_place(actor=as_buyer, offer=open_offer, quantity=2, price="1.25")
        allocation = allocation_bought(buyer, partition=partition, quantity=400, price="2.00")
        job_request = JobRequest(
            name="hello", script="#!/bin/bash\necho hi\n", time_limit_minutes=10
        )
        job = bridge.job_submit(actor=as_buyer, allocation=allocation, request=job_request)
        bridge.job_submit(
            actor=as_buyer,
            allocation=allocation,
            request=JobRequest(
                name="array", script="#!/bin/bash\necho $1\n", time_limit_minutes=5, array="0-3"
            ),
        )
        doomed_job = bridge.job_submit(actor=as_buyer, allocation=allocation, request=job_request)
        billing.budget_set(
            organization=buyer, monthly_limit=Decimal("4000"), alert_thresholds=[50, 90]
        )

        other = funded_organization("100", name="Other Lab")
        other_admin = MembershipFactory(organization=other, role=Membership.Role.ADMIN)
        other_cluster = ClusterFactory(organization=other, name="other-cluster")
        other_offer = OfferFactory(partition=PartitionFactory(cluster=other_cluster))
        other_allocation = allocation_bought(other, partition=partition, quantity=10)
        other_job = bridge.job_submit(
            actor=other_admin, allocation=other_allocation, request=job_request
        )
        other_bid = market.bid_place(actor=other_admin, offer=open_offer, quantity=1, price="1")
        endpoint = webhooks.endpoint_create(
            organization=buyer, url="http://127.0.0.1:9/hook", events=["job.ended"]
        )
        doomed_endpoint = webhooks.endpoint_create(
            organization=buyer, url="http://127.0.0.1:9/doomed", events=["job.ended"]
        )
        webhooks.event_record(
            organization_id=buyer.pk, type="job.ended", object_key="job:x", data={}
        )
        delivery = endpoint.deliveries.get()
        other_endpoint = webhooks.endpoint_create(
            organization=other, url="http://127.0.0.1:9/other", events=["job.ended"]
        )
    tenant = cluster.tenant_accounts.order_by("username").first()
    now = timezone.now()
    ids = {
        "organization_id": str(buyer.uuid),
        "cluster_id": str(cluster.uuid),
        "offer_id": str(open_offer.uuid),
        "bid_id": str(bid.uuid),
        "allocation_id": str(allocation.uuid),
        "job_id": str(job.uuid),
        "member_id": str(leaving.uuid),
        "username": tenant.username if tenant else "cs-tenant-01",
        "year": str(now.year),
        "month": str(now.month),
        # The ones a first accepted request changes for good, kept apart.
        "doomed_offer_id": str(doomed_offer.uuid),
        "doomed_bid_id": str(doomed_bid.uuid),
        "doomed_job_id": str(doomed_job.uuid),
        "endpoint_id": str(endpoint.uuid),
        "delivery_id": str(delivery.uuid),
        "doomed_endpoint_id": str(doomed_endpoint.uuid),
        "owner_id": str(owner.uuid),
    }
    other_ids = {
        "organization_id": str(other.uuid),
        "cluster_id": str(other_cluster.uuid),
        "offer_id": str(other_offer.uuid),
        "bid_id": str(other_bid.uuid),
        "allocation_id": str(other_allocation.uuid),
        "job_id": str(other_job.uuid),
        "endpoint_id": str(other_endpoint.uuid),
    }
    return Market(alice, ids, owner, buyer, other_ids)


# --- Hostile values -----------------------------------------------------------------------------


class Raw(str):
    """JSON text put into a body as it is (what json.dumps cannot write)."""


DEEP = 5_000
# Each field is sent one value of each kind; which one turns with the field, so that every value
# of a kind is sent, to some field of some operation.
JSON_KINDS: list[list[tuple[str, Any]]] = [
    [
        ("superscript two", "²"),
        ("arabic-indic three", "٣"),
        ("fullwidth twelve", "\uff11\uff12"),
        ("devanagari digits", "१२"),
    ],
    [("NUL", "\x00"), ("NUL inside", "1\x002")],
    [("lone surrogate", Raw('"\\ud800"'))],
    [("10 kB", "9" * 10_000)],
    [
        ("1e309", Raw("1e309")),
        ("-1e309", Raw("-1e309")),
        ("NaN", Raw("NaN")),
        ("Infinity", Raw("Infinity")),
        ("float", 1.5),
        ("1e308", 1e308),
        ("400 digits", Raw("1" + "0" * 400)),
        ("2**63", 2**63),
        ("negative", -1),
        ("string 1e309", "1e309"),
        ("string NaN", "NaN"),
    ],
    [("list", [1, 2]), ("object", {"a": {"b": 1}}), ("true", True), ("null", None)],
    [("nested 5000 deep", Raw("[" * DEEP + "]" * DEEP))],
    [
        ("path traversal", "../../etc/passwd"),
        ("absolute path", "/etc/shadow"),
        ("slash", "a/b"),
        ("backslash", "..\\x"),
    ],
    [("empty", "")],
    [
        ("right-to-left override", "lab\u202etxt.exe"),
        ("zero-width joiner", "a\u200db"),
        ("line separator", "a\u2028b"),
        ("CRLF", "a\r\nb"),
        ("emoji", "\U0001f680 lab"),
        ("combining marks", "e" + "\u0301" * 200),
        ("C1 control", "a\x85b"),
    ],
    [
        ("URL with an empty host label", "http://a..b/"),
        ("URL with a 70-character label", "http://" + "a" * 70 + ".example/"),
    ],
]
# Issue 29: every time and month, at the ends of what Python's datetime holds, in every query
# parameter and in every body field that takes one.
TIME_EXTREMES: list[tuple[str, str]] = [
    ("year 9999", "9999-12-31T23:59:59Z"),
    ("year 1", "0001-01-01T00:00:00Z"),
    ("date 9999", "9999-12-31"),
    ("month 9999", "9999-12"),
    ("month 0", "0000-01"),
    ("month 13", "2026-13"),
]
TIME_FIELD = re.compile(r"(^|_)(at|start|end|from|to|month|date|before|after|since|until)$")
# Sent once per operation, in its first field: they cost the most to send.
JSON_HEAVY: list[tuple[str, Any]] = [
    ("1 MB", "x" * 1_000_000),
    ("1 MB of digits", Raw("9" * 1_000_000)),
]

# A file part whose name is past a file system's 255 bytes (issue 29: was a 500).
LONG_FILE_NAME = (
    b'--b\r\nContent-Disposition: form-data; name="input_files"; filename="'
    + b"a" * 300
    + b'"\r\n\r\nx\r\n--b--\r\n'
)
# Whole bodies, for every operation that takes one.
BIG = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1024
BODIES: list[tuple[str, str | None, bytes]] = [
    ("truncated JSON", "application/json", b'{"name": '),
    ("single quotes", "application/json", b"{'name': 1}"),
    ("trailing garbage", "application/json", b'{"name": "x"} x'),
    ("a list", "application/json", b"[1, 2]"),
    ("a string", "application/json", b'"name"'),
    ("null", "application/json", b"null"),
    ("1e309", "application/json", b"1e309"),
    ("nested objects 5000 deep", "application/json", b'{"a":' * DEEP + b"1" + b"}" * DEEP),
    ("invalid UTF-8", "application/json", b'{"name": "\xff\xfe\xc0\xaf"}'),
    ("UTF-16", "application/json; charset=utf-16", '{"name": "x"}'.encode("utf-16")),
    ("unknown charset", "application/json; charset=x-unknown", b'{"name": "x"}'),
    ("byte order mark", "application/json", b'\xef\xbb\xbf{"name": "x"}'),
    ("empty", "application/json", b""),
    ("huge", "application/json", b'{"name": "' + b"x" * BIG + b'"}'),
    ("plain text", "text/plain", b'{"name": "x"}'),
    ("XML", "application/xml", b"<name>x</name>"),
    ("form", "application/x-www-form-urlencoded", b"name=x&quantity=%C2%B2"),
    (
        "multipart",
        "multipart/form-data; boundary=b",
        b"--b\r\nContent-Disposition: form-data; "
        b'name="file"; filename="../../etc/passwd"\r\n\r\nroot\r\n--b--\r\n',
    ),
    ("no content type", None, b'{"name": "x"}'),
    # Issue 29: bodies that are not UTF-8 in every type an endpoint may read, and a file name
    # past a file system's 255 bytes.
    ("invalid UTF-8 form", "application/x-www-form-urlencoded", b"name=\xff\xfe&q=%FF"),
    ("invalid UTF-8 text", "text/plain; charset=utf-8", b"\xff\xfe\xc0\xaf"),
    ("latin-1 JSON", "application/json; charset=latin-1", b'{"name": "caf\xe9"}'),
    (
        "invalid UTF-8 multipart",
        "multipart/form-data; boundary=b",
        b'--b\r\nContent-Disposition: form-data; name="name"\r\n\r\n\xff\xfe\r\n'
        b'--b\r\nContent-Disposition: form-data; name="input_files"; filename="\xff.txt"'
        b"\r\n\r\nx\r\n--b--\r\n",
    ),
    ("multipart file name of 300 bytes", "multipart/form-data; boundary=b", LONG_FILE_NAME),
]

# Query and form values, by kind as above: text, URL-encoded (those in RAW_TEXT already are).
TEXT_KINDS: list[list[tuple[str, str]]] = [
    [("superscript two", "²"), ("arabic-indic three", "٣"), ("fullwidth twelve", "\uff11\uff12")],
    [("NUL", "1\x00")],
    [("invalid UTF-8", "%FF%FE"), ("lone surrogate", "%ED%A0%80")],
    [("2 kB", "9" * 2_000)],
    [
        ("1e309", "1e309"),
        ("-1e309", "-1e309"),
        ("NaN", "NaN"),
        ("Infinity", "Infinity"),
        ("float", "1.5"),
        ("negative", "-1"),
        ("30 digits", "9" * 30),
    ],
    [
        ("path traversal", "../../etc/passwd"),
        ("backslash", "..\\x"),
        ("/etc/shadow", "/etc/shadow"),
        ("a/b", "a/b"),
    ],
    [("empty", "")],
    [
        ("right-to-left override", "lab\u202etxt"),
        ("zero-width joiner", "a\u200db"),
        ("CRLF", "a\r\nb"),
        ("emoji", "\U0001f680"),
    ],
    [
        ("URL with an empty host label", "http://a..b/"),
        ("URL with a 70-character label", "http://" + "a" * 70 + ".example/"),
    ],
]
RAW_TEXT = {"lone surrogate", "invalid UTF-8"}
FORM_EXTRA_VALUES = [("10 kB", "9" * 10_000)]
FORM_HEAVY = [("1 MB", "x" * 1_000_000)]


def one_of_each(kinds: list[list[tuple[str, Any]]], turn: int) -> list[tuple[str, Any]]:
    return [values[turn % len(values)] for values in kinds]


# Path parameters: ids that are not ids, and ids the caller may not see.
PATH_VALUES: list[tuple[str, str]] = [  # four a parameter, in turn, and the unknown uuid
    ("not a uuid", "not-a-uuid"),
    ("path traversal", "%2e%2e%2f%2e%2e%2fetc%2fpasswd"),
    ("NUL", "%00"),
    ("arabic-indic digits", "%D9%A1%D9%A2%D9%A3"),
    ("invalid UTF-8", "%FF%FE"),
    ("1 kB", "a" * 1_000),
    ("unknown uuid", "00000000-0000-4000-8000-000000000000"),
]


def path_values(turn: int) -> list[tuple[str, str]]:
    known = PATH_VALUES[:-1]
    return [known[(turn + step) % len(known)] for step in range(4)] + PATH_VALUES[-1:]


AUTHORIZATIONS = [
    "Token ²",
    "Token ١٢٣",
    "Token " + "x" * 4_000,
    "Token",
    "Token a b",
    "Bearer x",
    "Basic Og==",
]


def json_body(body: dict[str, Any]) -> bytes:
    """`body` as JSON, with each `Raw` value put in as it is."""
    raws: dict[str, str] = {}

    def mark(value: Any) -> Any:
        if isinstance(value, Raw):
            key = f"__raw_{len(raws)}__"
            raws[key] = str(value)
            return key
        return value

    text = json.dumps({name: mark(value) for name, value in body.items()})
    for key, raw in raws.items():
        text = text.replace(f'"{key}"', raw)
    return text.encode()


def query_string(pairs: list[tuple[str, str]], raw: set[int] = frozenset()) -> str:  # type: ignore[assignment]
    """URL-encodes the pairs; the values at the indices in `raw` are already encoded."""
    return "&".join(
        f"{quote(name, safe='')}={value if index in raw else quote(value, safe='')}"
        for index, (name, value) in enumerate(pairs)
    )


# --- Sending and checking -----------------------------------------------------------------------


@dataclass
class Finding:
    group: str
    method: str
    path: str
    label: str
    status: int
    body: str
    problem: str

    def __str__(self) -> str:
        return (
            f"{self.problem}: {self.method} {self.path[:120]} [{self.label}] -> {self.status} "
            f"{self.body[:300]!r}"
        )


@dataclass
class Attack:
    server: LiveServer
    writes: WriteLog
    sent: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    rows_written_by_refusals: int = 0
    accepted_writes: int = 0
    requested_paths: set[str] = field(default_factory=set)
    writes_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.writes.taken()

    def send(
        self,
        session: requests.Session,
        group: str,
        method: str,
        path: str,
        label: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> requests.Response:
        logged = self.server.access_log_size()
        was_reset = False
        try:
            if body is not None and len(body) > BIG:
                answer = _send_past_the_limit(
                    session, self.server.base_url, method, path, body, headers
                )
            else:
                answer = session.request(
                    method,
                    self.server.base_url + path,
                    data=body,
                    # As bytes: a header may carry what latin-1 cannot (UTF-8, as clients do).
                    headers={name: value.encode() for name, value in (headers or {}).items()},
                    allow_redirects=False,
                    timeout=120,
                )
        except requests.ConnectionError:
            # A body past DATA_UPLOAD_MAX_MEMORY_SIZE is refused before it is read; gunicorn
            # then closes the connection with the rest unread, and the client may see a reset
            # instead of the answer. What the server answered is in its access log.
            was_reset = True
            answer = requests.Response()
            answer.status_code = self.server.logged_status(method, urlsplit(path).path, logged)
            answer._content = b"(the connection was reset; status from the access log)"
        self.sent[group] += 1
        self.statuses[answer.status_code] += 1
        self.requested_paths.add(urlsplit(path).path)
        measured = time.monotonic()
        changed = self.writes.taken()
        self.writes_seconds += time.monotonic() - measured

        def problem(text: str) -> None:
            finding = Finding(group, method, path, label, answer.status_code, answer.text, text)
            self.findings.append(finding)

        if answer.status_code >= 500:
            problem("server error")
        elif answer.status_code == 0:
            problem("the connection was dropped without an answer")
        if changed:
            if answer.status_code >= 400:
                self.rows_written_by_refusals += sum(changed.values())
                problem(f"a refusal wrote {changed}")
            else:
                self.accepted_writes += 1
        if path.startswith("/api/") and 400 <= answer.status_code < 500 and not was_reset:
            try:
                error = answer.json()
            except ValueError:
                error = None
            if not (
                isinstance(error, dict)
                and isinstance(error.get("detail"), str)
                and isinstance(error.get("code"), str)
            ):
                problem("not the API's error shape")
        return answer

    def summary(self) -> str:
        total = sum(self.sent.values())
        server_errors = sum(n for status, n in self.statuses.items() if status >= 500)
        return (
            f"hostile inputs: {total} sent, {server_errors} 5xx, "
            f"{self.rows_written_by_refusals} rows written by refusals "
            f"(per group {dict(self.sent)}; statuses {dict(sorted(self.statuses.items()))}; "
            f"{self.accepted_writes} accepted requests wrote; "
            f"{self.writes_seconds:.0f} s reading the rows written)"
        )


# --- The API ------------------------------------------------------------------------------------

# Plausible values, so that one hostile field at a time reaches the code past the others.
SOON = timezone.now() + timedelta(days=2)


def plausible(name: str, market: Market, path: str) -> Any:
    ids = market.ids
    values: dict[str, Any] = {
        "organization": ids["owner_id"]
        if path.startswith("/api/v1/clusters/")
        else ids["organization_id"],
        "cluster": ids["cluster_id"],
        "allocation": ids["allocation_id"],
        "partition": "debug",
        "resource": "cpu",
        "quantity": 1,
        "min_quantity": 1,
        "price": "1.50",
        "reserve_price": "1.00",
        "buy_now_price": "2.00",
        "max_per_buyer": 10,
        "window_start": (SOON + timedelta(hours=1)).isoformat(),
        "window_end": (SOON + timedelta(days=3)).isoformat(),
        "auction_closes_at": SOON.isoformat(),
        "name": "hostile",
        "script": "#!/bin/bash\necho hi\n",
        "time_limit_minutes": 10,
        "cpus_per_task": 1,
        "ntasks": 1,
        "nodes": 1,
        "gpus": 0,
        "array": "0-3",
        "environment": {"INPUT": "data.csv"},
        "username": "bob",
        "password": PASSWORD,
        "role": "member",
        "email": "someone@example.org",
        "monthly_limit": "4000.00",
        "alert_thresholds": [50, 90],
        "amount": "10.00",
        "ssh_host": "127.0.0.1",
        "ssh_port": 22,
        "ssh_user": "computeshare",
        "account_mode": "fixed",
        "slurm_account": "computeshare",
    }
    return values.get(name, "x")


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


PATH_PARAMETER = re.compile(r"\{([^}]+)\}")
# Operations whose first accepted request changes their object for good get objects of their own.
DOOMED = {
    ("post", "/api/v1/offers/{offer_id}/cancel/"): {"offer_id": "doomed_offer_id"},
    ("delete", "/api/v1/bids/{bid_id}/"): {"bid_id": "doomed_bid_id"},
    ("post", "/api/v1/jobs/{job_id}/cancel/"): {"job_id": "doomed_job_id"},
    ("delete", "/api/v1/organizations/{organization_id}/webhook-endpoints/{endpoint_id}/"): {
        "endpoint_id": "doomed_endpoint_id"
    },
}


def path_of(template: str, method: str, market: Market, **changes: str) -> str:
    doomed = DOOMED.get((method, template), {})

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in changes:
            return changes[name]
        if template.endswith("/earnings/") and name == "organization_id":
            return market.ids["owner_id"]
        return market.ids.get(doomed.get(name, name), str(uuid.uuid4()))

    return PATH_PARAMETER.sub(value, template)


def api_attack(attack: Attack, schema: dict[str, Any], market: Market, token: str) -> None:
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    operations = [
        (template, method, operation)
        for template, methods in schema["paths"].items()
        for method, operation in methods.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]
    # What ends an object (a cancel, a withdrawal, a removal) goes last.
    operations.sort(key=lambda item: (item[1] == "delete" or "cancel" in item[0], item[0]))
    for number, (template, method, operation) in enumerate(operations):
        group = f"api {method.upper()}"
        path = path_of(template, method, market)
        parameters = operation.get("parameters", [])
        json_schema = operation.get("requestBody", {}).get("content", {}).get("application/json")
        properties: dict[str, Any] = {}
        if json_schema:
            properties = _resolve(schema, json_schema["schema"]).get("properties", {})
        base = {name: plausible(name, market, template) for name in properties}

        def send(
            path: str,
            label: str,
            body: bytes | None = None,
            group: str = group,
            method: str = method.upper(),
            **headers: str,
        ) -> None:
            if body is not None and "Content-Type" not in headers:
                headers["Content-Type"] = "application/json"
            attack.send(session, group, method, path, label, body=body, headers=headers)

        # Each path parameter: not an id, an id of another team's object.
        for turn, parameter in enumerate(PATH_PARAMETER.findall(template), start=number):
            for label, bad in path_values(turn):
                send(path_of(template, method, market, **{parameter: bad}), f"{parameter} {label}")
            if parameter in market.other_ids:
                other = market.other_ids[parameter]
                send(path_of(template, method, market, **{parameter: other}), f"{parameter} other")
        # The query parameters, one at a time.
        queries = [item["name"] for item in parameters if item["in"] == "query"]
        for turn, name in enumerate(queries, start=number):
            for label, value in one_of_each(TEXT_KINDS, turn):
                raw = {0} if label in RAW_TEXT else set()
                send(f"{path}?{query_string([(name, value)], raw)}", f"?{name} {label}")
            if name == "page_size":
                send(f"{path}?{query_string([(name, '1'), (name, '2')])}", f"?{name} twice")
            for label, value in TIME_EXTREMES:
                send(f"{path}?{query_string([(name, value)])}", f"?{name} {label}")
        # The body, one field at a time, then whole bodies.
        if json_schema:
            for index, name in enumerate(properties):
                values = one_of_each(JSON_KINDS, number + index) + (
                    JSON_HEAVY if index == 0 else []
                )
                if TIME_FIELD.search(name):
                    values += TIME_EXTREMES
                for label, value in values:
                    send(path, f"{name} {label}", json_body({**base, name: value}))
            for label, content_type, body in BODIES:
                headers = {"Content-Type": content_type} if content_type else {}
                # A signature header of the right form takes the body past the Stripe
                # webhook's first check; no other endpoint reads it.
                headers["Stripe-Signature"] = "t=1,v1=00"
                send(path, f"body {label}", body, **headers)
            if any(item["name"] == "Idempotency-Key" for item in parameters):
                for label, key in [("300 characters", "k" * 300), ("latin-1", "clé")]:
                    send(
                        path,
                        f"Idempotency-Key {label}",
                        json_body(base),
                        **{"Idempotency-Key": key},
                    )
        # A host the site does not serve: Django's own 400, which must be in the API's shape too.
        send(path, "Host not allowed", Host="evil.example")
        # A broken Authorization header.
        authorization = AUTHORIZATIONS[number % len(AUTHORIZATIONS)]
        send(path, f"Authorization {authorization[:20]}", Authorization=authorization)


# --- The pages ----------------------------------------------------------------------------------


@dataclass
class Form:
    page: str
    action: str
    method: str
    fields: dict[str, str]


class FormReader(HTMLParser):
    """The <form>s of a page: action, method, and each named field with the value it has."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.page = page
        self.forms: list[Form] = []
        self.form: Form | None = None
        self.select: str | None = None
        self.textarea: str | None = None

    def handle_starttag(self, tag: str, attributes: list[tuple[str, str | None]]) -> None:
        attrs = {name: value or "" for name, value in attributes}
        if tag == "option" and self.form is not None and self.select:
            if not self.form.fields[self.select] or "selected" in attrs:
                self.form.fields[self.select] = attrs.get("value", "")
        elif tag == "form":
            action = urljoin(self.page, attrs.get("action") or self.page)
            self.form = Form(self.page, action, attrs.get("method", "get").lower(), {})
            self.forms.append(self.form)
        elif self.form is None or "name" not in attrs:
            return
        elif tag == "input" and attrs.get("type") not in ("submit", "button", "image"):
            if attrs.get("type") in ("checkbox", "radio") and "checked" not in attrs:
                self.form.fields.setdefault(attrs["name"], "")
            else:
                self.form.fields[attrs["name"]] = attrs.get("value", "")
        elif tag == "select":
            self.select = attrs["name"]
            self.form.fields.setdefault(attrs["name"], "")
        elif tag == "textarea":
            self.textarea = attrs["name"]
            self.form.fields[attrs["name"]] = ""
        elif tag == "button" and attrs.get("value"):
            self.form.fields.setdefault(attrs["name"], attrs["value"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.form = None
        elif tag == "select":
            self.select = None
        elif tag == "textarea":
            self.textarea = None

    def handle_data(self, data: str) -> None:
        if self.form is not None and self.textarea:
            self.form.fields[self.textarea] += data


def url_patterns() -> list[str]:
    """Every page's route (admin and API left out), as `/offers/<uuid:offer_id>/`."""
    routes: list[str] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern):
                routes.append("/" + route)

    walk(get_resolver().url_patterns, "")
    return [route for route in routes if not route.startswith(("/admin/", "/api/"))]


ROUTE_PARAMETER = re.compile(r"<(?:(\w+):)?(\w+)>")


def page_of(route: str, market: Market, organization: str, **changes: str) -> str:
    def value(match: re.Match[str]) -> str:
        converter, name = match.group(1) or "str", match.group(2)
        if name in changes:
            return changes[name]
        if name == "organization_id":
            return organization
        if name in market.ids:
            return market.ids[name]
        return str(uuid.uuid4()) if converter == "uuid" else "1"

    return ROUTE_PARAMETER.sub(value, route)


# Forms whose first accepted POST ends something the others need (the session, the token, an
# offer): sent last.
LAST = ("/logout/", "/revoke/", "/cancel/", "/withdraw/", "/leave/", "/remove/")


def form_plausible(name: str, value: str, market: Market) -> str:
    short = name.rsplit("-", 1)[-1]
    if value:
        return value
    known = plausible(short, market, "")
    if isinstance(known, str | int) and not isinstance(known, bool):
        return str(known)
    return value


def forms_attack(attack: Attack, market: Market, signed_in: requests.Session) -> None:
    anonymous = requests.Session()
    attack.send(anonymous, "pages GET", "GET", "/login/", "csrf cookie")
    sessions = {"signed in": signed_in, "anonymous": anonymous}
    forms: dict[tuple[str, str, str], tuple[str, Form]] = {}
    organizations = [market.ids["organization_id"], market.ids["owner_id"]]
    for route in url_patterns():
        pages = {page_of(route, market, organization) for organization in organizations}
        for who, session in sessions.items():
            for page in sorted(pages):
                answer = attack.send(session, "pages GET", "GET", page, f"{who} draws")
                if answer.status_code == 200 and "html" in answer.headers.get("Content-Type", ""):
                    reader = FormReader(page)
                    reader.feed(answer.text)
                    for form in reader.forms:
                        key = (who, urlsplit(form.action).path, form.method)
                        forms.setdefault(key, (who, form))
        # Ids that are not ids, in the page's own path.
        for turn, name in enumerate(ROUTE_PARAMETER.findall(route), start=len(route)):
            for label, bad in path_values(turn):
                page = page_of(route, market, organizations[0], **{name[1]: bad})
                attack.send(signed_in, "pages GET", "GET", page, f"{name[1]} {label}")
                if "/cancel/" in route or "/withdraw/" in route or "/scrub/" in route:
                    attack.send(
                        signed_in,
                        "forms POST",
                        "POST",
                        page,
                        f"{name[1]} {label}",
                        body=b"",
                        headers=_csrf(signed_in),
                    )
        # The query of every page.
        page = page_of(route, market, organizations[0])
        for label, value in one_of_each(TEXT_KINDS, len(route))[:3]:
            raw = {0, 1} if label in RAW_TEXT else set()
            query = query_string([("page", value), ("q", value)], raw)
            attack.send(signed_in, "pages GET", "GET", f"{page}?{query}", f"?page {label}")

    ordered = sorted(
        forms.values(), key=lambda item: (item[1].action.endswith(LAST), item[1].action)
    )
    for who, form in ordered:
        session = sessions[who]
        action = urlsplit(form.action).path
        if who == "signed in" and action == "/logout/":
            continue  # signing out is sent by the anonymous visitor
        group = f"forms {form.method.upper()}"
        base = {
            name: form_plausible(name, value, market)
            for name, value in form.fields.items()
            if name != "csrfmiddlewaretoken"
        }
        names = list(base)
        for index, name in enumerate(names):
            values = one_of_each(TEXT_KINDS, index + len(action)) + (
                FORM_EXTRA_VALUES + FORM_HEAVY if index == 0 else []
            )
            if TIME_FIELD.search(name):
                values += TIME_EXTREMES
            for label, value in values:
                pairs = [(other, base[other]) for other in names if other != name] + [(name, value)]
                raw = {len(pairs) - 1} if label in RAW_TEXT else set()
                _form_send(attack, session, group, form, action, pairs, raw, f"{name} {label}")
        if names:
            twice = [(other, base[other]) for other in names] + [(names[0], base[names[0]])]
            _form_send(attack, session, group, form, action, twice, set(), f"{names[0]} twice")
        if form.method == "post":
            pairs = list(base.items())
            for label, content_type, body in [
                ("huge", None, query_string([*pairs, ("x", "x" * BIG)]).encode()),
                (
                    "1001 fields",
                    None,
                    query_string(pairs + [(f"f{i}", "1") for i in range(1001)]).encode(),
                ),
                ("JSON", "application/json", json.dumps(base).encode()),
                (
                    "multipart file",
                    "multipart/form-data; boundary=b",
                    b"--b\r\nContent-"
                    b'Disposition: form-data; name="file"; filename="../../etc/passwd"\r\n\r\n'
                    b"root\r\n--b--\r\n",
                ),
                ("no CSRF token", "", query_string(pairs).encode()),
                ("invalid UTF-8", None, query_string(pairs).encode() + b"&x=\xff\xfe"),
                (
                    "multipart file name of 300 bytes",
                    "multipart/form-data; boundary=b",
                    LONG_FILE_NAME,
                ),
            ]:
                headers = _csrf(session) if content_type != "" else {}
                headers["Content-Type"] = content_type or "application/x-www-form-urlencoded"
                attack.send(
                    session, group, "POST", action, f"body {label}", body=body, headers=headers
                )


def _send_past_the_limit(
    session: requests.Session,
    base: str,
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str] | None,
) -> requests.Response:
    """A body past DATA_UPLOAD_MAX_MEMORY_SIZE. Django refuses it from its Content-Length before
    reading it, and gunicorn then closes the connection with the rest unread: the client's
    kernel resets it, and the answer, already sent, may be lost with the reset. So the whole
    length is declared, its first 64 KiB sent, and the answer read before sending on."""
    prepared = session.prepare_request(
        requests.Request(method, base + path, data=body, headers=headers or {})
    )
    target = urlsplit(base)
    head = [f"{method} {path} HTTP/1.1", f"Host: {target.netloc}", "Connection: close"]
    head += [
        f"{name}: {value}"
        for name, value in prepared.headers.items()
        if name.lower() not in ("host", "connection")
    ]
    with socket.create_connection((target.hostname, target.port), timeout=60) as connection:
        connection.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body[:65536])
        received = b""
        try:
            while chunk := connection.recv(65536):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    status_line, _, rest = received.partition(b"\r\n")
    answer = requests.Response()
    answer.status_code = int(status_line.split()[1]) if status_line else 0
    answer._content = rest.partition(b"\r\n\r\n")[2]
    answer.headers["Content-Type"] = (
        "application/json"
        if rest.lower().find(b"content-type: application/json") >= 0
        else "text/html"
    )
    return answer


def _csrf(session: requests.Session) -> dict[str, str]:
    return {"X-CSRFToken": session.cookies.get("csrftoken", "")}


def _form_send(
    attack: Attack,
    session: requests.Session,
    group: str,
    form: Form,
    action: str,
    pairs: list[tuple[str, str]],
    raw: set[int],
    label: str,
) -> None:
    encoded = query_string(pairs, raw)
    if form.method == "post":
        headers = {**_csrf(session), "Content-Type": "application/x-www-form-urlencoded"}
        attack.send(session, group, "POST", action, label, body=encoded.encode(), headers=headers)
    else:
        attack.send(session, group, "GET", f"{action}?{encoded}", label)


# --- The test -----------------------------------------------------------------------------------


@pytest.fixture
def live_server_hostile(
    transactional_db: None, tmp_path: Path, localstripe: Any
) -> Iterator[LiveServer]:
    environment = worker_environment(
        database=database_url(connection.settings_dict),
        redis=settings.REDIS_URL,
        # Tasks the requests enqueue go nowhere: no worker may write while tables are compared.
        CELERY_BROKER_URL="memory://",
        LOCAL_CLUSTER_ROOT=str(tmp_path / "local-cluster"),
        STRIPE_API_BASE=localstripe.api_base,
        STRIPE_SECRET_KEY=localstripe.secret_key,
        STRIPE_PUBLISHABLE_KEY=localstripe.publishable_key,
        STRIPE_JS_URL=localstripe.js_url,
    )
    server = LiveServer(environment, tmp_path / "gunicorn.log")
    server.wait_ready()
    yield server
    server.stop()
    # The hostile log-ins must not lock the next tests out.
    failures_forget_all()


def log_in(server: LiveServer, username: str) -> requests.Session:
    session = requests.Session()
    session.get(f"{server.base_url}/login/", timeout=30)
    answer = session.post(
        f"{server.base_url}/login/",
        data={"username": username, "password": PASSWORD},
        headers=_csrf(session),
        allow_redirects=False,
        timeout=30,
    )
    assert answer.status_code == 302, answer.text[:2000]
    return session


# More than 6,000 requests, each followed by a read of the rows it wrote, on a shared 2-core
# machine.
@pytest.mark.timeout(1500)
def test_hostile_input_never_fails_and_refusals_write_nothing(
    live_server_hostile: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server = live_server_hostile
    market = market_build()
    schema = requests.get(f"{server.base_url}/api/v1/schema/?format=json", timeout=60).json()
    signed_in = log_in(server, market.alice.username)
    started = time.monotonic()
    with WriteLog() as writes:
        attack = Attack(server, writes)
        api_attack(attack, schema, market, api_token(market.alice))
        forms_attack(attack, market, signed_in)

    summary = f"{attack.summary()} in {time.monotonic() - started:.0f} s"
    with capsys.disabled():
        print(f"\n{summary}")
    unrequested = [
        route
        for route in url_patterns()
        if not any(
            re.fullmatch(ROUTE_PARAMETER.sub("[^/]+", route), path)
            for path in attack.requested_paths
        )
    ]
    assert not unrequested, f"pages no request reached: {unrequested}"
    assert sum(attack.sent.values()) >= 500, summary
    assert not attack.findings, "\n".join(
        [
            summary,
            *map(str, attack.findings[:80]),
            f"... {len(attack.findings)} in all",
            *server_errors(server.log()),
        ]
    )


def test_an_over_long_request_line_gets_gunicorns_414_as_the_schema_says(
    live_server_hostile: LiveServer,
) -> None:
    server = live_server_hostile
    schema = requests.get(f"{server.base_url}/api/v1/schema/?format=json", timeout=60).json()
    limit = settings.GUNICORN_REQUEST_LINE_LIMIT
    path = "/api/v1/offers/?q=" + "x" * limit

    answer = requests.get(f"{server.base_url}{path}", timeout=30)
    within = requests.get(f"{server.base_url}/api/v1/offers/?q=" + "x" * 3000, timeout=30)

    assert answer.status_code == 414
    assert "414" in schema["info"]["description"]
    assert f"longer than {limit} bytes" in schema["info"]["description"]
    # A line within the limit reaches the application, which answers in the API's shape (the
    # offers are public: a search past its 100 characters is refused as input).
    assert within.status_code == 400 and within.json()["code"] == "invalid"
    assert "q" in within.json()["extra"]["fields"]


def server_errors(log: str) -> list[str]:
    """Each 500 the server logged: its path, the last frame of ours and the exception."""
    found = []
    for block in re.split(r"\n(?=\S.*ERROR django\.request: Internal Server Error: )", log)[1:]:
        block = block.split("\n20", 1)[0]
        frames = re.findall(r'File "([^"]+)", line (\d+)', block)
        ours = [frame for frame in frames if ".venv" not in frame[0]] or frames
        lines = [line for line in block.splitlines() if re.match(r"^[\w.]+(Error|Exception)", line)]
        path = block.split("Internal Server Error: ", 1)[1].split("\n", 1)[0]
        where = ":".join(ours[-1]) if ours else "?"
        found.append(f"500 {path[:100]} at {where}: {lines[-1][:160] if lines else '?'}")
    return found
