"""The shape of an organization with its wallet and budget (portal.api). It translates; the
services decide."""

from rest_framework import serializers

from billing.serializers import BudgetSerializer, WalletSerializer
from organizations.models import Membership


class OrganizationDetailSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    role = serializers.ChoiceField(choices=Membership.Role.choices)
    created_at = serializers.DateTimeField()
    wallet = WalletSerializer()
    budget = BudgetSerializer()
