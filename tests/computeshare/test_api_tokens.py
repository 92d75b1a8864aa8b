"""API tokens: kept as digests, several per user, each with an expiry, a time of last use and a
revocation; the `Authorization: Token <key>` header unchanged for clients."""

import hashlib
import importlib
from datetime import timedelta

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from computeshare import services
from computeshare.models import ApiToken
from tests.conftest import client_for
from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

API = "/api/v1"


def with_key(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def assert_expires_days_after_creation(token: ApiToken, days: int) -> None:
    # Both times are taken during the one request, microseconds apart.
    assert token.expires_at is not None
    assert abs(token.expires_at - token.created_at - timedelta(days=days)) < timedelta(seconds=1)


def token_rows() -> list[tuple]:
    return list(ApiToken.objects.order_by("pk").values_list("pk", "revoked_at", "last_used_at"))


# --- at rest -------------------------------------------------------------------------------------


def test_the_database_holds_a_digest_and_never_the_key(user):
    token, key = services.api_token_create(user=user, name="laptop")

    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM computeshare_apitoken")
        stored = [str(value) for row in cursor.fetchall() for value in row]
    assert key.startswith("cs_") and len(key) == 58
    assert not any(key in value for value in stored)
    assert token.prefix == key[:15]
    assert token.digest == hashlib.sha256(key.encode()).hexdigest()


def test_a_token_authenticates_with_the_unchanged_header(user):
    _, key = services.api_token_create(user=user, name="laptop")

    answer = APIClient().get(f"{API}/me/", HTTP_AUTHORIZATION=f"Token {key}")

    assert answer.status_code == 200
    assert answer.json()["username"] == user.username


def test_a_wrong_secret_behind_a_real_prefix_is_refused(user):
    token, key = services.api_token_create(user=user, name="laptop")
    forged = key[:15] + ("A" if key[15] != "A" else "B") + key[16:]

    answer = with_key(forged).get(f"{API}/me/")

    assert answer.status_code == 401
    assert answer.json() == {
        "detail": "Invalid token.",
        "code": "authentication_failed",
        "extra": {},
    }
    token.refresh_from_db()
    assert token.last_used_at is None


# --- expiry, revocation, inactive users -----------------------------------------------------------


def test_an_expired_token_is_401_token_expired(user):
    token, key = services.api_token_create(user=user, name="ci", expires_in_days=1)
    assert token.expires_at is not None
    in_a_day = with_key(key).get(f"{API}/me/")
    ApiToken.objects.filter(pk=token.pk).update(
        created_at=timezone.now() - timedelta(days=2),
        expires_at=timezone.now() - timedelta(seconds=1),
    )

    answer = with_key(key).get(f"{API}/me/")

    assert in_a_day.status_code == 200
    assert answer.status_code == 401
    assert answer["WWW-Authenticate"] == "Token"
    assert answer.json() == {
        "detail": "This token has expired.",
        "code": "token_expired",
        "extra": {},
    }


def test_a_revoked_token_is_401_token_revoked_and_others_keep_working(user):
    laptop, laptop_key = services.api_token_create(user=user, name="laptop")
    _, ci_key = services.api_token_create(user=user, name="ci")

    revoke = client_for(user).delete(f"{API}/auth/tokens/{laptop.uuid}/")
    answer = with_key(laptop_key).get(f"{API}/me/")

    assert revoke.status_code == 204
    assert answer.status_code == 401
    assert answer.json()["code"] == "token_revoked"
    assert with_key(ci_key).get(f"{API}/me/").status_code == 200


def test_an_inactive_users_token_is_401(user):
    _, key = services.api_token_create(user=user, name="laptop")
    user.is_active = False
    user.save()

    answer = with_key(key).get(f"{API}/me/")

    assert answer.status_code == 401
    assert answer.json() == {
        "detail": "User inactive or deleted.",
        "code": "authentication_failed",
        "extra": {},
    }


@pytest.mark.parametrize(
    "header",
    [
        "Token",
        "Token a b",
        "Token " + "x" * 4_000,
        "Token cs_\x00" + "a" * 40,
        "Token ١٢٣٤٥٦٧٨٩٠١٢٣٤٥٦",
    ],
)
def test_malformed_keys_are_401_without_reaching_a_token(user, header):
    services.api_token_create(user=user, name="laptop")
    before = token_rows()

    answer = APIClient().get(f"{API}/me/", HTTP_AUTHORIZATION=header)

    assert answer.status_code == 401
    assert answer.json()["code"] == "authentication_failed"
    assert token_rows() == before


# --- several tokens, last use -------------------------------------------------------------------


def test_several_named_tokens_work_at_once(user):
    made = [services.api_token_create(user=user, name=name) for name in ("laptop", "ci", "cron")]

    answers = [with_key(key).get(f"{API}/me/").status_code for _, key in made]

    assert answers == [200, 200, 200]
    assert sorted(ApiToken.objects.filter(user=user).values_list("name", flat=True)) == [
        "ci",
        "cron",
        "laptop",
        "tests",
    ]


def test_last_use_is_written_once_a_minute_at_most(user):
    token, key = services.api_token_create(user=user, name="laptop")
    client = with_key(key)

    with CaptureQueriesContext(connection) as first:
        client.get(f"{API}/me/")
    token.refresh_from_db()
    first_use = token.last_used_at
    with CaptureQueriesContext(connection) as second:
        client.get(f"{API}/me/")
    token.refresh_from_db()

    assert first_use is not None
    assert token.last_used_at == first_use
    updates = [query for query in first.captured_queries if query["sql"].startswith("UPDATE")]
    assert len(updates) == 1
    assert not any(query["sql"].startswith("UPDATE") for query in second.captured_queries)

    # A minute later the next request writes it again.
    a_minute_ago = first_use - timedelta(minutes=1)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=a_minute_ago)
    client.get(f"{API}/me/")
    token.refresh_from_db()
    assert token.last_used_at > first_use


# --- the endpoints --------------------------------------------------------------------------------


def test_log_in_accepts_a_name_and_an_expiry(api_client, user):
    answer = api_client.post(
        f"{API}/auth/token/",
        {"username": user.username, "password": PASSWORD, "name": "ci", "expires_in_days": 30},
        format="json",
    )

    token = ApiToken.objects.get(user=user, name="ci")
    assert answer.status_code == 200
    assert answer.json() == {
        "token": answer.json()["token"],
        "id": str(token.uuid),
        "name": "ci",
        "expires_at": token.expires_at.isoformat().replace("+00:00", "Z"),
    }
    assert_expires_days_after_creation(token, 30)
    assert with_key(answer.json()["token"]).get(f"{API}/me/").status_code == 200


def test_logging_in_again_under_a_name_replaces_that_names_key_only(api_client, user, settings):
    """A script that logs in at every run never reaches the limit: each log-in's key replaces
    the last one of the same name; tokens of other names keep working."""
    settings.API_TOKENS_PER_USER_MAX = 3
    _, kept = services.api_token_create(user=user, name="laptop")

    def log_in() -> str:
        answer = api_client.post(
            f"{API}/auth/token/",
            {"username": user.username, "password": PASSWORD},
            format="json",
        )
        assert answer.status_code == 200, answer.json()
        return answer.json()["token"]

    keys = [log_in() for _ in range(5)]

    assert [with_key(key).get(f"{API}/me/").status_code for key in keys] == [401] * 4 + [200]
    assert with_key(kept).get(f"{API}/me/").status_code == 200
    live = ApiToken.objects.filter(user=user, revoked_at__isnull=True)
    # (and the one the factory made for the tests)
    assert sorted(live.values_list("name", flat=True)) == ["API log-in", "laptop", "tests"]


def test_create_shows_the_key_once_and_the_list_never(user):
    client = client_for(user)

    made = client.post(
        f"{API}/auth/tokens/", {"name": "laptop", "expires_in_days": 7}, format="json"
    )
    listed = client.get(f"{API}/auth/tokens/")

    assert made.status_code == 201
    body = made.json()
    token = ApiToken.objects.get(uuid=body["id"])
    assert body == {
        "id": str(token.uuid),
        "name": "laptop",
        "prefix": body["token"][:15],
        "created_at": body["created_at"],
        "expires_at": body["expires_at"],
        "last_used_at": None,
        "revoked_at": None,
        "status": "active",
        "token": body["token"],
    }
    assert_expires_days_after_creation(token, 7)
    assert listed.status_code == 200
    results = listed.json()["results"]
    # The tests' own token (client_for) and the new one, newest first.
    assert [row["name"] for row in results] == ["laptop", "tests"]
    assert {row["id"]: set(row) for row in results}[body["id"]] == set(body) - {"token"}
    assert body["token"] not in listed.content.decode()
    assert token.digest not in listed.content.decode()


def test_the_list_shows_revoked_and_expired_states_and_only_the_callers_tokens(user):
    other = UserFactory()
    services.api_token_create(user=other, name="theirs")
    revoked, _ = services.api_token_create(user=user, name="old laptop")
    services.api_token_revoke(token=revoked)
    expired, _ = services.api_token_create(user=user, name="old ci", expires_in_days=1)
    ApiToken.objects.filter(pk=expired.pk).update(
        created_at=timezone.now() - timedelta(days=3),
        expires_at=timezone.now() - timedelta(days=2),
    )

    results = client_for(user).get(f"{API}/auth/tokens/").json()["results"]

    assert {row["name"]: row["status"] for row in results} == {
        "tests": "active",
        "old laptop": "revoked",
        "old ci": "expired",
    }


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({}, {"name": ["This field is required."]}),
        ({"name": "   "}, {"name": ["This field may not be blank."]}),
        (
            {"name": "x", "expires_in_days": 0},
            {"expires_in_days": ["Ensure this value is greater than or equal to 1."]},
        ),
        (
            {"name": "x", "expires_in_days": "soon"},
            {"expires_in_days": ["A valid integer is required."]},
        ),
    ],
)
def test_invalid_input_is_400_and_makes_nothing(user, body, fields):
    client = client_for(user)
    before = token_rows()

    answer = client.post(f"{API}/auth/tokens/", body, format="json")

    assert answer.status_code == 400
    assert answer.json() == {
        "detail": "The input is not valid.",
        "code": "invalid",
        "extra": {"fields": fields},
    }
    assert token_rows() == before


def test_revoking_another_users_token_is_404_and_changes_nothing(user):
    other = UserFactory()
    theirs, their_key = services.api_token_create(user=other, name="theirs")
    client = client_for(user)
    before = token_rows()

    answer = client.delete(f"{API}/auth/tokens/{theirs.uuid}/")

    assert answer.status_code == 404
    assert answer.json()["code"] == "not_found"
    assert token_rows() == before
    theirs.refresh_from_db()
    assert theirs.revoked_at is None
    assert with_key(their_key).get(f"{API}/me/").status_code == 200


def test_revoking_twice_keeps_the_first_time(user):
    token, _ = services.api_token_create(user=user, name="laptop")
    client = client_for(user)

    client.delete(f"{API}/auth/tokens/{token.uuid}/")
    token.refresh_from_db()
    first = token.revoked_at
    again = client.delete(f"{API}/auth/tokens/{token.uuid}/")
    token.refresh_from_db()

    assert again.status_code == 204
    assert token.revoked_at == first


def test_the_per_user_limit_counts_live_tokens_only(user, settings):
    settings.API_TOKENS_PER_USER_MAX = 3
    client = client_for(user)  # with the user's first live token, made with the user
    services.api_token_create(user=user, name="two")
    third, _ = services.api_token_create(user=user, name="three")
    before = token_rows()

    refused = client.post(f"{API}/auth/tokens/", {"name": "four"}, format="json")
    refused_log_in = APIClient().post(
        f"{API}/auth/token/", {"username": user.username, "password": PASSWORD}, format="json"
    )
    unchanged = token_rows()
    client.delete(f"{API}/auth/tokens/{third.uuid}/")
    after_revoking = client.post(f"{API}/auth/tokens/", {"name": "four"}, format="json")

    for answer in (refused, refused_log_in):
        assert answer.status_code == 409
        assert answer.json() == {
            "detail": "You have as many live API tokens as one may have; revoke one first.",
            "code": "token_limit_reached",
            "extra": {"limit": 3},
        }
    assert unchanged == before
    assert after_revoking.status_code == 201


def test_the_endpoints_need_a_signed_in_caller(user):
    token, _ = services.api_token_create(user=user, name="laptop")

    answers = [
        APIClient().get(f"{API}/auth/tokens/"),
        APIClient().post(f"{API}/auth/tokens/", {"name": "x"}, format="json"),
        APIClient().delete(f"{API}/auth/tokens/{token.uuid}/"),
    ]

    assert [answer.status_code for answer in answers] == [401, 401, 401]
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_schema_documents_the_endpoints_and_the_scheme(client):
    schema = client.get(f"{API}/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    paths = schema["paths"]
    assert set(paths[f"{API}/auth/tokens/"]) == {"get", "post"}
    assert set(paths[f"{API}/auth/tokens/{{token_id}}/"]) == {"delete"}
    created = paths[f"{API}/auth/tokens/"]["post"]["responses"]
    assert set(created) == {"201", "400", "401", "409"}
    assert schema["components"]["securitySchemes"]["tokenAuth"] == {
        "type": "apiKey",
        "in": "header",
        "name": "Authorization",
        "description": 'Token-based authentication with required prefix "Token"',
    }
    assert paths[f"{API}/auth/tokens/"]["get"]["security"] == [
        {"tokenAuth": []},
        {"cookieAuth": []},
    ]
    log_in = schema["components"]["schemas"]["Token"]["properties"]
    assert set(log_in) == {"token", "id", "name", "expires_at"}


# --- keys from before ----------------------------------------------------------------------------


def test_a_key_of_drfs_old_table_becomes_a_hashed_token_that_still_works(user):
    """The data migration's function, run on a real row of the old table."""
    migration = importlib.import_module("computeshare.migrations.0003_api_tokens_from_drf_tokens")
    old_key = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"
    made = timezone.now() - timedelta(days=400)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
            "created timestamp with time zone NOT NULL, user_id bigint NOT NULL)"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, %s)", [old_key, made, user.pk])

    with connection.schema_editor() as editor:
        migration.tokens_from_drf_tokens(apps, editor)

    token = ApiToken.objects.get(user=user, name="migrated")
    assert (token.prefix, token.created_at) == (old_key[:15], made)
    assert token.digest == hashlib.sha256(old_key.encode()).hexdigest()
    assert "authtoken_token" not in connection.introspection.table_names()
    answer = with_key(old_key).get(f"{API}/me/")
    assert answer.status_code == 200
    assert answer.json()["username"] == user.username


def test_the_migration_has_nothing_to_do_without_the_old_table(user):
    migration = importlib.import_module("computeshare.migrations.0003_api_tokens_from_drf_tokens")
    before = token_rows()

    with connection.schema_editor() as editor:
        migration.tokens_from_drf_tokens(apps, editor)

    assert token_rows() == before


# --- the page -------------------------------------------------------------------------------------


def test_the_page_makes_a_token_and_shows_its_key_once(client, user):
    client.force_login(user)

    made = client.post(reverse("api-tokens"), {"name": "laptop", "expires_in_days": "30"})
    shown_again = client.get(reverse("api-tokens"))

    token = ApiToken.objects.get(user=user, name="laptop")
    page = made.content.decode()
    key = page.split('id="api-token" value="')[1].split('"')[0]
    assert made.status_code == 200
    assert "no-store" in made["Cache-Control"]
    assert "Copy its key now: it is shown this once." in page
    assert token.name == "laptop"
    assert_expires_days_after_creation(token, 30)
    assert token.digest == hashlib.sha256(key.encode()).hexdigest()
    assert key not in shown_again.content.decode()
    assert token.prefix in shown_again.content.decode()
    assert with_key(key).get(f"{API}/me/").status_code == 200


def test_the_page_refuses_past_the_limit_beside_the_form(client, user, settings):
    settings.API_TOKENS_PER_USER_MAX = 2  # the user's tests token and one more
    services.api_token_create(user=user, name="second")
    client.force_login(user)

    answer = client.post(reverse("api-tokens"), {"name": "third", "expires_in_days": ""})

    assert answer.status_code == 400
    assert "revoke one first" in answer.content.decode()
    assert ApiToken.objects.filter(user=user).count() == 2


def test_the_page_revokes_with_a_post_and_not_anothers(client, user):
    mine, my_key = services.api_token_create(user=user, name="laptop")
    theirs, _ = services.api_token_create(user=UserFactory(), name="theirs")
    client.force_login(user)

    by_get = client.get(reverse("api-token-revoke", args=[mine.uuid]))
    revoked = client.post(reverse("api-token-revoke", args=[mine.uuid]), follow=True)
    not_mine = client.post(reverse("api-token-revoke", args=[theirs.uuid]))

    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert by_get.status_code == 405
    assert "The token laptop was revoked; it no longer works." in revoked.content.decode()
    assert mine.revoked_at is not None
    assert with_key(my_key).get(f"{API}/me/").status_code == 401
    assert not_mine.status_code == 404
    assert theirs.revoked_at is None


def test_the_page_needs_a_signed_in_user(client):
    answer = client.get(reverse("api-tokens"))

    assert answer.status_code == 302
    assert answer["Location"].startswith(reverse("login"))


# --- the shared cache of recently used tokens ----------------------------------------------------


@pytest.fixture
def token_cache_on(settings):
    """The cache as deployed (the test settings turn it off)."""
    settings.API_TOKEN_CACHE_SECONDS = 60


def token_queries(client: APIClient, path: str = f"{API}/me/") -> tuple[int, int]:
    """The answer's status and how many of its queries read or wrote the tokens' table."""
    with CaptureQueriesContext(connection) as queries:
        answer = client.get(path)
    return answer.status_code, sum(
        "computeshare_apitoken" in query["sql"] for query in queries.captured_queries
    )


def test_a_recently_used_token_comes_from_the_cache(user, token_cache_on):
    _, key = services.api_token_create(user=user, name="laptop")
    client = with_key(key)

    # The first request reads the token and writes its first use; the next ones neither.
    assert token_queries(client) == (200, 2)
    assert token_queries(client) == (200, 0)
    answer = client.get(f"{API}/me/")
    assert answer.json()["username"] == user.username


def test_revoking_a_cached_token_takes_effect_at_once(user, token_cache_on):
    laptop, laptop_key = services.api_token_create(user=user, name="laptop")
    _, ci_key = services.api_token_create(user=user, name="ci")
    assert token_queries(with_key(laptop_key)) == (200, 2)
    assert token_queries(with_key(laptop_key)) == (200, 0)

    revoke = with_key(ci_key).delete(f"{API}/auth/tokens/{laptop.uuid}/")
    answer = with_key(laptop_key).get(f"{API}/me/")

    assert revoke.status_code == 204
    assert answer.status_code == 401
    assert answer.json()["code"] == "token_revoked"
    # Still refused later: a revoked token is never cached again.
    assert with_key(laptop_key).get(f"{API}/me/").json()["code"] == "token_revoked"
    assert token_queries(with_key(ci_key))[0] == 200


def test_logging_in_again_under_a_name_ends_the_cached_key_at_once(
    api_client, user, token_cache_on
):
    login = {"username": user.username, "password": PASSWORD, "name": "cron"}
    first = api_client.post(f"{API}/auth/token/", login, format="json").json()["token"]
    assert token_queries(with_key(first)) == (200, 2)
    assert token_queries(with_key(first)) == (200, 0)

    second = api_client.post(f"{API}/auth/token/", login, format="json").json()["token"]

    assert with_key(first).get(f"{API}/me/").json()["code"] == "token_revoked"
    assert with_key(second).get(f"{API}/me/").status_code == 200


def test_deactivating_or_deleting_the_user_ends_cached_tokens_at_once(user, token_cache_on):
    _, key = services.api_token_create(user=user, name="laptop")
    assert token_queries(with_key(key)) == (200, 2)

    user.is_active = False
    user.save()
    assert with_key(key).get(f"{API}/me/").status_code == 401

    user.is_active = True
    user.save()
    assert with_key(key).get(f"{API}/me/").status_code == 200
    user.delete()
    assert with_key(key).get(f"{API}/me/").json()["code"] == "authentication_failed"


def test_an_edited_token_and_an_expired_one_are_not_served_from_the_cache(user, token_cache_on):
    token, key = services.api_token_create(user=user, name="laptop", expires_in_days=1)
    assert token_queries(with_key(key)) == (200, 2)

    # An admin's edit (a save) marks it stale: the new expiry applies at once.
    token.created_at = timezone.now() - timedelta(days=2)
    token.expires_at = timezone.now() - timedelta(seconds=1)
    token.save()

    assert with_key(key).get(f"{API}/me/").json()["code"] == "token_expired"


def test_a_stale_read_cannot_put_a_revoked_token_back(user, token_cache_on):
    """A request that read the token just before its revocation committed adds it after the
    revocation marked it stale: the mark wins."""
    from computeshare import token_cache

    token, key = services.api_token_create(user=user, name="laptop")
    read_before = services.api_token_authenticate(key=key)  # read and cached
    services.api_token_revoke(token=token)
    token_cache.add(read_before, now=timezone.now(), last_used_resolution=timedelta(minutes=1))

    assert token_cache.get(token.digest) is None
    assert with_key(key).get(f"{API}/me/").json()["code"] == "token_revoked"


def test_the_cache_keeps_a_token_no_longer_than_its_next_write_of_last_use(user, token_cache_on):
    from computeshare import token_cache

    token, _ = services.api_token_create(user=user, name="laptop")
    now = timezone.now()
    minute = timedelta(minutes=1)

    token.last_used_at = now - timedelta(seconds=59, milliseconds=500)
    token_cache.add(token, now=now, last_used_resolution=minute)
    assert token_cache.get(token.digest) is None  # due within the second: not cached

    token.last_used_at = now - timedelta(seconds=30)
    token_cache.add(token, now=now, last_used_resolution=minute)
    assert token_cache.get(token.digest) is not None


def test_without_redis_tokens_still_authenticate_from_the_database(user, token_cache_on, settings):
    _, key = services.api_token_create(user=user, name="laptop")
    # A Redis that refuses connections (port 9, discard, has no server here).
    settings.CACHES = {
        **settings.CACHES,
        "default": {
            "BACKEND": "computeshare.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",
        },
    }

    assert token_queries(with_key(key)) == (200, 2)
    assert token_queries(with_key(key)) == (200, 1)  # read again; the first use is recorded
