from django.urls import path

from billing import views as views_money
from marketplace.views import capacity, market
from marketplace.views import organizations as views
from organizations.views import webhooks

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

# The market's pages (marketplace/views/market.py).
urlpatterns += [
    path("offers/", market.OfferListView.as_view(), name="offer-list"),
    path("offers/<uuid:offer_id>/", market.OfferDetailView.as_view(), name="offer-detail"),
    path("offers/<uuid:offer_id>/bid/", market.OfferBidView.as_view(), name="offer-bid"),
    path("offers/<uuid:offer_id>/buy/", market.OfferBuyView.as_view(), name="offer-buy"),
    path(
        "offers/<uuid:offer_id>/cancel/",
        market.OfferCancelView.as_view(),
        name="offer-cancel",
    ),
    path("bids/<uuid:bid_id>/withdraw/", market.BidWithdrawView.as_view(), name="bid-withdraw"),
    path("market/price-history/", market.PriceHistoryView.as_view(), name="price-history"),
    path(
        "organizations/<uuid:organization_id>/allocations/",
        market.OrganizationAllocationsView.as_view(),
        name="organization-allocations",
    ),
    path(
        "organizations/<uuid:organization_id>/clusters/",
        market.OrganizationClustersView.as_view(),
        name="organization-clusters",
    ),
    path(
        "organizations/<uuid:organization_id>/offers/",
        market.OrganizationOffersView.as_view(),
        name="organization-offers",
    ),
    path(
        "clusters/<uuid:cluster_id>/verify/",
        market.ClusterVerifyView.as_view(),
        name="cluster-verify",
    ),
    path(
        "clusters/<uuid:cluster_id>/capacity/",
        capacity.ClusterCapacityView.as_view(),
        name="cluster-capacity",
    ),
    path(
        "offers/<uuid:offer_id>/extend/",
        capacity.OfferExtendView.as_view(),
        name="offer-extend",
    ),
    path(
        "clusters/<uuid:cluster_id>/capacity/suggested-offer/",
        capacity.SuggestedOfferCreateView.as_view(),
        name="cluster-suggested-offer",
    ),
    path(
        "clusters/<uuid:cluster_id>/verification/",
        market.ClusterVerificationView.as_view(),
        name="cluster-verification",
    ),
    path(
        "clusters/<uuid:cluster_id>/tenant-accounts/<str:username>/scrub/",
        market.TenantAccountScrubView.as_view(),
        name="tenant-account-scrub",
    ),
]

# An organization's webhooks (organizations/views/webhooks.py).
organization_webhooks = "organizations/<uuid:organization_id>/webhooks/"
urlpatterns += [
    path(
        organization_webhooks,
        webhooks.WebhookListView.as_view(),
        name="organization-webhooks",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/",
        webhooks.WebhookDetailView.as_view(),
        name="organization-webhook",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/rotate-secret/",
        webhooks.WebhookRotateSecretView.as_view(),
        name="organization-webhook-rotate-secret",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/remove/",
        webhooks.WebhookRemoveView.as_view(),
        name="organization-webhook-remove",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/deliveries/<uuid:delivery_id>/redeliver/",
        webhooks.WebhookRedeliverView.as_view(),
        name="organization-webhook-redeliver",
    ),
]
