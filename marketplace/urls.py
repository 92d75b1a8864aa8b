from django.urls import path

from marketplace import (
    views,
    views_capacity,
    views_market,
    views_money,
    views_webhooks,
)

urlpatterns = [
    path(
        "organizations/<uuid:organization_id>/",
        views.OrganizationDetailView.as_view(),
        name="organization-detail",
    ),
]

urlpatterns += [
    path(
        "organizations/<uuid:organization_id>/money/",
        views_money.MoneyView.as_view(),
        name="organization-money",
    ),
    path(
        "organizations/<uuid:organization_id>/statements/<int:year>/<int:month>/",
        views_money.StatementView.as_view(),
        name="organization-statement",
    ),
    path(
        "organizations/<uuid:organization_id>/payouts/",
        views_money.PayoutsView.as_view(),
        name="organization-payouts",
    ),
]

# The market's pages (marketplace/views_market.py).
urlpatterns += [
    path("offers/", views_market.OfferListView.as_view(), name="offer-list"),
    path("offers/<uuid:offer_id>/", views_market.OfferDetailView.as_view(), name="offer-detail"),
    path("offers/<uuid:offer_id>/bid/", views_market.OfferBidView.as_view(), name="offer-bid"),
    path("offers/<uuid:offer_id>/buy/", views_market.OfferBuyView.as_view(), name="offer-buy"),
    path(
        "offers/<uuid:offer_id>/cancel/",
        views_market.OfferCancelView.as_view(),
        name="offer-cancel",
    ),
    path(
        "bids/<uuid:bid_id>/withdraw/", views_market.BidWithdrawView.as_view(), name="bid-withdraw"
    ),
    path("market/price-history/", views_market.PriceHistoryView.as_view(), name="price-history"),
    path(
        "organizations/<uuid:organization_id>/allocations/",
        views_market.OrganizationAllocationsView.as_view(),
        name="organization-allocations",
    ),
    path(
        "organizations/<uuid:organization_id>/clusters/",
        views_market.OrganizationClustersView.as_view(),
        name="organization-clusters",
    ),
    path(
        "organizations/<uuid:organization_id>/offers/",
        views_market.OrganizationOffersView.as_view(),
        name="organization-offers",
    ),
    path(
        "clusters/<uuid:cluster_id>/verify/",
        views_market.ClusterVerifyView.as_view(),
        name="cluster-verify",
    ),
    path(
        "clusters/<uuid:cluster_id>/capacity/",
        views_capacity.ClusterCapacityView.as_view(),
        name="cluster-capacity",
    ),
    path(
        "offers/<uuid:offer_id>/extend/",
        views_capacity.OfferExtendView.as_view(),
        name="offer-extend",
    ),
    path(
        "clusters/<uuid:cluster_id>/capacity/suggested-offer/",
        views_capacity.SuggestedOfferCreateView.as_view(),
        name="cluster-suggested-offer",
    ),
    path(
        "clusters/<uuid:cluster_id>/verification/",
        views_market.ClusterVerificationView.as_view(),
        name="cluster-verification",
    ),
    path(
        "clusters/<uuid:cluster_id>/tenant-accounts/<str:username>/scrub/",
        views_market.TenantAccountScrubView.as_view(),
        name="tenant-account-scrub",
    ),
]

# An organization's webhooks (marketplace/views_webhooks.py).
organization_webhooks = "organizations/<uuid:organization_id>/webhooks/"
urlpatterns += [
    path(
        organization_webhooks,
        views_webhooks.WebhookListView.as_view(),
        name="organization-webhooks",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/",
        views_webhooks.WebhookDetailView.as_view(),
        name="organization-webhook",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/rotate-secret/",
        views_webhooks.WebhookRotateSecretView.as_view(),
        name="organization-webhook-rotate-secret",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/remove/",
        views_webhooks.WebhookRemoveView.as_view(),
        name="organization-webhook-remove",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/deliveries/<uuid:delivery_id>/redeliver/",
        views_webhooks.WebhookRedeliverView.as_view(),
        name="organization-webhook-redeliver",
    ),
]
