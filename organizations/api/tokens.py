"""REST endpoints for the caller's own API tokens (the password exchange, `POST /auth/token/`,
is in organizations.py)."""

from typing import cast

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare import selectors, services
from computeshare.api import ErrorSerializer, paginated, paginated_response, validated
from computeshare.models import User
from computeshare.openapi import LIST_ERRORS, PAGE_PARAMETERS
from computeshare.serializers import (
    ApiTokenCreatedSerializer,
    ApiTokenCreateSerializer,
    ApiTokenSerializer,
)


class ApiTokenListCreateApi(APIView):
    @extend_schema(
        operation_id="auth_tokens_list",
        description="The caller's tokens, newest first, revoked and expired ones included; "
        "never their keys.",
        responses={200: paginated(ApiTokenSerializer), **LIST_ERRORS},
        parameters=PAGE_PARAMETERS,
    )
    def get(self, request: Request) -> Response:
        return paginated_response(
            request,
            self,
            selectors.api_token_list_for_user(cast(User, request.user)),
            ApiTokenSerializer,
        )

    # No Idempotency-Key here: a replay would have to keep the answer, and with it the key,
    # in clear.
    @extend_schema(
        operation_id="auth_tokens_create",
        description="Makes a token for the caller. The answer's `token` is the key, shown this "
        "once. 409 `token_limit_reached` when the caller has as many live tokens as allowed.",
        request=ApiTokenCreateSerializer,
        responses={
            201: ApiTokenCreatedSerializer,
            400: ErrorSerializer,
            401: ErrorSerializer,
            409: ErrorSerializer,
        },
    )
    def post(self, request: Request) -> Response:
        payload = validated(ApiTokenCreateSerializer, request.data)
        token, key = services.api_token_create(
            user=cast(User, request.user),
            name=payload["name"],
            expires_in_days=payload.get("expires_in_days"),
        )
        return Response(
            {**ApiTokenSerializer(token).data, "token": key}, status=status.HTTP_201_CREATED
        )


class ApiTokenRevokeApi(APIView):
    @extend_schema(
        operation_id="auth_tokens_revoke",
        description="Revokes one of the caller's tokens at once (again: no change). Another "
        "user's token is 404.",
        responses={204: None, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def delete(self, request: Request, token_id: str) -> Response:
        token = selectors.api_token_get_for_user(cast(User, request.user), token_id)
        services.api_token_revoke(token=token)
        return Response(status=status.HTTP_204_NO_CONTENT)
