from django.contrib import admin

from notifications.models import Notification, NotificationPreference


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ("created_at", "user", "kind", "title", "read_at", "email_state")
    list_filter = ("kind", "email_state")
    search_fields = ("user__username", "title", "key")
    readonly_fields = [f.name for f in Notification._meta.fields]


@admin.register(NotificationPreference)
class NotificationPreferenceAdmin(admin.ModelAdmin):
    list_display = ("user", "kind", "in_site", "by_email")
    list_filter = ("kind",)
