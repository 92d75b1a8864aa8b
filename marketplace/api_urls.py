from django.urls import path

from marketplace.api import capacity, clusters, offers, orders

urlpatterns = [
    path("clusters/", clusters.ClusterListCreateApi.as_view(), name="api-clusters"),
    path("clusters/<uuid:cluster_id>/", clusters.ClusterDetailApi.as_view(), name="api-cluster"),
    path(
        "clusters/<uuid:cluster_id>/verify/",
        clusters.ClusterVerifyApi.as_view(),
        name="api-cluster-verify",
    ),
    path(
        "clusters/<uuid:cluster_id>/tenant-accounts/",
        clusters.TenantAccountListApi.as_view(),
        name="api-cluster-tenant-accounts",
    ),
    path(
        "clusters/<uuid:cluster_id>/tenant-accounts/<str:username>/scrub/",
        clusters.TenantAccountScrubApi.as_view(),
        name="api-cluster-tenant-account-scrub",
    ),
    path(
        "clusters/<uuid:cluster_id>/partitions/<str:partition>/calendar/",
        capacity.PartitionCalendarApi.as_view(),
        name="api-partition-calendar",
    ),
    path(
        "clusters/<uuid:cluster_id>/partitions/<str:partition>/idle/",
        capacity.PartitionIdleApi.as_view(),
        name="api-partition-idle",
    ),
    path(
        "clusters/<uuid:cluster_id>/track-record/",
        capacity.TrackRecordApi.as_view(),
        name="api-cluster-track-record",
    ),
    path("offers/", offers.OfferListCreateApi.as_view(), name="api-offers"),
    path("offers/price-history/", offers.PriceHistoryApi.as_view(), name="api-price-history"),
    path("offers/<uuid:offer_id>/", offers.OfferDetailApi.as_view(), name="api-offer"),
    path("offers/<uuid:offer_id>/buy/", orders.OfferBuyApi.as_view(), name="api-offer-buy"),
    path("offers/<uuid:offer_id>/bids/", orders.OfferBidCreateApi.as_view(), name="api-offer-bids"),
    path(
        "offers/<uuid:offer_id>/cancel/", offers.OfferCancelApi.as_view(), name="api-offer-cancel"
    ),
    path(
        "offers/<uuid:offer_id>/extend/", offers.OfferExtendApi.as_view(), name="api-offer-extend"
    ),
    path("bids/", orders.BidListApi.as_view(), name="api-bids"),
    path("bids/<uuid:bid_id>/", orders.BidDetailApi.as_view(), name="api-bid"),
    path("allocations/", orders.AllocationListApi.as_view(), name="api-allocations"),
    path(
        "allocations/<uuid:allocation_id>/",
        orders.AllocationDetailApi.as_view(),
        name="api-allocation",
    ),
]
