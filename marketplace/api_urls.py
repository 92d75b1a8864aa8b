from django.urls import path

from marketplace.api import market

urlpatterns = [
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
