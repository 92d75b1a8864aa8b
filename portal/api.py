"""An organization as its member sees it: with its wallet and budget, so above billing (ADR 0026;
the organization's members, invitations and tokens: organizations.api)."""

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare.api import ErrorSerializer, idempotent, paginated, paginated_response
from computeshare.authentication import request_user
from computeshare.openapi import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from organizations import selectors as organization_selectors
from organizations import services as organization_services
from organizations.serializers import OrganizationCreateSerializer, OrganizationRoleSerializer
from portal.selectors import organization_detail_get
from portal.serializers import OrganizationDetailSerializer


class OrganizationListCreateApi(APIView):
    @extend_schema(
        operation_id="organizations_list",
        responses={200: paginated(OrganizationRoleSerializer), **LIST_ERRORS},
        parameters=PAGE_PARAMETERS,
    )
    def get(self, request: Request) -> Response:
        return paginated_response(
            request,
            self,
            organization_selectors.organization_list_for_user(request_user(request)),
            OrganizationRoleSerializer,
        )

    @extend_schema(
        operation_id="organizations_create",
        request=OrganizationCreateSerializer,
        responses={201: OrganizationDetailSerializer, **ERRORS},
        parameters=[IDEMPOTENCY_KEY],
    )
    def post(self, request: Request) -> Response:
        def create() -> Response:
            payload = OrganizationCreateSerializer(data=request.data)
            payload.is_valid(raise_exception=True)
            membership = organization_services.organization_create(
                creator=request_user(request), name=payload.validated_data["name"]
            )
            return Response(
                OrganizationDetailSerializer(organization_detail_get(membership)).data,
                status=status.HTTP_201_CREATED,
            )

        return idempotent(request, create)


class OrganizationDetailApi(APIView):
    @extend_schema(
        operation_id="organizations_retrieve",
        responses={200: OrganizationDetailSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, organization_id: str) -> Response:
        membership = organization_selectors.membership_get_for_user(
            request_user(request), organization_id
        )
        return Response(OrganizationDetailSerializer(organization_detail_get(membership)).data)
