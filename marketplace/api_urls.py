from django.urls import path

from billing.api import money
from marketplace.api import market, organizations
from organizations.api import webhooks

urlpatterns = [
    path(
        "organizations/",
        organizations.OrganizationListCreateApi.as_view(),
        name="api-organizations",
    ),
    path(
        "organizations/<uuid:organization_id>/",
        organizations.OrganizationDetailApi.as_view(),
        name="api-organization-detail",
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

urlpatterns += [
    path("clusters/", market.ClusterListCreateApi.as_view(), name="api-clusters"),
    path("clusters/<uuid:cluster_id>/", market.ClusterDetailApi.as_view(), name="api-cluster"),
    path(
        "clusters/<uuid:cluster_id>/verify/",
        market.ClusterVerifyApi.as_view(),
        name="api-cluster-verify",
    ),
    path(
        "clusters/<uuid:cluster_id>/tenant-accounts/",
        market.TenantAccountListApi.as_view(),
        name="api-cluster-tenant-accounts",
    ),
    path(
        "clusters/<uuid:cluster_id>/tenant-accounts/<str:username>/scrub/",
        market.TenantAccountScrubApi.as_view(),
        name="api-cluster-tenant-account-scrub",
    ),
    path(
        "clusters/<uuid:cluster_id>/partitions/<str:partition>/calendar/",
        market.PartitionCalendarApi.as_view(),
        name="api-partition-calendar",
    ),
    path(
        "clusters/<uuid:cluster_id>/partitions/<str:partition>/idle/",
        market.PartitionIdleApi.as_view(),
        name="api-partition-idle",
    ),
    path(
        "clusters/<uuid:cluster_id>/track-record/",
        market.TrackRecordApi.as_view(),
        name="api-cluster-track-record",
    ),
    path("offers/", market.OfferListCreateApi.as_view(), name="api-offers"),
    path("offers/price-history/", market.PriceHistoryApi.as_view(), name="api-price-history"),
    path("offers/<uuid:offer_id>/", market.OfferDetailApi.as_view(), name="api-offer"),
    path("offers/<uuid:offer_id>/buy/", market.OfferBuyApi.as_view(), name="api-offer-buy"),
    path("offers/<uuid:offer_id>/bids/", market.OfferBidCreateApi.as_view(), name="api-offer-bids"),
    path(
        "offers/<uuid:offer_id>/cancel/", market.OfferCancelApi.as_view(), name="api-offer-cancel"
    ),
    path(
        "offers/<uuid:offer_id>/extend/", market.OfferExtendApi.as_view(), name="api-offer-extend"
    ),
    path("bids/", market.BidListApi.as_view(), name="api-bids"),
    path("bids/<uuid:bid_id>/", market.BidDetailApi.as_view(), name="api-bid"),
    path("allocations/", market.AllocationListApi.as_view(), name="api-allocations"),
    path(
        "allocations/<uuid:allocation_id>/",
        market.AllocationDetailApi.as_view(),
        name="api-allocation",
    ),
]

organization_webhooks = "organizations/<uuid:organization_id>/webhook-endpoints/"
urlpatterns += [
    path(
        organization_webhooks,
        webhooks.WebhookEndpointListCreateApi.as_view(),
        name="api-webhook-endpoints",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/",
        webhooks.WebhookEndpointDetailApi.as_view(),
        name="api-webhook-endpoint",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/rotate-secret/",
        webhooks.WebhookEndpointRotateSecretApi.as_view(),
        name="api-webhook-endpoint-rotate-secret",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/deliveries/",
        webhooks.WebhookDeliveryListApi.as_view(),
        name="api-webhook-deliveries",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/deliveries/<uuid:delivery_id>/redeliver/",
        webhooks.WebhookDeliveryRedeliverApi.as_view(),
        name="api-webhook-delivery-redeliver",
    ),
]
