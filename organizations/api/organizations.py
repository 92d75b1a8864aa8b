"""REST endpoints for identity and organizations (docs/api.md: auth, me, organizations)."""

from typing import cast

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare import services as computeshare_services
from computeshare.api import ErrorSerializer, idempotent, paginated, paginated_response
from computeshare.login_throttling import login_authenticate
from computeshare.models import User
from computeshare.openapi import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from organizations import selectors, services
from organizations.serializers import (
    InvitationSerializer,
    MemberAddSerializer,
    MemberSerializer,
    MeSerializer,
    TokenRequestSerializer,
    TokenSerializer,
)


class AuthTokenApi(APIView):
    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="auth_token_create",
        description=(
            "Logs in with a password and answers a new key for the token named `name` "
            "(`API log-in` by default); an earlier live token of that name stops working. "
            "Give each script or machine its own name to keep several keys."
        ),
        request=TokenRequestSerializer,
        responses={
            200: TokenSerializer,
            400: ErrorSerializer,
            409: ErrorSerializer,
            429: ErrorSerializer,
        },
        auth=[],
    )
    def post(self, request: Request) -> Response:
        payload = TokenRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        # Counted by name from this address, by name and by address, in the shared cache;
        # a locked-out log-in is refused with 429 even with the right password.
        user = login_authenticate(
            request._request,
            username=payload.validated_data["username"],
            password=payload.validated_data["password"],
        )
        token, key = computeshare_services.api_token_create(
            user=user,
            name=payload.validated_data["name"],
            expires_in_days=payload.validated_data.get("expires_in_days"),
            replace=True,
        )
        return Response(
            TokenSerializer(
                {
                    "token": key,
                    "uuid": token.uuid,
                    "name": token.name,
                    "expires_at": token.expires_at,
                }
            ).data
        )


class MeApi(APIView):
    @extend_schema(operation_id="me_retrieve", responses={200: MeSerializer, 401: ErrorSerializer})
    def get(self, request: Request) -> Response:
        user = cast(User, request.user)  # authentication is required
        data = {
            "uuid": user.uuid,
            "username": user.username,
            "email": user.email,
            "organizations": selectors.organization_list_for_user(user),
        }
        return Response(MeSerializer(data).data)


class OrganizationMemberListCreateApi(APIView):
    @extend_schema(
        operation_id="organization_members_list",
        responses={200: paginated(MemberSerializer), **LIST_ERRORS},
        parameters=PAGE_PARAMETERS,
    )
    def get(self, request: Request, organization_id: str) -> Response:
        membership = selectors.membership_get_for_user(cast(User, request.user), organization_id)
        return paginated_response(
            request, self, selectors.membership_list(membership.organization), MemberSerializer
        )

    @extend_schema(
        operation_id="organization_members_create",
        description=(
            "Invites the user into the organization: they become a member once they accept "
            "(`POST /invitations/{id}/accept/`). The answer is the same whether or not the name "
            "is an active user who can join; inviting a name that has a pending invitation "
            "answers that invitation."
        ),
        request=MemberAddSerializer,
        responses={201: InvitationSerializer, **ERRORS},
        parameters=[IDEMPOTENCY_KEY],
    )
    def post(self, request: Request, organization_id: str) -> Response:
        # Visible (404), allowed (403), then input (400).
        actor = selectors.membership_get_admin(cast(User, request.user), organization_id)

        def create() -> Response:
            payload = MemberAddSerializer(data=request.data)
            payload.is_valid(raise_exception=True)
            invitation = services.invitation_create(
                actor=actor,
                username=payload.validated_data["username"],
                role=payload.validated_data["role"],
            )
            return Response(InvitationSerializer(invitation).data, status=status.HTTP_201_CREATED)

        return idempotent(request, create)
