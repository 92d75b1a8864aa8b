"""What the notifications API reads and writes."""

from typing import Any

from rest_framework import serializers

from notifications.models import Kind


class NotificationSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uuid")
    kind = serializers.ChoiceField(choices=Kind.choices)
    title = serializers.CharField()
    body = serializers.CharField()
    link = serializers.CharField(help_text="A path of the site, or empty.")
    organization = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    read_at = serializers.DateTimeField(allow_null=True)
    is_read = serializers.SerializerMethodField()

    def get_organization(self, notification: Any) -> str | None:
        organization = notification.organization
        return None if organization is None else str(organization.uuid)

    def get_is_read(self, notification: Any) -> bool:
        return notification.read_at is not None


class MarkedReadSerializer(serializers.Serializer):
    marked_read = serializers.IntegerField()


class PreferenceSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=Kind.choices)
    description = serializers.CharField(source="label", read_only=True)
    in_site = serializers.BooleanField()
    by_email = serializers.BooleanField()


class PreferencesSerializer(serializers.Serializer):
    preferences = PreferenceSerializer(many=True)


class PreferenceChangeSerializer(serializers.Serializer):
    in_site = serializers.BooleanField(required=False)
    by_email = serializers.BooleanField(required=False)


class PreferencesUpdateSerializer(serializers.Serializer):
    preferences = serializers.DictField(
        child=PreferenceChangeSerializer(),
        help_text='By kind: `{"job_ended": {"by_email": false}}`; kinds left out keep theirs.',
    )


class UnreadCountSerializer(serializers.Serializer):
    unread = serializers.IntegerField()
