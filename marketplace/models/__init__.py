"""The marketplace's models, one module per aggregate. Every model is imported here, where
Django looks for them, and callers import them from here: `from marketplace.models import Offer`."""

from marketplace.models.allocations import Allocation, PendingReservation, units_field
from marketplace.models.bids import Bid
from marketplace.models.capacity import (
    ClusterOutage,
    HardwareChange,
    OwnerSideRunEnd,
    PartitionIdleHour,
)
from marketplace.models.clusters import (
    Cluster,
    ClusterVerification,
    Partition,
    backend_runs_jobs_as_tenants,
)
from marketplace.models.offers import (
    Capacity,
    Offer,
    OfferDemand,
    Resource,
    quantity_unit,
    window_hours,
)
from marketplace.models.tenants import SlurmAccount, TenantAccount, TenantLease

__all__ = [
    "Allocation",
    "Bid",
    "Capacity",
    "Cluster",
    "ClusterOutage",
    "ClusterVerification",
    "HardwareChange",
    "Offer",
    "OfferDemand",
    "OwnerSideRunEnd",
    "Partition",
    "PartitionIdleHour",
    "PendingReservation",
    "Resource",
    "SlurmAccount",
    "TenantAccount",
    "TenantLease",
    "backend_runs_jobs_as_tenants",
    "quantity_unit",
    "units_field",
    "window_hours",
]
