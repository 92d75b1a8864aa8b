"""Concurrent requests with the same Idempotency-Key create one organization."""

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from organizations.models import Organization
from tests.factories import UserFactory, token_for


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_idempotency_key_create_once():
    user = UserFactory()
    header = f"Token {token_for(user)}"
    barrier = threading.Barrier(8)
    answers: list[tuple[int, str]] = []

    def post() -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=header)
        barrier.wait()
        response = client.post(
            "/api/v1/organizations/",
            {"name": "Race Lab"},
            format="json",
            HTTP_IDEMPOTENCY_KEY="race",
        )
        answers.append((response.status_code, response.json().get("id", "")))
        connection.close()

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert Organization.objects.count() == 1
    organization_id = str(Organization.objects.get().uuid)
    assert answers == [(201, organization_id)] * 8
