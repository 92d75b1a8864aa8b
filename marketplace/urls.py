from django.urls import path

from marketplace.views import capacity, clusters, offers, orders

# The market's pages (marketplace/views/: offers, orders, clusters, capacity).
urlpatterns = [
    path("offers/", offers.OfferListView.as_view(), name="offer-list"),
    path("offers/<uuid:offer_id>/", offers.OfferDetailView.as_view(), name="offer-detail"),
    path("offers/<uuid:offer_id>/bid/", orders.OfferBidView.as_view(), name="offer-bid"),
    path("offers/<uuid:offer_id>/buy/", orders.OfferBuyView.as_view(), name="offer-buy"),
    path(
        "offers/<uuid:offer_id>/cancel/",
        offers.OfferCancelView.as_view(),
        name="offer-cancel",
    ),
    path("bids/<uuid:bid_id>/withdraw/", orders.BidWithdrawView.as_view(), name="bid-withdraw"),
    path("market/price-history/", offers.PriceHistoryView.as_view(), name="price-history"),
    path(
        "organizations/<uuid:organization_id>/allocations/",
        orders.OrganizationAllocationsView.as_view(),
        name="organization-allocations",
    ),
    path(
        "organizations/<uuid:organization_id>/clusters/",
        clusters.OrganizationClustersView.as_view(),
        name="organization-clusters",
    ),
    path(
        "organizations/<uuid:organization_id>/offers/",
        offers.OrganizationOffersView.as_view(),
        name="organization-offers",
    ),
    path(
        "clusters/<uuid:cluster_id>/verify/",
        clusters.ClusterVerifyView.as_view(),
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
        clusters.ClusterVerificationView.as_view(),
        name="cluster-verification",
    ),
    path(
        "clusters/<uuid:cluster_id>/tenant-accounts/<str:username>/scrub/",
        clusters.TenantAccountScrubView.as_view(),
        name="tenant-account-scrub",
    ),
]
