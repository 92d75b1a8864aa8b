"""What a team is on a cluster: the pool account leased to it (docs/design.md, Tenants on a
cluster) and, in managed mode, the Slurm account the platform keeps for it."""

from typing import ClassVar

from django.db import models
from django.db.models import Q

from computeshare.models import BaseModel
from marketplace.models.clusters import Cluster
from organizations.models import Organization


class SlurmAccount(BaseModel):
    """The Slurm account the platform manages for one buying organization on one cluster
    (`managed` mode). `wanted_cpu_minutes` follows the organization's allocations there;
    `applied_cpu_minutes` is what the cluster was last seen to enforce."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="slurm_accounts")
    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="slurm_accounts"
    )
    name = models.CharField(max_length=64)
    wanted_cpu_minutes = models.PositiveBigIntegerField(default=0)
    wanted_gpu_minutes = models.PositiveBigIntegerField(default=0)
    applied_cpu_minutes = models.PositiveBigIntegerField(null=True, blank=True)
    applied_gpu_minutes = models.PositiveBigIntegerField(null=True, blank=True)
    synced_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "organization"], name="slurm_account_one_per_organization"
            ),
            models.UniqueConstraint(fields=["cluster", "name"], name="slurm_account_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} on {self.cluster}"

    @property
    def is_in_sync(self) -> bool:
        return (self.applied_cpu_minutes, self.applied_gpu_minutes) == (
            self.wanted_cpu_minutes,
            self.wanted_gpu_minutes,
        )


class TenantAccount(BaseModel):
    """One of a cluster's pool accounts: an unprivileged Unix user of the owner's tenant group
    that the platform leases to one team at a time (docs/design.md, Tenants on a cluster).
    Verification records them; a lease takes one; when the lease ends the account is scrubbed
    before anyone else gets it, and one that cannot be scrubbed is quarantined."""

    class Status(models.TextChoices):
        AVAILABLE = "available", "Available"
        LEASED = "leased", "Leased"
        # Could not be scrubbed: out of the pool until its owners have looked at it.
        QUARANTINED = "quarantined", "Quarantined"
        # No longer in the tenant group at the last verification.
        RETIRED = "retired", "Retired"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.AVAILABLE: {Status.LEASED, Status.RETIRED},
        Status.LEASED: {Status.AVAILABLE, Status.QUARANTINED},
        Status.QUARANTINED: {Status.AVAILABLE, Status.RETIRED},
        Status.RETIRED: {Status.AVAILABLE},
    }

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="tenant_accounts")
    username = models.CharField(max_length=32)
    home = models.CharField(max_length=255)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.AVAILABLE)
    status_detail = models.CharField(max_length=1000, blank=True)
    last_scrubbed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "username"]
        indexes = [models.Index(fields=["cluster", "status"], name="tenant_account_pool")]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "username"], name="tenant_account_unique_username"
            ),
            models.CheckConstraint(
                condition=Q(status__in=["available", "leased", "quarantined", "retired"]),
                name="tenant_account_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.username} on {self.cluster}"


class TenantLease(BaseModel):
    """A team's hold on one tenant account of one cluster: from its first open allocation
    there until it has neither an open allocation nor an unfinished job there. Everything done
    for the team on the cluster runs as the account meanwhile, and every Slurm run of that Unix
    user in the lease is the team's. Ending it scrubs the account (`ending`); a scrub that
    fails quarantines the account (`failed`) until its owners have looked."""

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        ENDING = "ending", "Being scrubbed"
        ENDED = "ended", "Ended"
        FAILED = "failed", "Scrub failed"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.ACTIVE: {Status.ENDING},
        Status.ENDING: {Status.ENDED, Status.FAILED},
        Status.FAILED: {Status.ENDING},
        Status.ENDED: set(),
    }
    # The account is this lease's (no other team may have it) in these states.
    HOLDING_STATES: ClassVar[tuple[str, ...]] = (Status.ACTIVE, Status.ENDING, Status.FAILED)

    account = models.ForeignKey(TenantAccount, on_delete=models.PROTECT, related_name="leases")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="tenant_leases")
    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="tenant_leases"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    # Managed mode: the tenant's Slurm association with the team's account is in place.
    prepared_at = models.DateTimeField(null=True, blank=True)
    ending_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    scrub_detail = models.CharField(max_length=1000, blank=True)
    # A scrub holds the lease until then: two scrubs of one account at once would end each
    # other's processes (a retried task, a second request of its owners).
    scrubbing_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["cluster", "status"], name="tenant_lease_cluster_status")]
        constraints = [
            models.UniqueConstraint(
                fields=["account"],
                condition=Q(status__in=["active", "ending", "failed"]),
                name="tenant_lease_one_team_per_account",
            ),
            models.UniqueConstraint(
                fields=["cluster", "organization"],
                condition=Q(status="active"),
                name="tenant_lease_one_per_team_and_cluster",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["active", "ending", "ended", "failed"]),
                name="tenant_lease_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.account.username} for {self.organization} ({self.status})"

    @property
    def username(self) -> str:
        return self.account.username
