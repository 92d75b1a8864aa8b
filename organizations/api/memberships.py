"""REST endpoints for invitations, leaving, removal and roles (docs/api.md: invitations and the
organizations' members, with the invitation flow that `POST .../members/` starts)."""

from typing import cast

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare.api import ErrorSerializer, paginated, paginated_response, validated
from computeshare.errors import PermissionDenied
from computeshare.models import User
from computeshare.openapi import ERRORS, LIST_ERRORS, PAGE_PARAMETERS
from organizations import selectors, services
from organizations.serializers import (
    InvitationSerializer,
    MemberRoleSerializer,
    MemberSerializer,
    MyInvitationSerializer,
)


def _user(request: Request) -> User:
    return cast(User, request.user)  # every endpoint here requires authentication


MEMBER_ID = OpenApiParameter(
    "member_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The membership's `id`, or `me` for the caller's own.",
)
ANSWER_ERRORS = {
    401: ErrorSerializer,
    404: ErrorSerializer,
    409: ErrorSerializer,
}


class OrganizationMemberDetailApi(APIView):
    @extend_schema(
        operation_id="organization_members_update",
        description="Changes a member's role (admins only). The last admin cannot become a "
        "member: 409 `last_admin`.",
        request=MemberRoleSerializer,
        responses={200: MemberSerializer, **ERRORS},
        parameters=[MEMBER_ID],
    )
    def patch(self, request: Request, organization_id: str, member_id: str) -> Response:
        actor = selectors.membership_get_for_user(_user(request), organization_id)
        membership = selectors.membership_get_in_organization(actor, member_id)
        if not actor.is_admin:
            raise PermissionDenied("Only an admin of this organization can change roles.")
        payload = validated(MemberRoleSerializer, request.data)
        membership = services.membership_role_change(
            actor=actor, membership=membership, role=payload["role"]
        )
        return Response(MemberSerializer(membership).data)

    @extend_schema(
        operation_id="organization_members_destroy",
        description="`me`: the caller leaves the organization. Another member's id: an admin "
        "removes them. The last admin can do neither: 409 `last_admin`.",
        request=None,
        responses={
            204: None,
            401: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
        },
        parameters=[MEMBER_ID],
    )
    def delete(self, request: Request, organization_id: str, member_id: str) -> Response:
        actor = selectors.membership_get_for_user(_user(request), organization_id)
        membership = selectors.membership_get_in_organization(actor, member_id)
        services.membership_remove(actor=actor, membership=membership)
        return Response(status=status.HTTP_204_NO_CONTENT)


class OrganizationInvitationListApi(APIView):
    @extend_schema(
        operation_id="organization_invitations_list",
        description="The organization's pending invitations (admins only), by the name typed.",
        responses={200: paginated(InvitationSerializer), 403: ErrorSerializer, **LIST_ERRORS},
        parameters=PAGE_PARAMETERS,
    )
    def get(self, request: Request, organization_id: str) -> Response:
        actor = selectors.membership_get_admin(_user(request), organization_id)
        return paginated_response(
            request,
            self,
            selectors.invitation_list_pending_for_organization(actor.organization),
            InvitationSerializer,
        )


class OrganizationInvitationCancelApi(APIView):
    @extend_schema(
        operation_id="organization_invitations_cancel",
        description="Withdraws a pending invitation (admins only); 409 `invitation_not_pending` "
        "once answered, `invitation_expired` once expired.",
        request=None,
        responses={200: InvitationSerializer, 403: ErrorSerializer, **ANSWER_ERRORS},
    )
    def post(self, request: Request, organization_id: str, invitation_id: str) -> Response:
        actor = selectors.membership_get_for_user(_user(request), organization_id)
        invitation = selectors.invitation_get_for_organization(actor.organization, invitation_id)
        invitation = services.invitation_cancel(actor=actor, invitation=invitation)
        return Response(InvitationSerializer(invitation).data)


class InvitationListApi(APIView):
    @extend_schema(
        operation_id="invitations_list",
        description="The caller's pending invitations.",
        responses={200: paginated(MyInvitationSerializer), **LIST_ERRORS},
        parameters=PAGE_PARAMETERS,
    )
    def get(self, request: Request) -> Response:
        return paginated_response(
            request,
            self,
            selectors.invitation_list_pending_for_user(_user(request)),
            MyInvitationSerializer,
        )


class InvitationAcceptApi(APIView):
    @extend_schema(
        operation_id="invitations_accept",
        description="The caller joins the organization with the invitation's role. Someone "
        "else's invitation is 404; 409 `invitation_expired`, `invitation_not_pending`.",
        request=None,
        responses={200: MyInvitationSerializer, **ANSWER_ERRORS},
    )
    def post(self, request: Request, invitation_id: str) -> Response:
        invitation = selectors.invitation_get_for_invitee(_user(request), invitation_id)
        services.invitation_accept(user=_user(request), invitation=invitation)
        invitation.refresh_from_db()
        return Response(MyInvitationSerializer(invitation).data)


class InvitationDeclineApi(APIView):
    @extend_schema(
        operation_id="invitations_decline",
        description="The caller declines. Someone else's invitation is 404; 409 "
        "`invitation_expired`, `invitation_not_pending`.",
        request=None,
        responses={200: MyInvitationSerializer, **ANSWER_ERRORS},
    )
    def post(self, request: Request, invitation_id: str) -> Response:
        invitation = selectors.invitation_get_for_invitee(_user(request), invitation_id)
        services.invitation_decline(user=_user(request), invitation=invitation)
        invitation.refresh_from_db()
        return Response(MyInvitationSerializer(invitation).data)
