from django.urls import path

from notifications import views

urlpatterns = [
    path("notifications/", views.NotificationListView.as_view(), name="notification-list"),
    path(
        "notifications/read-all/",
        views.NotificationReadAllView.as_view(),
        name="notification-read-all",
    ),
    path(
        "notifications/preferences/",
        views.NotificationPreferencesView.as_view(),
        name="notification-preferences",
    ),
    path(
        "notifications/<uuid:notification_id>/read/",
        views.NotificationReadView.as_view(),
        name="notification-read",
    ),
]
