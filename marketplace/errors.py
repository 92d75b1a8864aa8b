"""The errors of the market. Codes are part of the public contract (API.md)."""

from computeshare.errors import ApplicationError, Conflict


class HostKeyMismatch(Conflict):
    code = "host_key_mismatch"
    default_detail = (
        "The cluster offered a host key that is not the pinned one: the connection was refused."
    )


class ClusterUnreachable(ApplicationError):
    status_code = 502
    code = "cluster_unreachable"
    default_detail = "The cluster could not be reached over SSH."


class ClusterNotOnline(Conflict):
    code = "cluster_not_online"
    default_detail = "The cluster is not verified and online."


class OfferNotOpen(Conflict):
    code = "offer_not_open"
    default_detail = "This offer no longer takes bids or purchases."


class OfferHasBids(Conflict):
    code = "offer_has_bids"
    default_detail = "An offer with bids or sales cannot be cancelled."


class InsufficientQuantity(Conflict):
    code = "insufficient_quantity"
    default_detail = "The offer has fewer units left than asked for."


class BuyNowNotOffered(Conflict):
    code = "buy_now_not_offered"
    default_detail = "This offer has no buy-now price."


class MaxPerBuyerExceeded(Conflict):
    code = "max_per_buyer_exceeded"
    default_detail = "This would take the organization past the offer's cap per buyer."


class BidNotOpen(Conflict):
    code = "bid_not_open"
    default_detail = "This bid is no longer open."


class ClusterSuspended(Conflict):
    code = "cluster_suspended"
    default_detail = "The platform's operators suspended this cluster; contact them."
