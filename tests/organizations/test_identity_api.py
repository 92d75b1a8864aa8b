"""The identity and organization endpoints of docs/api.md, with their refusals (an organization
itself, with its wallet: tests/portal/test_organizations_api.py). Every refusal also checks that
nothing was written."""

import pytest

from computeshare.models import ApiToken, IdempotencyRecord, User
from organizations.models import Invitation, Membership, Organization
from tests.conftest import client_for
from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def snapshot() -> tuple[int, int, int, int, int, int]:
    return (
        User.objects.count(),
        Organization.objects.count(),
        Membership.objects.count(),
        Invitation.objects.count(),
        ApiToken.objects.count(),
        IdempotencyRecord.objects.count(),
    )


# --- tokens -------------------------------------------------------------------------------


def test_each_log_in_issues_a_new_key_that_replaces_the_last_of_its_name(api_client, user):
    def log_in(**name: str) -> dict:
        answer = api_client.post(
            "/api/v1/auth/token/",
            {"username": user.username, "password": PASSWORD, **name},
            format="json",
        )
        assert answer.status_code == 200
        return answer.json()

    first, second, other = log_in(), log_in(), log_in(name="ci")

    tokens = {str(token.uuid): token for token in ApiToken.objects.filter(user=user)}
    for answer, name in ((first, "API log-in"), (second, "API log-in"), (other, "ci")):
        assert answer == {
            "token": answer["token"],
            "id": answer["id"],
            "name": name,
            "expires_at": None,
        }
        assert tokens[answer["id"]].prefix == answer["token"][:15]
    assert len({first["token"], second["token"], other["token"]}) == 3
    works = {}
    for label, answer in (("first", first), ("second", second), ("other", other)):
        api_client.credentials(HTTP_AUTHORIZATION=f"Token {answer['token']}")
        works[label] = api_client.get("/api/v1/me/").status_code
    assert works == {"first": 401, "second": 200, "other": 200}


def test_wrong_password_is_invalid_credentials_and_writes_nothing(api_client, user):
    before = snapshot()

    response = api_client.post(
        "/api/v1/auth/token/", {"username": user.username, "password": "nope"}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "detail": "Unable to log in with the username and password given.",
        "code": "invalid_credentials",
        "extra": {},
    }
    assert snapshot() == before


def test_inactive_user_gets_no_token(api_client, user):
    user.is_active = False
    user.save()
    before = snapshot()

    response = api_client.post(
        "/api/v1/auth/token/", {"username": user.username, "password": PASSWORD}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_credentials"
    assert "token" not in response.json()
    assert snapshot() == before


def test_token_request_missing_fields_is_invalid(api_client, db):
    response = api_client.post("/api/v1/auth/token/", {"username": "x"}, format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert body["extra"]["fields"] == {"password": ["This field is required."]}


def test_malformed_json_is_400_and_writes_nothing(api_client, team):
    client = client_for(team.admin)
    before = snapshot()

    response = client.post(
        "/api/v1/organizations/", data='{"name": "Broken', content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == "malformed_request"
    assert set(response.json()) == {"detail", "code", "extra"}
    assert snapshot() == before


def test_a_json_array_body_is_invalid_not_a_crash(team):
    response = client_for(team.admin).post("/api/v1/organizations/", [1, 2], format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/me/"),
        ("get", "/api/v1/organizations/"),
        ("post", "/api/v1/organizations/"),
        ("get", "/api/v1/organizations/{org}/"),
        ("get", "/api/v1/organizations/{org}/members/"),
        ("post", "/api/v1/organizations/{org}/members/"),
    ],
)
def test_missing_or_wrong_token_is_401(api_client, team, method, path):
    path = path.format(org=team.organization.uuid)
    before = snapshot()

    anonymous = getattr(api_client, method)(path, {"name": "X"}, format="json")
    api_client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    wrong = getattr(api_client, method)(path, {"name": "X"}, format="json")

    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "not_authenticated"
    assert anonymous["WWW-Authenticate"] == "Token"
    assert wrong.status_code == 401
    assert wrong.json()["code"] == "authentication_failed"
    assert snapshot() == before


# --- me -----------------------------------------------------------------------------------


def test_me_lists_the_callers_organizations_with_roles(team):
    response = client_for(team.member).get("/api/v1/me/")

    assert response.status_code == 200
    assert response.json() == {
        "id": str(team.member.uuid),
        "username": team.member.username,
        "email": team.member.email,
        "organizations": [
            {"id": str(team.organization.uuid), "name": "Quantum Lab", "role": "member"}
        ],
    }


# --- members -------------------------------------------------------------------------------


def test_adding_a_member_invites_them_and_adds_nobody_yet(team):
    newcomer = UserFactory(username="newcomer")

    response = client_for(team.admin).post(
        f"/api/v1/organizations/{team.organization.uuid}/members/",
        {"username": "newcomer", "role": "member"},
        format="json",
    )

    assert response.status_code == 201
    invitation = Invitation.objects.get(organization=team.organization, invitee=newcomer)
    assert response.json()["id"] == str(invitation.uuid)
    assert response.json()["username"] == "newcomer"
    assert response.json()["role"] == "member"
    assert response.json()["status"] == "pending"
    assert invitation.invited_by == team.admin
    assert not Membership.objects.filter(organization=team.organization, user=newcomer).exists()


def test_admin_invites_another_admin(team):
    UserFactory(username="second-admin")

    response = client_for(team.admin).post(
        f"/api/v1/organizations/{team.organization.uuid}/members/",
        {"username": "second-admin", "role": "admin"},
        format="json",
    )

    assert response.status_code == 201
    assert response.json()["role"] == "admin"
    assert Membership.objects.filter(organization=team.organization, role="admin").count() == 1


def test_a_member_adding_members_is_403_and_writes_nothing(team):
    UserFactory(username="newcomer")
    before = snapshot()

    response = client_for(team.member).post(
        f"/api/v1/organizations/{team.organization.uuid}/members/",
        {"username": "newcomer", "role": "member"},
        format="json",
    )

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert snapshot() == before


def test_an_outsider_adding_members_is_404_even_with_a_bad_body(team):
    before = snapshot()

    response = client_for(team.outsider).post(
        f"/api/v1/organizations/{team.organization.uuid}/members/",
        {"role": "owner"},
        format="json",
    )

    assert response.status_code == 404
    assert snapshot() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"username": "newcomer", "role": "owner"}, "role"),
        ({"username": "", "role": "member"}, "username"),
        ({"role": "member"}, "username"),
    ],
)
def test_adding_with_bad_input_is_invalid_and_writes_nothing(team, body, field):
    UserFactory(username="newcomer")
    before = snapshot()

    response = client_for(team.admin).post(
        f"/api/v1/organizations/{team.organization.uuid}/members/", body, format="json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert field in response.json()["extra"]["fields"]
    assert snapshot() == before


def test_inviting_an_existing_member_answers_like_any_name_and_changes_nothing(team):
    response = client_for(team.admin).post(
        f"/api/v1/organizations/{team.organization.uuid}/members/",
        {"username": team.member.username, "role": "admin"},
        format="json",
    )

    assert response.status_code == 201
    assert response.json()["status"] == "pending"
    assert Membership.objects.get(organization=team.organization, user=team.member).role == "member"
    # Nobody can accept it: the member is not asked to join what they are in.
    assert not Invitation.objects.filter(invitee=team.member).exists()


def test_members_list_is_visible_to_members_only(team):
    path = f"/api/v1/organizations/{team.organization.uuid}/members/"

    as_member = client_for(team.member).get(path)
    as_outsider = client_for(team.outsider).get(path)

    assert as_member.status_code == 200
    assert sorted(row["role"] for row in as_member.json()["results"]) == ["admin", "member"]
    assert as_outsider.status_code == 404


# --- Idempotency-Key ---------------------------------------------------------------------------


def test_same_idempotency_key_and_body_replays_the_first_answer(user):
    client = client_for(user)

    first = client.post(
        "/api/v1/organizations/",
        {"name": "Replay Lab"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="key-1",
    )
    second = client.post(
        "/api/v1/organizations/",
        {"name": "Replay Lab"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="key-1",
    )

    assert first.status_code == second.status_code == 201
    assert second.json() == first.json()
    assert Organization.objects.count() == 1


def test_same_idempotency_key_with_another_body_is_409(user):
    client = client_for(user)
    client.post(
        "/api/v1/organizations/",
        {"name": "Replay Lab"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="key-1",
    )

    response = client.post(
        "/api/v1/organizations/", {"name": "Other Lab"}, format="json", HTTP_IDEMPOTENCY_KEY="key-1"
    )

    assert response.status_code == 409
    assert response.json()["code"] == "idempotency_key_reused"
    assert list(Organization.objects.values_list("name", flat=True)) == ["Replay Lab"]


def test_idempotency_keys_belong_to_their_user(user):
    other = UserFactory()

    client_for(user).post(
        "/api/v1/organizations/", {"name": "Lab A"}, format="json", HTTP_IDEMPOTENCY_KEY="shared"
    )
    response = client_for(other).post(
        "/api/v1/organizations/", {"name": "Lab B"}, format="json", HTTP_IDEMPOTENCY_KEY="shared"
    )

    assert response.status_code == 201
    assert Organization.objects.count() == 2


def test_a_refused_request_does_not_burn_its_idempotency_key(user):
    client = client_for(user)

    refused = client.post(
        "/api/v1/organizations/", {"name": ""}, format="json", HTTP_IDEMPOTENCY_KEY="retry-me"
    )
    retried = client.post(
        "/api/v1/organizations/", {"name": ""}, format="json", HTTP_IDEMPOTENCY_KEY="retry-me"
    )

    assert refused.status_code == retried.status_code == 400
    assert IdempotencyRecord.objects.count() == 0


@pytest.mark.parametrize("page_size", ["0", "201", "ten", "-1"])
def test_a_page_size_out_of_range_is_refused(team, page_size):
    response = client_for(team.admin).get(f"/api/v1/organizations/?page_size={page_size}")

    assert response.status_code == 400
    assert response.json()["extra"]["fields"] == {
        "page_size": ["A whole number from 1 to 200, given once."]
    }


def test_repeated_wrong_passwords_lock_the_token_endpoint(api_client, user, settings):
    # The lockout itself is tested in tests/computeshare/test_login_throttling.py.
    settings.LOGIN_FAILURE_LIMIT = 3
    wrong = {"username": user.username, "password": "guess"}
    before = snapshot()

    answers = [api_client.post("/api/v1/auth/token/", wrong, format="json") for _ in range(3)]
    right = api_client.post(
        "/api/v1/auth/token/", {"username": user.username, "password": PASSWORD}, format="json"
    )

    assert [answer.status_code for answer in answers] == [400, 400, 400]
    assert right.status_code == 429
    assert right.json()["code"] == "throttled"
    assert int(right["Retry-After"]) > 0
    assert snapshot() == before
