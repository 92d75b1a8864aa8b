"""The errors of the market. Codes are part of the public contract (docs/api.md, Error codes)."""

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


class TenantAccountsExhausted(Conflict):
    code = "tenant_accounts_exhausted"
    default_detail = (
        "Every tenant account of this cluster is leased to another team: the cluster serves at "
        "most as many teams at once as its owner gave it accounts for."
    )


class ClusterMisconfigured(Conflict):
    code = "cluster_misconfigured"
    default_detail = "The cluster answered, but a check the platform relies on failed."


class GpuNotMetered(Conflict):
    code = "gpu_not_metered"
    default_detail = (
        "This cluster's accounting does not record GPUs (gres/gpu is not in "
        "AccountingStorageTRES): GPU-hours sold there could not be metered."
    )


class TenantAccountNotQuarantined(Conflict):
    code = "tenant_account_not_quarantined"
    default_detail = "Only a quarantined tenant account can be scrubbed and returned to the pool."


class PartitionCapacityExceeded(Conflict):
    code = "partition_capacity_exceeded"
    default_detail = (
        "With the offers already open or sold on this partition, this would sell more than the "
        "partition has in some hours: `extra.hours` lists them."
    )


class OfferNotExtendable(Conflict):
    code = "offer_not_extendable"
    default_detail = "This offer can no longer be extended."


class CapacityNotSold(Conflict):
    code = "capacity_not_sold"
    default_detail = (
        "This cluster cannot sell this kind of capacity: its last verification found what "
        "Slurm would need missing (`extra.reason`)."
    )


class ReservationRefused(Conflict):
    code = "reservation_refused"
    default_detail = (
        "The cluster's scheduler would not hold these cores for the window (they are already "
        "reserved or in use, or the platform may no longer make reservations there): nothing "
        "was sold and nothing held. `extra.reason` has the scheduler's words."
    )
