import pytest

pytestmark = pytest.mark.django_db


def test_healthz_is_ok_when_database_and_broker_answer(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"database": "ok", "broker": "ok"}
    assert "no-cache" in response["Cache-Control"]


def test_healthz_is_503_naming_the_broker_when_it_does_not_answer(client, settings):
    # A real connection attempt to a loopback port where nothing listens.
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json() == {"database": "ok", "broker": "unavailable"}


def test_healthz_needs_no_login_and_only_answers_get(client):
    assert client.get("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405
