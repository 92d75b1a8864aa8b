"""What the API shows of endpoints and deliveries, and what it takes."""

from rest_framework import serializers

from webhooks.models import EventType, WebhookDelivery, WebhookEndpoint


class EndpointSerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="uuid", read_only=True)
    events = serializers.ListField(child=serializers.ChoiceField(choices=EventType.choices))
    enabled = serializers.BooleanField(source="is_enabled")

    class Meta:
        model = WebhookEndpoint
        fields = ["id", "url", "events", "description", "enabled", "created_at", "updated_at"]


class EndpointWithSecretSerializer(EndpointSerializer):
    """The answer to a create and to a secret rotation: the only times the secret is shown."""

    secret = serializers.CharField(read_only=True)

    class Meta(EndpointSerializer.Meta):
        fields = [*EndpointSerializer.Meta.fields, "secret"]


class EndpointCreateSerializer(serializers.Serializer):
    url = serializers.CharField(max_length=2000)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EventType.choices), allow_empty=False
    )
    description = serializers.CharField(
        max_length=500, required=False, allow_blank=True, default=""
    )
    enabled = serializers.BooleanField(required=False, default=True)


class EndpointUpdateSerializer(serializers.Serializer):
    url = serializers.CharField(max_length=2000, required=False)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EventType.choices), allow_empty=False, required=False
    )
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)


class DeliverySerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="uuid", read_only=True)
    event_id = serializers.CharField(source="event.public_id")
    type = serializers.CharField(source="event.type")
    object = serializers.CharField(source="object_key")

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "event_id",
            "type",
            "object",
            "status",
            "attempt_count",
            "last_status_code",
            "last_error",
            "last_attempt_at",
            "next_attempt_at",
            "delivered_at",
            "created_at",
        ]
