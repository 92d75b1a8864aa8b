from django.contrib import admin

from marketplace.models import Membership, Organization


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
