from django.urls import path

from marketplace.views import capacity, market

# The market's pages (marketplace/views/market.py).
urlpatterns = [
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
