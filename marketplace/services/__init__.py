"""Every write of the marketplace. Views, serializers, tasks and commands call these by name."""

from marketplace.services.auctions import (
    AuctionOutcome,
    allocation_close,
    auction_clear,
)
from marketplace.services.capacity import (
    cluster_reachability_record,
    hardware_changes_record,
    owner_side_run_end_record,
    partition_idle_record,
)
from marketplace.services.clusters import (
    cluster_connection_update,
    cluster_create,
    cluster_create_local,
    cluster_host_key_refused,
    cluster_reinstate,
    cluster_suspend,
    ssh_settings_for,
)
from marketplace.services.offers import (
    offer_cancel,
    offer_create,
    offer_extend,
    offer_is_cancellable,
)
from marketplace.services.orders import (
    bid_is_withdrawable,
    bid_place,
    bid_withdraw,
    offer_buy,
    purchase_block,
)
from marketplace.services.reservations import (
    HeldBlock,
    ReservationsReport,
    reservations_check,
    reserved_clusters,
)
from marketplace.services.slurm_accounts import (
    slurm_account_clusters_to_reconcile,
    slurm_account_plan,
    slurm_accounts_sync,
    tenant_slurm_join,
    tenant_slurm_leave,
)
from marketplace.services.tenants import (
    TenantSeats,
    tenant_account_rescrub,
    tenant_accounts_record,
    tenant_lease_end_start,
    tenant_lease_scrub,
    tenant_lease_take,
    tenant_seats_lock,
)
from marketplace.services.verification import (
    cluster_verification_run,
    cluster_verification_start,
    cluster_verify,
)

__all__ = [
    "AuctionOutcome",
    "HeldBlock",
    "ReservationsReport",
    "TenantSeats",
    "allocation_close",
    "auction_clear",
    "bid_is_withdrawable",
    "bid_place",
    "bid_withdraw",
    "cluster_connection_update",
    "cluster_create",
    "cluster_create_local",
    "cluster_host_key_refused",
    "cluster_reachability_record",
    "cluster_reinstate",
    "cluster_suspend",
    "cluster_verification_run",
    "cluster_verification_start",
    "cluster_verify",
    "hardware_changes_record",
    "offer_buy",
    "offer_cancel",
    "offer_create",
    "offer_extend",
    "offer_is_cancellable",
    "owner_side_run_end_record",
    "partition_idle_record",
    "purchase_block",
    "reservations_check",
    "reserved_clusters",
    "slurm_account_clusters_to_reconcile",
    "slurm_account_plan",
    "slurm_accounts_sync",
    "ssh_settings_for",
    "tenant_account_rescrub",
    "tenant_accounts_record",
    "tenant_lease_end_start",
    "tenant_lease_scrub",
    "tenant_lease_take",
    "tenant_seats_lock",
    "tenant_slurm_join",
    "tenant_slurm_leave",
]
