from django.contrib import admin
from django.http import HttpRequest

from organizations.models import Invitation, Membership, Organization


class MembershipInline(admin.TabularInline):
    model = Membership
    fk_name = "organization"
    extra = 0
    autocomplete_fields = ("user",)
    readonly_fields = ("added_by", "created_at")


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ("name", "uuid", "created_at")
    search_fields = ("name", "uuid")
    readonly_fields = ("uuid", "created_at", "updated_at")
    inlines = [MembershipInline]


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    """Read-only: invitations change state only through the services (accept, decline,
    cancel), which keep the membership and the invitation together."""

    list_display = ("username", "organization", "role", "status", "invitee", "expires_at")
    list_filter = ("status", "role")
    search_fields = ("username", "organization__name", "uuid")
    list_select_related = ("organization", "invitee")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Invitation | None = None) -> bool:
        return False
