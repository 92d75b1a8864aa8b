"""What the API of identity, organizations and invitations reads and answers."""

from rest_framework import serializers

from computeshare import services as computeshare_services
from organizations.models import Invitation, Membership


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)
    name = serializers.CharField(
        max_length=computeshare_services.NAME_MAX_LENGTH,
        default="API log-in",
        help_text="A name for the new token.",
    )
    expires_in_days = serializers.IntegerField(
        min_value=1,
        max_value=computeshare_services.EXPIRES_IN_DAYS_MAX,
        required=False,
        allow_null=True,
        help_text="The token expires this many days from now; never when not given.",
    )


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="The key, shown this once: only its digest is kept.")
    id = serializers.UUIDField(source="uuid")
    name = serializers.CharField()
    expires_at = serializers.DateTimeField(allow_null=True)


class OrganizationRoleSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uuid")
    name = serializers.CharField()
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class MeSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uuid")
    username = serializers.CharField()
    email = serializers.EmailField()
    organizations = OrganizationRoleSerializer(many=True)


class OrganizationCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120)


class MemberAddSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Membership.Role.choices, default=Membership.Role.MEMBER)


class MemberSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uuid")
    organization = serializers.UUIDField(source="organization.uuid")
    user = serializers.UUIDField(source="user.uuid")
    username = serializers.CharField(source="user.username")
    role = serializers.ChoiceField(choices=Membership.Role.choices)
    created_at = serializers.DateTimeField()


class InvitationSerializer(serializers.Serializer):
    """An invitation as the organization's admins see it: by the name they typed."""

    id = serializers.UUIDField(source="uuid")
    organization = serializers.UUIDField(source="organization.uuid")
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=Membership.Role.choices)
    status = serializers.ChoiceField(choices=Invitation.Status.choices)
    invited_by = serializers.CharField(source="invited_by.username", allow_null=True)
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()


class InvitationOrganizationSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uuid")
    name = serializers.CharField()


class MyInvitationSerializer(serializers.Serializer):
    """An invitation as its invitee sees it."""

    id = serializers.UUIDField(source="uuid")
    organization = InvitationOrganizationSerializer()
    role = serializers.ChoiceField(choices=Membership.Role.choices)
    status = serializers.ChoiceField(choices=Invitation.Status.choices)
    invited_by = serializers.CharField(source="invited_by.username", allow_null=True)
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    answered_at = serializers.DateTimeField(allow_null=True)


class MemberRoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Membership.Role.choices)
