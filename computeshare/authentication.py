"""`Authorization: Token <key>` against the hashed API tokens (computeshare.models.ApiToken)."""

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from computeshare import services
from computeshare.errors import ApplicationError
from computeshare.models import ApiToken, User


def request_user(request: HttpRequest | Request) -> User:
    """The signed-in user of a request to a view that requires one (LoginRequiredMixin, DRF's
    IsAuthenticated), typed as the project's User. Reaching a view without one is a mistake in
    that view's permissions: refused (403), never run as AnonymousUser."""
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied("Sign in first.")
    return user


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """The header clients have always sent, `Authorization: Token <key>`. A request without it
    is left to the next authenticator (the browser's session); a wrong, expired or revoked key,
    or one of an inactive user, is 401 with its own code."""

    keyword = "Token"

    def authenticate(self, request: Request) -> tuple[User, ApiToken] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if isinstance(header, bytes):
            header = header.decode("latin-1")
        words = header.split()
        if not words or words[0].lower() != self.keyword.lower():
            return None
        if len(words) != 2:
            raise exceptions.AuthenticationFailed(
                "The Authorization header must be 'Token' and the key, separated by one space."
            )
        try:
            token = services.api_token_authenticate(key=words[1])
        except ApplicationError as error:
            raise exceptions.AuthenticationFailed(error.detail, code=error.code) from error
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class ApiTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """The schema names the scheme as it did with DRF's own token authentication."""

    target_class = ApiTokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return build_bearer_security_scheme_object(
            header_name="Authorization", token_prefix=ApiTokenAuthentication.keyword
        )
