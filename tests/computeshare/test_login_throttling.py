"""Failed log-ins are counted by django-axes in Redis, by account and by client address apart, on
the log-in page, the admin's and the API's token endpoint; past the limit even the right
password is refused until the cool-off ends. The count is the same for every server process,
and a forged X-Forwarded-For counts for nothing."""

import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from computeshare.login_throttling import LOCKED_OUT_DETAIL
from computeshare.models import User
from tests.factories import PASSWORD
from tests.workers import GunicornServer, database_url, worker_environment

LOGIN = "/login/"
ADMIN_LOGIN = "/admin/login/"
TOKEN = "/api/v1/auth/token/"
COOL_OFF = 900


@pytest.fixture
def limit_three(settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(seconds=COOL_OFF)


def page_login(username: str, password: str, address: str = "198.18.0.1", path: str = LOGIN):
    return Client(REMOTE_ADDR=address).post(path, {"username": username, "password": password})


def token_login(username: str, password: str, address: str = "198.18.0.1", **headers: str):
    return Client(REMOTE_ADDR=address).post(
        TOKEN,
        {"username": username, "password": password},
        content_type="application/json",
        **headers,
    )


def make_user(username: str) -> User:
    return User.objects.create_user(username, password=PASSWORD)


def is_logged_in(response: Any) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.wsgi_request.session


# --- the pages --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_wrong_passwords_on_the_log_in_page_lock_the_account_until_the_cool_off(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(seconds=2)
    alice = make_user("alice")

    # When three wrong passwords are sent from one address
    answers = [page_login("alice", "wrong", "198.18.0.1") for _ in range(3)]

    # Then the third is answered with the lockout page, and the right password, even from
    # another address, is refused
    assert [answer.status_code for answer in answers] == [200, 200, 429]
    right = page_login("alice", PASSWORD, "198.18.0.2")
    assert right.status_code == 429
    assert right["Retry-After"] == "2"
    assert "Log-in locked for now" in right.content.decode()
    assert LOCKED_OUT_DETAIL in right.content.decode()
    assert "_auth_user_id" not in right.wsgi_request.session
    # And once the cool-off has passed it is accepted
    time.sleep(2.2)
    after = page_login("alice", PASSWORD, "198.18.0.2")
    assert is_logged_in(after)
    assert after.wsgi_request.session["_auth_user_id"] == str(alice.pk)


@pytest.mark.django_db
def test_the_admin_log_in_locks(limit_three):
    User.objects.create_superuser("root", password=PASSWORD)

    answers = [page_login("root", "wrong", path=ADMIN_LOGIN) for _ in range(3)]
    right = page_login("root", PASSWORD, "198.18.0.9", path=ADMIN_LOGIN)

    assert [answer.status_code for answer in answers] == [200, 200, 429]
    assert right.status_code == 429
    assert right["Retry-After"] == str(COOL_OFF)
    assert LOCKED_OUT_DETAIL in right.content.decode()
    assert "_auth_user_id" not in right.wsgi_request.session


@pytest.mark.django_db
def test_a_success_forgets_the_accounts_failures_but_not_the_addresss(limit_three):
    make_user("alice")
    make_user("mallory")

    # Given two failures for alice and two for mallory from mallory's address
    for _ in range(2):
        page_login("alice", "wrong", "198.18.0.1")
        page_login("mallory", "wrong", "198.18.0.66")
    # When alice and mallory each log in rightly
    assert is_logged_in(page_login("alice", PASSWORD, "198.18.0.1"))
    assert is_logged_in(page_login("mallory", PASSWORD, "198.18.0.66"))

    # Then alice's account starts afresh (two more failures from elsewhere do not lock it)
    assert [page_login("alice", "wrong", "198.18.0.2").status_code for _ in range(2)] == [200, 200]
    # But mallory's own log-in did not clear the address's failures: the next one locks it
    assert page_login("bob", "wrong", "198.18.0.66").status_code == 429


# --- the token endpoint -----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_token_endpoint_locks_with_429_in_the_error_shape(limit_three):
    make_user("alice")

    answers = [token_login("alice", "wrong") for _ in range(3)]
    right = token_login("alice", PASSWORD, "198.18.0.2")

    assert [answer.status_code for answer in answers] == [400, 400, 429]
    assert answers[0].json()["code"] == "invalid_credentials"
    for refused in (answers[2], right):
        assert refused.status_code == 429
        assert refused.json() == {
            "detail": f"{LOCKED_OUT_DETAIL} Expected available in {COOL_OFF} seconds.",
            "code": "throttled",
            "extra": {"retry_after_seconds": COOL_OFF},
        }
        assert refused["Retry-After"] == str(COOL_OFF)
        assert "token" not in refused.json()


@pytest.mark.django_db
def test_one_address_trying_many_usernames_is_locked_by_address(limit_three):
    make_user("alice")

    answers = [token_login(f"guess{number}", "password1", "198.18.0.66") for number in range(3)]
    from_there = token_login("alice", PASSWORD, "198.18.0.66")
    from_elsewhere = token_login("alice", PASSWORD, "198.18.0.2")

    assert [answer.status_code for answer in answers] == [400, 400, 429]
    assert from_there.status_code == 429
    assert from_elsewhere.status_code == 200
    assert from_elsewhere.json()["token"]


@pytest.mark.django_db
def test_a_username_spelled_like_an_address_does_not_lock_that_address(limit_three):
    make_user("alice")

    answers = [token_login("203.0.113.9", "wrong", "198.18.0.66") for _ in range(2)]
    from_that_address = token_login("alice", PASSWORD, "203.0.113.9")

    assert [answer.status_code for answer in answers] == [400, 400]
    assert from_that_address.status_code == 200


@pytest.mark.django_db
def test_a_forged_x_forwarded_for_counts_for_nothing_without_trusted_proxies(limit_three):
    make_user("alice")

    answers = [
        token_login(f"guess{n}", "wrong", "198.18.0.66", HTTP_X_FORWARDED_FOR=f"8.8.{n}.{n}")
        for n in range(3)
    ]

    assert [answer.status_code for answer in answers] == [400, 400, 429]


@pytest.mark.django_db
def test_an_operator_unlocks_an_account_and_everyone(limit_three):
    make_user("alice")
    make_user("bob")
    for _ in range(3):
        page_login("alice", "wrong", "198.18.0.1")
        page_login("bob", "wrong", "198.18.0.2")
    assert page_login("alice", PASSWORD, "198.18.0.3").status_code == 429

    call_command("axes_reset_username", "alice")

    assert is_logged_in(page_login("alice", PASSWORD, "198.18.0.3"))
    assert page_login("bob", PASSWORD, "198.18.0.4").status_code == 429
    call_command("axes_reset")
    assert is_logged_in(page_login("bob", PASSWORD, "198.18.0.4"))


@pytest.mark.django_db
def test_an_operator_unlocks_an_address(limit_three):
    make_user("alice")
    for number in range(3):
        page_login(f"guess{number}", "wrong", "198.18.0.66")
    assert page_login("alice", PASSWORD, "198.18.0.66").status_code == 429

    call_command("axes_reset_ip", "198.18.0.66")

    assert is_logged_in(page_login("alice", PASSWORD, "198.18.0.66"))


# --- real server processes --------------------------------------------------------------------


def _post(port: int, path: str, body: dict[str, str], headers: dict[str, str] | None = None):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 (loopback)
            return answer.status, dict(answer.headers), json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


@pytest.fixture(scope="module")
def servers(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Three gunicorn processes (one worker each) on the test database and Redis, started
    together: `first` and `second` reached directly, `proxied` behind one trusted proxy."""
    logs = tmp_path_factory.mktemp("gunicorn")
    changes = {"first": {}, "second": {}, "proxied": {"TRUSTED_PROXY_COUNT": "1"}}
    servers = {
        name: GunicornServer(
            worker_environment(
                database=database_url(connection.settings_dict),
                redis=_redis_url(),
                LOGIN_FAILURE_LIMIT="4",
                **changes[name],
            ),
            logs / f"{name}.log",
            ["--workers=1"],
            stop_signal=signal.SIGINT,  # gunicorn's quick shutdown
        )
        for name in changes
    }
    try:
        for server in servers.values():
            server.wait_ready()
        yield {name: server.port for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()


def _redis_url() -> str:
    from django.conf import settings

    return str(settings.REDIS_URL)


@pytest.mark.django_db(transaction=True)
def test_two_server_processes_share_the_count_whatever_x_forwarded_for_says(servers):
    make_user("alice")
    first, second = servers["first"], servers["second"]

    # When wrong passwords go to each process in turn, each with a forged X-Forwarded-For
    answers = [
        _post(
            (first, second)[n % 2],
            TOKEN,
            {"username": "alice", "password": "wrong"},
            {"X-Forwarded-For": f"9.9.{n}.{n}"},
        )
        for n in range(4)
    ]

    # Then the fourth failure, counted over both, locks the account on both
    assert [status for status, _, _ in answers] == [400, 400, 400, 429]
    for port in (first, second):
        status, headers, body = _post(port, TOKEN, {"username": "alice", "password": PASSWORD})
        assert status == 429
        assert body["code"] == "throttled"
        assert headers["Retry-After"] == str(COOL_OFF)


@pytest.mark.django_db(transaction=True)
def test_behind_one_trusted_proxy_the_address_it_appended_is_counted(servers):
    make_user("alice")
    port = servers["proxied"]

    # When one client (1.1.1.1, as the proxy appended it) tries four usernames, writing
    # something else to the left of the header each time
    answers = [
        _post(
            port,
            TOKEN,
            {"username": f"guess{n}", "password": "wrong"},
            {"X-Forwarded-For": f"9.9.{n}.{n}, 1.1.1.1"},
        )
        for n in range(4)
    ]

    # Then that address is locked, and another client behind the same proxy is not
    assert [status for status, _, _ in answers] == [400, 400, 400, 429]
    locked = _post(
        port, TOKEN, {"username": "alice", "password": PASSWORD}, {"X-Forwarded-For": "1.1.1.1"}
    )
    other = _post(
        port, TOKEN, {"username": "alice", "password": PASSWORD}, {"X-Forwarded-For": "8.8.8.8"}
    )
    assert locked[0] == 429
    assert other[0] == 200
