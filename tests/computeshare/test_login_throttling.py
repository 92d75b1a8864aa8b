"""Failed log-ins, counted in Redis on the log-in page, the admin's and the API's token endpoint
(computeshare/login_throttling.py): a name is locked from the address that failed, with an
exponential back-off, and nowhere else; a name is locked for everyone only past a ceiling that a
guess from many addresses reaches; an address is locked past its own ceiling whatever the names;
the owner of a locked name gets in by a one-time link by mail. The count is the same for every
server process, and a forged X-Forwarded-For counts for nothing."""

import json
import re
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core import mail
from django.core.management import call_command
from django.db import connection
from django.test import Client

from computeshare import login_throttling
from computeshare.login_throttling import LOCKED_OUT_DETAIL, lock_of
from computeshare.models import User
from organizations.tasks import login_unlock_mail_task
from tests.factories import PASSWORD
from tests.workers import GunicornServer, database_url, worker_environment

LOGIN = "/login/"
ADMIN_LOGIN = "/admin/login/"
TOKEN = "/api/v1/auth/token/"


@pytest.fixture
def limits(settings: Any) -> Any:
    settings.LOGIN_FAILURE_LIMIT = 3
    settings.LOGIN_BACKOFF_SECONDS = 60
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 100
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 50
    settings.LOGIN_COOLOFF_SECONDS = 900
    return settings


def page_login(username: str, password: str, address: str = "198.18.0.1", path: str = LOGIN):
    return Client(REMOTE_ADDR=address).post(path, {"username": username, "password": password})


def token_login(username: str, password: str, address: str = "198.18.0.1", **headers: str):
    return Client(REMOTE_ADDR=address).post(
        TOKEN,
        {"username": username, "password": password},
        content_type="application/json",
        **headers,
    )


def make_user(username: str, email: str = "") -> User:
    return User.objects.create_user(username, email=email, password=PASSWORD)


def is_logged_in(response: Any) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.wsgi_request.session


def is_locked(response: Any) -> bool:
    return response.status_code == 429 and "Log-in locked for now" in response.content.decode()


# --- a name from one address ------------------------------------------------------------------


@pytest.mark.django_db
def test_typing_someones_name_locks_it_from_that_address_only(limits):
    alice = make_user("alice")

    # When a stranger sends three wrong passwords for alice from their address
    answers = [page_login("alice", "wrong", "198.18.0.66") for _ in range(3)]

    # Then the stranger is locked out of that name, even with the right password, for the
    # back-off, and alice logs in from her own address as ever
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    stranger = page_login("alice", PASSWORD, "198.18.0.66")
    assert is_locked(stranger)
    assert 59 <= int(stranger["Retry-After"]) <= 60
    assert "_auth_user_id" not in stranger.wsgi_request.session
    own = page_login("alice", PASSWORD, "198.18.0.1")
    assert is_logged_in(own)
    assert own.wsgi_request.session["_auth_user_id"] == str(alice.pk)
    # Another name from the stranger's address is not locked either
    make_user("bob")
    assert is_logged_in(page_login("bob", PASSWORD, "198.18.0.66"))


@pytest.mark.django_db
def test_each_failure_after_a_lock_ends_doubles_the_next_lock(limits):
    limits.LOGIN_BACKOFF_SECONDS = 1
    make_user("alice")
    for _ in range(3):
        page_login("alice", "wrong", "198.18.0.66")

    seen = []
    for _ in range(3):
        lock = lock_of("alice", "198.18.0.66")
        assert lock is not None and lock.scope == "name from this address"
        seen.append(lock.retry_after)
        time.sleep(lock.retry_after + 0.1)
        assert lock_of("alice", "198.18.0.66") is None
        assert page_login("alice", "wrong", "198.18.0.66").status_code == 200

    # 1, 2, 4 seconds, then 8
    assert seen == [1, 2, 4]
    assert lock_of("alice", "198.18.0.66").retry_after == 8


@pytest.mark.django_db
def test_the_admin_log_in_and_the_token_endpoint_lock_the_same_way(limits):
    User.objects.create_superuser("root", password=PASSWORD)

    answers = [page_login("root", "wrong", path=ADMIN_LOGIN) for _ in range(3)]
    page = page_login("root", PASSWORD, path=ADMIN_LOGIN)
    api = token_login("root", PASSWORD)
    elsewhere = token_login("root", PASSWORD, "198.18.0.9")

    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert is_locked(page)
    assert api.status_code == 429
    assert api.json()["code"] == "throttled"
    assert api.json()["detail"].startswith(LOCKED_OUT_DETAIL)
    assert 59 <= int(api["Retry-After"]) <= 60
    assert elsewhere.status_code == 200


@pytest.mark.django_db
def test_a_success_forgets_the_names_failures_but_not_the_addresss(limits):
    limits.LOGIN_FAILURE_LIMIT = 10
    limits.LOGIN_ADDRESS_FAILURE_LIMIT = 4
    make_user("mallory")
    make_user("alice")

    # Mallory guesses at alice, and logs in as herself in between to clear her count
    for _ in range(2):
        assert token_login("alice", "wrong", "198.18.0.7").status_code == 400
    assert token_login("mallory", PASSWORD, "198.18.0.7").status_code == 200
    for _ in range(2):
        assert token_login("alice", "wrong", "198.18.0.7").status_code == 400

    # The address's count stood: it is locked now, and its own log-in with it
    assert token_login("mallory", PASSWORD, "198.18.0.7").status_code == 429
    assert lock_of("alice", "198.18.0.7").scope == "address"


# --- the ceilings -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_only_a_guess_from_many_addresses_locks_a_name_for_everyone(limits):
    limits.LOGIN_ACCOUNT_FAILURE_LIMIT = 6
    make_user("alice")

    # Two failures from each of three addresses: none of them is locked on its own
    for index in range(6):
        page_login("alice", "wrong", f"203.0.113.{index // 2}")
    assert lock_of("alice", "203.0.113.0") is not None
    assert lock_of("alice", "203.0.113.0").scope == "name"

    # Then the name is locked from an address that never failed, for the cool-off
    fresh = page_login("alice", PASSWORD, "198.51.100.1")
    assert is_locked(fresh)
    assert 899 <= int(fresh["Retry-After"]) <= 900


@pytest.mark.django_db
def test_one_address_trying_many_names_is_locked_by_address(limits):
    limits.LOGIN_ADDRESS_FAILURE_LIMIT = 4
    make_user("alice")

    for index in range(4):
        page_login(f"guess{index}", "wrong", "198.18.0.5")

    assert is_locked(page_login("alice", PASSWORD, "198.18.0.5"))
    assert is_logged_in(page_login("alice", PASSWORD, "198.18.0.6"))


@pytest.mark.django_db
def test_names_are_counted_whatever_their_case(limits):
    make_user("alice")
    for name in ("alice", "ALICE", "Alice"):
        page_login(name, "wrong", "198.18.0.66")

    assert is_locked(page_login("alice", PASSWORD, "198.18.0.66"))


@pytest.mark.django_db
def test_a_forged_x_forwarded_for_counts_for_nothing_without_trusted_proxies(limits):
    make_user("alice")
    for n in range(3):
        token_login("alice", "wrong", "198.18.0.8", HTTP_X_FORWARDED_FOR=f"9.9.9.{n}")

    assert token_login("alice", PASSWORD, "198.18.0.8").status_code == 429


@pytest.mark.django_db
def test_an_operator_unlocks_a_name_an_address_and_everyone(limits):
    limits.LOGIN_ACCOUNT_FAILURE_LIMIT = 3
    limits.LOGIN_ADDRESS_FAILURE_LIMIT = 3
    make_user("alice")
    for index in range(3):
        page_login("alice", "wrong", f"203.0.113.{index}")
    assert is_locked(page_login("alice", PASSWORD, "198.51.100.1"))

    call_command("login_unlock", "alice")
    assert is_logged_in(page_login("alice", PASSWORD, "198.51.100.1"))

    for index in range(3):
        page_login(f"guess{index}", "wrong", "198.18.0.5")
    assert is_locked(page_login("alice", PASSWORD, "198.18.0.5"))
    call_command("login_unlock", "--address", "198.18.0.5")
    assert is_logged_in(page_login("alice", PASSWORD, "198.18.0.5"))

    for _ in range(3):
        page_login("alice", "wrong", "198.18.0.6")
    call_command("login_unlock", "--everyone")
    assert is_logged_in(page_login("alice", PASSWORD, "198.18.0.6"))


# --- the owner's link -------------------------------------------------------------------------


def _locked_out_by_a_distributed_guess(limits: Any) -> User:
    limits.LOGIN_ACCOUNT_FAILURE_LIMIT = 4
    alice = make_user("alice", email="alice@example.org")
    for index in range(4):
        page_login("alice", "wrong", f"203.0.113.{index}")
    return alice


def _requested_link(monkeypatch: pytest.MonkeyPatch, username: str) -> list[str]:
    """Asks for a link from the lockout page; the mail task run as a worker would."""
    sent: list[Any] = []
    monkeypatch.setattr(
        "organizations.services.login_unlock.enqueue_after_commit",
        lambda name, *args, **kwargs: sent.append((name, args)),
    )
    answer = Client(REMOTE_ADDR="198.51.100.1").post("/login/unlock/", {"username": username})
    assert answer.status_code == 200
    assert "If an account of that name has a mail address" in answer.content.decode()
    for name, args in sent:
        assert name == "organizations.tasks.login_unlock_mail_task"
        login_unlock_mail_task(*args)
    return [re.search(r"http://\S+/login/unlock/\S+/", message.body)[0] for message in mail.outbox]


@pytest.mark.django_db
def test_the_owner_of_a_locked_name_gets_in_once_by_a_mailed_link(limits, monkeypatch):
    alice = _locked_out_by_a_distributed_guess(limits)
    locked = page_login("alice", PASSWORD, "198.51.100.1")
    assert is_locked(locked)
    assert 'action="/login/unlock/"' in locked.content.decode()

    [link] = _requested_link(monkeypatch, "alice")

    assert mail.outbox[0].to == ["alice@example.org"]
    path = link.split("://", 1)[1].split("/", 1)[1]
    browser = Client(REMOTE_ADDR="198.51.100.1")
    page = browser.get(f"/{path}")
    assert page.status_code == 200 and "Log in as alice" in page.content.decode()
    wrong = browser.post(f"/{path}", {"password": "wrong"})
    assert wrong.status_code == 400 and "That is not the password" in wrong.content.decode()
    right = browser.post(f"/{path}", {"password": PASSWORD})
    assert right.status_code == 302
    assert right.wsgi_request.session["_auth_user_id"] == str(alice.pk)
    # Once: the link is dead after the log-in it allowed, and the lock stands for others
    again = Client(REMOTE_ADDR="198.51.100.2").get(f"/{path}")
    assert again.status_code == 400 and "This link no longer works" in again.content.decode()
    assert is_locked(page_login("alice", PASSWORD, "198.51.100.3"))


@pytest.mark.django_db
def test_a_link_dies_after_its_wrong_passwords_and_when_it_expires(limits, monkeypatch):
    _locked_out_by_a_distributed_guess(limits)
    [first] = _requested_link(monkeypatch, "alice")
    path = "/" + first.split("://", 1)[1].split("/", 1)[1]

    guesser = Client(REMOTE_ADDR="198.51.100.9")
    answers = [guesser.post(path, {"password": f"guess{n}"}) for n in range(3)]
    assert [answer.status_code for answer in answers] == [400, 400, 400]
    assert "This link no longer works" in answers[-1].content.decode()
    assert guesser.post(path, {"password": PASSWORD}).status_code == 400

    # A second mail within LOGIN_UNLOCK_MAIL_SECONDS is not sent; past the lifetime a link dies
    assert _requested_link(monkeypatch, "alice") == [first]
    login_throttling.failures_forget_all()
    mail.outbox.clear()
    [second] = _requested_link(monkeypatch, "alice")
    later = datetime.now() + timedelta(seconds=limits.LOGIN_UNLOCK_SECONDS + 5)
    monkeypatch.setattr(login_throttling.unlock_tokens, "_now", lambda: later)
    expired = Client().get("/" + second.split("://", 1)[1].split("/", 1)[1])
    assert expired.status_code == 400


@pytest.mark.django_db
def test_asking_for_a_link_tells_nothing_about_the_name(limits, monkeypatch):
    make_user("nomail")

    assert _requested_link(monkeypatch, "nobody") == []
    assert _requested_link(monkeypatch, "nomail") == []
    assert mail.outbox == []


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
    changes = {
        "first": {},
        "second": {},
        "proxied": {"TRUSTED_PROXY_COUNT": "1", "LOGIN_ADDRESS_FAILURE_LIMIT": "4"},
    }
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

    # Then the fourth failure, counted over both for the one real address, locks the name from
    # it on both
    assert [status for status, _, _ in answers] == [400, 400, 400, 400]
    for port in (first, second):
        status, headers, body = _post(port, TOKEN, {"username": "alice", "password": PASSWORD})
        assert status == 429
        assert body["code"] == "throttled"
        assert 55 <= int(headers["Retry-After"]) <= 60


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
    assert [status for status, _, _ in answers] == [400, 400, 400, 400]
    locked = _post(
        port, TOKEN, {"username": "alice", "password": PASSWORD}, {"X-Forwarded-For": "1.1.1.1"}
    )
    other = _post(
        port, TOKEN, {"username": "alice", "password": PASSWORD}, {"X-Forwarded-For": "8.8.8.8"}
    )
    assert locked[0] == 429
    assert other[0] == 200
