"""Input and output shapes of the API tokens. A token's key appears only in the answer that
made it; its digest never leaves the server."""

from rest_framework import serializers

from computeshare import services
from computeshare.models import ApiToken


class ApiTokenCreateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField(max_length=services.NAME_MAX_LENGTH)
    expires_in_days = serializers.IntegerField(
        min_value=1,
        max_value=services.EXPIRES_IN_DAYS_MAX,
        required=False,
        allow_null=True,
        help_text="The token expires this many days from now; never when not given.",
    )


class ApiTokenSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.UUIDField(source="uuid")
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The key's first characters, to tell tokens apart.")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(
        allow_null=True, help_text="Updated at most once a minute."
    )
    revoked_at = serializers.DateTimeField(allow_null=True)
    status = serializers.ChoiceField(choices=ApiToken.Status.choices)


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.CharField(help_text="The key, shown this once: only its digest is kept.")
