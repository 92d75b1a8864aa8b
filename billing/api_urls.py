from django.urls import path

from billing.api import money, stripe_webhook

urlpatterns = [
    path(
        "billing/stripe/webhook/",
        stripe_webhook.StripeWebhookApi.as_view(),
        name="api-stripe-webhook",
    ),
]

organization_money = "organizations/<uuid:organization_id>/"
urlpatterns += [
    path(f"{organization_money}budget/", money.BudgetApi.as_view(), name="api-budget"),
    path(f"{organization_money}top-ups/", money.TopUpListCreateApi.as_view(), name="api-top-ups"),
    path(
        f"{organization_money}top-ups/<uuid:top_up_id>/",
        money.TopUpDetailApi.as_view(),
        name="api-top-up-detail",
    ),
    path(f"{organization_money}ledger/", money.LedgerApi.as_view(), name="api-ledger"),
    path(f"{organization_money}earnings/", money.EarningsApi.as_view(), name="api-earnings"),
    path(
        f"{organization_money}payout-account/",
        money.PayoutAccountApi.as_view(),
        name="api-payout-account",
    ),
    path(
        f"{organization_money}payout-account/onboarding/",
        money.PayoutOnboardingApi.as_view(),
        name="api-payout-onboarding",
    ),
    path(f"{organization_money}payouts/", money.PayoutListCreateApi.as_view(), name="api-payouts"),
    path(
        f"{organization_money}payouts/<uuid:payout_id>/",
        money.PayoutDetailApi.as_view(),
        name="api-payout",
    ),
]
