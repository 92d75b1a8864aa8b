"""Input and output shapes of the money endpoints (docs/api.md: organizations). Money is a
decimal string."""

from rest_framework import serializers

from billing.models import ConnectedAccount, Entry, Payout, TopUp
from computeshare.numbers import DecimalString, WholeNumber


class Money(DecimalString):
    """A decimal string with the ledger's six places, or cents where money enters or leaves;
    as input, a decimal string only (never a JSON number)."""

    def __init__(self, *, places: int = 6, **kwargs: object) -> None:
        super().__init__(max_digits=20, decimal_places=places, **kwargs)  # type: ignore[arg-type]


class WalletSerializer(serializers.Serializer):
    available = Money()
    held = Money()
    currency = serializers.CharField()


class BudgetSerializer(serializers.Serializer):
    monthly_limit = Money(places=2, allow_null=True)
    spent_this_month = Money()
    committed = Money(help_text="Money on hold now, which counts against the limit.")
    remaining = Money(allow_null=True)
    alert_thresholds = serializers.ListField(child=serializers.IntegerField())
    currency = serializers.CharField()


class BudgetUpdateSerializer(serializers.Serializer):
    monthly_limit = DecimalString(
        max_digits=14, decimal_places=2, min_value=0, allow_null=True, example="500.00"
    )
    alert_thresholds = serializers.ListField(
        child=WholeNumber(min_value=1, max_value=100), max_length=10
    )


class TopUpCreateSerializer(serializers.Serializer):
    amount = DecimalString(max_digits=14, decimal_places=2)


class TopUpSerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="uuid", read_only=True)
    amount = Money(places=2)

    class Meta:
        model = TopUp
        fields = [
            "id",
            "amount",
            "currency",
            "status",
            "failure_reason",
            "created_at",
            "succeeded_at",
        ]


class TopUpCreatedSerializer(TopUpSerializer):
    client_secret = serializers.CharField(
        help_text="For Stripe.js `confirmCardPayment`; shown only to the admin who created it."
    )

    class Meta(TopUpSerializer.Meta):
        fields = [*TopUpSerializer.Meta.fields, "client_secret"]


class LedgerEntrySerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uuid")
    created_at = serializers.DateTimeField()
    kind = serializers.ChoiceField(choices=Entry.Kind.choices)
    account = serializers.CharField(source="account.kind")
    amount = Money()
    balance_after = Money()
    currency = serializers.CharField(source="account.currency")
    transaction = serializers.UUIDField(source="transaction.uuid")
    reference_kind = serializers.CharField(source="transaction.reference_kind")
    reference = serializers.UUIDField(source="transaction.reference", allow_null=True)
    memo = serializers.CharField(source="transaction.memo")


class LedgerFilterSerializer(serializers.Serializer):
    # `from` is a Python keyword: the field is renamed in `get_fields`.
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
    kind = serializers.MultipleChoiceField(choices=Entry.Kind.choices, required=False)

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        fields["from"] = fields.pop("since")
        fields["to"] = fields.pop("until")
        fields["from"].source = "since"
        fields["to"].source = "until"
        return fields

    def validate(self, attrs: dict[str, object]) -> dict[str, object]:
        since, until = attrs.get("since"), attrs.get("until")
        if since and until and since >= until:  # type: ignore[operator]
            raise serializers.ValidationError({"to": ["Must be after `from`."]})
        return attrs


class EarningsRowSerializer(serializers.Serializer):
    month = serializers.DateField(format="%Y-%m")
    cluster = serializers.UUIDField(source="source", allow_null=True)
    cluster_name = serializers.CharField(source="source_name")
    gross = Money()
    fees = Money()
    net = Money()


class EarningsSerializer(serializers.Serializer):
    currency = serializers.CharField()
    gross = Money()
    fees = Money()
    net = Money()
    results = EarningsRowSerializer(many=True)


class PayoutSerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="uuid", read_only=True)
    amount = Money(places=2)
    stripe_transfer = serializers.CharField(allow_null=True)

    class Meta:
        model = Payout
        fields = [
            "id",
            "amount",
            "currency",
            "status",
            "stripe_transfer",
            "failure_reason",
            "created_at",
            "paid_at",
        ]


class PayoutCreateSerializer(serializers.Serializer):
    amount = DecimalString(
        max_digits=14,
        decimal_places=2,
        required=False,
        allow_null=True,
        help_text="Leave out to pay out everything payable now.",
    )


class ConnectedAccountSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=ConnectedAccount.Status.choices)
    stripe_account = serializers.CharField(allow_null=True)
    payouts_enabled = serializers.BooleanField()
    requirements_due = serializers.ListField(child=serializers.CharField())


class PayoutAccountSerializer(serializers.Serializer):
    connected_account = ConnectedAccountSerializer(
        allow_null=True, help_text="Null until an admin starts Stripe onboarding."
    )
    earnings = Money(help_text="Everything earned and not paid out.")
    held = Money(help_text="Earned within the holding period: not payable yet.")
    payable = Money(help_text="What a payout can send now, in whole cents.")
    owed = Money(help_text="Owed to the platform: no payout until a top-up repays it.")
    holding_days = serializers.IntegerField()
    minimum = Money(places=2, help_text="The smallest payout.")
    currency = serializers.CharField()


class OnboardingLinkSerializer(serializers.Serializer):
    url = serializers.URLField(
        help_text="Stripe's single-use onboarding page: send the admin there."
    )
    expires_at = serializers.IntegerField(help_text="Unix seconds; make a new link after it.")
