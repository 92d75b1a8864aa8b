"""REST endpoints of the caller's notifications and preferences (README, "The API in brief")."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare.api import ErrorSerializer, paginated, paginated_response
from computeshare.authentication import request_user
from computeshare.errors import ValidationFailed
from notifications import selectors, services
from notifications.serializers import (
    MarkedReadSerializer,
    NotificationSerializer,
    PreferencesSerializer,
    PreferencesUpdateSerializer,
    UnreadCountSerializer,
)

PAGE_PARAMETERS = [
    OpenApiParameter("page", int, OpenApiParameter.QUERY, required=False),
    OpenApiParameter(
        "page_size",
        {"type": "integer", "minimum": 1, "maximum": 200},
        OpenApiParameter.QUERY,
        required=False,
        description="From 1 to 200; 50 when not given.",
    ),
]
UNREAD = OpenApiParameter(
    "unread",
    bool,
    OpenApiParameter.QUERY,
    required=False,
    description="`true`: only the unread ones.",
)
LIST_ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 404: ErrorSerializer}


class NotificationListApi(APIView):
    @extend_schema(
        operation_id="notifications_list",
        description="The caller's notifications in the site, newest first (`unread=true`: "
        "only the unread ones; their number alone: `/notifications/unread-count/`).",
        responses={200: paginated(NotificationSerializer), **LIST_ERRORS},
        parameters=[UNREAD, *PAGE_PARAMETERS],
    )
    def get(self, request: Request) -> Response:
        raw = request.query_params.get("unread", "false").lower()
        if raw not in ("true", "false", "1", "0"):
            raise ValidationFailed(fields={"unread": ["true or false."]})
        found = selectors.notification_list_for_user(
            request_user(request), unread_only=raw in ("true", "1")
        ).select_related("organization")
        return paginated_response(request, self, found, NotificationSerializer)


class NotificationUnreadCountApi(APIView):
    @extend_schema(
        operation_id="notifications_unread_count",
        description="How many of the caller's notifications are unread (the bell's number).",
        responses={200: UnreadCountSerializer, 401: ErrorSerializer},
    )
    def get(self, request: Request) -> Response:
        return Response({"unread": selectors.notification_unread_count(request_user(request))})


class NotificationReadApi(APIView):
    @extend_schema(
        operation_id="notifications_read",
        description="Marks one of the caller's notifications read (read already: unchanged). "
        "Another user's is 404.",
        request=None,
        responses={200: NotificationSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def post(self, request: Request, notification_id: str) -> Response:
        notification = selectors.notification_get_for_user(request_user(request), notification_id)
        notification = services.notification_mark_read(
            user=request_user(request), notification=notification
        )
        return Response(NotificationSerializer(notification).data)


class NotificationReadAllApi(APIView):
    @extend_schema(
        operation_id="notifications_read_all",
        description="Marks every unread notification of the caller read.",
        request=None,
        responses={200: MarkedReadSerializer, 401: ErrorSerializer},
    )
    def post(self, request: Request) -> Response:
        return Response(
            {"marked_read": services.notifications_mark_all_read(user=request_user(request))}
        )


class NotificationPreferencesApi(APIView):
    @extend_schema(
        operation_id="notifications_preferences_list",
        description="Every kind of notification with the caller's choice: shown in the site "
        "(`in_site`) and mailed (`by_email`); both true until changed. One object, the same "
        "shape as a PUT's body takes, rather than a list: it is a setting, not a collection "
        "to page through.",
        responses={200: PreferencesSerializer, 401: ErrorSerializer},
    )
    def get(self, request: Request) -> Response:
        preferences = selectors.preferences_for_user(request_user(request))
        return Response(PreferencesSerializer({"preferences": preferences}).data)

    @extend_schema(
        operation_id="notifications_preferences_update",
        description="Changes the caller's choices for the kinds given; 400 `invalid` for an "
        "unknown kind or a flag that is not a boolean, and then nothing changes.",
        request=PreferencesUpdateSerializer,
        responses={
            200: PreferencesSerializer,
            400: ErrorSerializer,
            401: ErrorSerializer,
        },
    )
    def put(self, request: Request) -> Response:
        body = request.data
        if not isinstance(body, dict) or not isinstance(body.get("preferences"), dict):
            raise ValidationFailed(
                fields={"preferences": ["An object of kinds, each with in_site and/or by_email."]}
            )
        preferences = services.notification_preferences_update(
            user=request_user(request), changes=body["preferences"]
        )
        return Response(PreferencesSerializer({"preferences": preferences}).data)
