from django.contrib import admin
from django.contrib.auth.admin import UserAdmin

from computeshare.models import User


@admin.register(User)
class ComputeShareUserAdmin(UserAdmin):
    list_display = ("username", "email", "is_staff", "date_joined")
    readonly_fields = ("uuid",)
