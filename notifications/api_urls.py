from django.urls import path

from notifications import api

urlpatterns = [
    path("notifications/", api.NotificationListApi.as_view(), name="api-notifications"),
    path(
        "notifications/unread-count/",
        api.NotificationUnreadCountApi.as_view(),
        name="api-notifications-unread-count",
    ),
    path(
        "notifications/read-all/",
        api.NotificationReadAllApi.as_view(),
        name="api-notifications-read-all",
    ),
    path(
        "notifications/preferences/",
        api.NotificationPreferencesApi.as_view(),
        name="api-notification-preferences",
    ),
    path(
        "notifications/<uuid:notification_id>/read/",
        api.NotificationReadApi.as_view(),
        name="api-notification-read",
    ),
]
