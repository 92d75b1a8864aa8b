from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from computeshare import services
from computeshare.models import ApiToken, User


@admin.register(User)
class ComputeShareUserAdmin(UserAdmin):
    list_display = ("username", "email", "is_staff", "date_joined")
    readonly_fields = ("uuid",)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Operators see who holds which tokens and revoke them; the digest is never shown, and a
    token is made only by its user, who alone sees its key."""

    list_display = (
        "prefix",
        "name",
        "user",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = (("revoked_at", admin.EmptyFieldListFilter), "expires_at")
    search_fields = ("prefix", "name", "user__username")
    list_select_related = ("user",)
    fields = (
        "uuid",
        "user",
        "name",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False  # revoked, never deleted: the list keeps who had which token

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            services.api_token_revoke(token=token)
        self.message_user(request, f"{len(queryset)} token(s) revoked.")
