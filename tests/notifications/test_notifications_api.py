"""The notifications API: the caller's list, the unread count, mark read, the preferences; another
user's notification is 404, bad input 400 with nothing changed."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from notifications.models import Notification, NotificationPreference
from notifications.services import NotificationEvent, notifications_record
from tests.factories import UserFactory, token_for

pytestmark = pytest.mark.django_db

API = "/api/v1/notifications/"


def api_client(user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
    return client


def tell(user, key: str, kind: str = "job_ended") -> Notification:
    notifications_record(
        [
            NotificationEvent(
                kind=kind, key=key, title=f"Told {key}", link="/jobs/", user_ids=[user.pk]
            )
        ]
    )
    return Notification.objects.get(user=user, key=key)


def test_the_list_shows_the_caller_s_own_newest_first_and_counts_the_unread():
    mia, tom = UserFactory(username="mia"), UserFactory(username="tom")
    first = tell(mia, "one")
    second = tell(mia, "two")
    tell(tom, "three")

    answer = api_client(mia).get(API)
    count = api_client(mia).get(f"{API}unread-count/")

    assert answer.status_code == 200
    body = answer.json()
    assert body["count"] == 2
    assert [row["id"] for row in body["results"]] == [str(second.uuid), str(first.uuid)]
    assert body["results"][0] | {"created_at": None} == {
        "id": str(second.uuid),
        "kind": "job_ended",
        "title": "Told two",
        "body": "",
        "link": "/jobs/",
        "organization": None,
        "created_at": None,
        "read_at": None,
        "is_read": False,
    }
    assert count.json() == {"unread": 2}


def test_marking_one_read_and_then_all():
    mia = UserFactory(username="mia")
    first = tell(mia, "one")
    tell(mia, "two")
    client = api_client(mia)

    answer = client.post(f"{API}{first.uuid}/read/")
    again = client.post(f"{API}{first.uuid}/read/")
    unread = client.get(f"{API}?unread=true").json()

    assert answer.status_code == 200 and answer.json()["is_read"] is True
    assert again.json()["read_at"] == answer.json()["read_at"]
    assert [row["title"] for row in unread["results"]] == ["Told two"]
    assert client.post(f"{API}read-all/").json() == {"marked_read": 1}
    assert client.get(f"{API}unread-count/").json() == {"unread": 0}


def test_another_user_s_notification_is_not_found_and_stays_unread():
    mia, tom = UserFactory(username="mia"), UserFactory(username="tom")
    theirs = tell(tom, "secret")

    answer = api_client(mia).post(f"{API}{theirs.uuid}/read/")

    assert (answer.status_code, answer.json()["code"]) == (404, "not_found")
    theirs.refresh_from_db()
    assert theirs.read_at is None


def test_without_a_token_every_endpoint_is_401():
    from rest_framework.test import APIClient

    client = APIClient()
    for method, path in [
        ("get", API),
        ("get", f"{API}unread-count/"),
        ("post", f"{API}read-all/"),
        ("get", f"{API}preferences/"),
        ("put", f"{API}preferences/"),
    ]:
        assert getattr(client, method)(path).status_code == 401, path


def test_a_bad_unread_filter_is_400():
    answer = api_client(UserFactory()).get(f"{API}?unread=maybe")
    assert (answer.status_code, answer.json()["code"]) == (400, "invalid")


def test_preferences_default_to_both_and_change_per_kind():
    mia = UserFactory(username="mia")
    client = api_client(mia)

    before = client.get(f"{API}preferences/").json()["preferences"]
    answer = client.put(
        f"{API}preferences/",
        {"preferences": {"job_ended": {"by_email": False}, "invitation": {"in_site": False}}},
        format="json",
    )

    assert len(before) == 12
    assert all(row["in_site"] and row["by_email"] for row in before)
    assert before[0] == {
        "kind": "bid_outbid",
        "description": "Outbid or lost a bid",
        "in_site": True,
        "by_email": True,
    }
    assert answer.status_code == 200
    changed = {
        row["kind"]: (row["in_site"], row["by_email"]) for row in answer.json()["preferences"]
    }
    assert changed["job_ended"] == (True, False)
    assert changed["invitation"] == (False, True)
    assert changed["top_up_failed"] == (True, True)


@pytest.mark.parametrize(
    "body",
    [
        {"preferences": {"job_ended": {"by_email": False}, "no_such_kind": {"in_site": False}}},
        {"preferences": {"job_ended": {"by_email": "no"}}},
        {"preferences": {"job_ended": {"loudly": True}}},
        {"preferences": {"job_ended": False}},
        {"preferences": []},
        {},
        ["job_ended"],
    ],
)
def test_a_bad_preference_change_is_400_and_changes_nothing(body):
    mia = UserFactory(username="mia")

    answer = api_client(mia).put(f"{API}preferences/", body, format="json")

    assert (answer.status_code, answer.json()["code"]) == (400, "invalid")
    assert NotificationPreference.objects.count() == 0


def test_the_list_costs_the_same_queries_for_two_and_for_twenty():
    mia = UserFactory(username="mia")
    client = api_client(mia)
    for number in range(2):
        tell(mia, f"a{number}")
    with CaptureQueriesContext(connection) as few:
        client.get(API)
    for number in range(18):
        tell(mia, f"b{number}")
    with CaptureQueriesContext(connection) as many:
        answer = client.get(API)
    assert answer.json()["count"] == 20
    assert len(many) == len(few)


def test_the_endpoints_are_in_the_openapi_schema():
    schema = api_client(UserFactory()).get("/api/v1/schema/?format=json").json()
    for path in [
        "/api/v1/notifications/",
        "/api/v1/notifications/unread-count/",
        "/api/v1/notifications/read-all/",
        "/api/v1/notifications/preferences/",
        "/api/v1/notifications/{notification_id}/read/",
    ]:
        assert path in schema["paths"], path
