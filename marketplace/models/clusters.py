"""A cluster, its partitions as verification read them, and its verifications."""

from datetime import timedelta
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils import timezone

from computeshare.fields import EncryptedTextField
from computeshare.models import BaseModel
from organizations.models import Organization


class Cluster(BaseModel):
    """An owner's Slurm cluster, reached over SSH with the host key pinned at registration."""

    class Backend(models.TextChoices):
        SLURM = "slurm", "Slurm over SSH"
        # Runs jobs as local processes; for the demo and development, never offered to owners.
        LOCAL = "local", "Local processes"

    class Status(models.TextChoices):
        UNVERIFIED = "unverified", "Unverified"
        ONLINE = "online", "Online"
        UNREACHABLE = "unreachable", "Unreachable"
        HOST_KEY_MISMATCH = "host_key_mismatch", "Host key mismatch"
        SUSPENDED = "suspended", "Suspended"
        # It answered, but a check the platform relies on failed (no SFTP, sudo not set up...).
        MISCONFIGURED = "misconfigured", "Misconfigured"

    class AccountMode(models.TextChoices):
        MANAGED = "managed", "One Slurm account per buying organization"
        FIXED = "fixed", "One Slurm account for every job"

    # A cluster in one of these takes no new work until its owners or the operators sort it
    # out: the operators took it off the market, or its host offered another key than the
    # pinned one (it may not be the owners' any more). Its offers sell nothing, its
    # allocations take no jobs, and the jobs queued for it wait.
    UNAVAILABLE_STATUSES: ClassVar[frozenset[str]] = frozenset(
        {Status.SUSPENDED, Status.HOST_KEY_MISMATCH}
    )
    # What a verification (or a connection refused for its host key) can find.
    VERIFIED: ClassVar[tuple[str, ...]] = (
        Status.ONLINE,
        Status.UNREACHABLE,
        Status.MISCONFIGURED,
        Status.HOST_KEY_MISMATCH,
    )
    # Verification decides among online, unreachable, misconfigured and host_key_mismatch, and
    # may find the same again with a new detail; new connection settings make the cluster
    # unverified. Only the operators suspend, and a suspension ends only by their reinstating
    # it (unverified): nothing the cluster answers lifts it (`services/clusters.py`).
    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.UNVERIFIED: {*VERIFIED, Status.SUSPENDED},
        Status.ONLINE: {*VERIFIED, Status.UNVERIFIED, Status.SUSPENDED},
        Status.UNREACHABLE: {*VERIFIED, Status.UNVERIFIED, Status.SUSPENDED},
        Status.MISCONFIGURED: {*VERIFIED, Status.UNVERIFIED, Status.SUSPENDED},
        Status.HOST_KEY_MISMATCH: {*VERIFIED, Status.UNVERIFIED, Status.SUSPENDED},
        Status.SUSPENDED: {Status.SUSPENDED, Status.UNVERIFIED},
    }

    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="clusters"
    )
    name = models.CharField(max_length=120)
    backend = models.CharField(max_length=16, choices=Backend.choices, default=Backend.SLURM)
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.UNVERIFIED)
    status_detail = models.CharField(max_length=500, blank=True)
    ssh_host = models.CharField(max_length=255, blank=True)
    ssh_port = models.PositiveIntegerField(default=22)
    ssh_user = models.CharField(max_length=64, blank=True)
    ssh_private_key = EncryptedTextField(blank=True)
    ssh_host_key = models.CharField(max_length=2000, blank=True)
    host_key_fingerprint = models.CharField(max_length=100, blank=True)
    account_mode = models.CharField(
        max_length=16, choices=AccountMode.choices, default=AccountMode.FIXED
    )
    slurm_account = models.CharField(max_length=64, blank=True)
    slurm_cluster_name = models.CharField(max_length=64, blank=True)
    slurm_version = models.CharField(max_length=32, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    # The owner's pool of tenant accounts: the Unix group `scripts/cluster-setup` made. Every
    # team's work runs as one of its members, leased to that team alone.
    tenant_group = models.CharField(max_length=32, default="computeshare-tenants")
    # The SFTP server program the tenants' sessions run under sudo; verification checks it.
    sftp_server = models.CharField(max_length=255, default="/usr/lib/openssh/sftp-server")
    # Managed mode: the account idle tenants sit in (it runs nothing), read by verification.
    tenant_idle_account = models.CharField(max_length=64, blank=True)
    # Whether accounting records GPUs (`gres/gpu` in AccountingStorageTRES): without it a GPU
    # job would meter zero, so GPU offers are refused.
    tracks_gpus = models.BooleanField(default=False)
    # The two kinds of capacity (docs/design.md, The product), as the last verification found the
    # cluster able to hold them. Preemptible: teams' jobs run under `market_qos`, which each of
    # `owner_qos` preempts (requeued after `preemption_grace_seconds` of SIGTERM).
    # Reserved: the service user may create Slurm reservations. Each `*_refusal` says why the
    # kind cannot be sold ("" when it can).
    sells_preemptible = models.BooleanField(default=False)
    preemptible_refusal = models.CharField(max_length=500, blank=True)
    market_qos = models.CharField(max_length=64, blank=True)
    owner_qos = models.JSONField(default=list, blank=True)
    preemption_grace_seconds = models.PositiveIntegerField(null=True, blank=True)
    sells_reserved = models.BooleanField(default=False)
    reserved_refusal = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(
                "organization", Lower("name"), name="cluster_unique_name_per_organization"
            ),
            models.CheckConstraint(
                condition=Q(
                    status__in=[
                        "unverified",
                        "online",
                        "unreachable",
                        "host_key_mismatch",
                        "suspended",
                        "misconfigured",
                    ]
                ),
                name="cluster_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(account_mode="managed") | ~Q(slurm_account="") | Q(backend="local"),
                name="cluster_fixed_mode_names_account",
            ),
            models.CheckConstraint(
                condition=Q(ssh_port__gte=1, ssh_port__lte=65535), name="cluster_ssh_port_valid"
            ),
            models.CheckConstraint(
                condition=~Q(tenant_group="") | Q(backend="local"),
                name="cluster_slurm_names_tenant_group",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_online(self) -> bool:
        return self.status == self.Status.ONLINE

    @property
    def runs_jobs_as_tenants(self) -> bool:
        return backend_runs_jobs_as_tenants(self.backend)


def backend_runs_jobs_as_tenants(backend: str) -> bool:
    """Whether a cluster of this backend runs each team's jobs as a leased tenant account
    (every Slurm cluster), so that it serves at most as many teams as it has accounts. The
    demo's local backend keeps jobs apart with a sandbox instead."""
    return backend == Cluster.Backend.SLURM


class Partition(BaseModel):
    """A Slurm partition as the last successful verification read it."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="partitions")
    name = models.CharField(max_length=64)
    nodes = models.PositiveIntegerField()
    cpus = models.PositiveIntegerField()
    gpus = models.PositiveIntegerField()
    max_time_minutes = models.PositiveIntegerField(null=True, blank=True)
    is_up = models.BooleanField(default=True)
    # The nodes' hardware as verification read it (hpc.slurm.inventory): the
    # smallest node's CPUs, memory and GPUs, and the GPU types and features of any node, sorted.
    cpus_per_node = models.PositiveIntegerField(default=0)
    memory_per_node_mb = models.PositiveBigIntegerField(default=0)
    gpus_per_node = models.PositiveIntegerField(default=0)
    gpu_types = models.JSONField(default=list, blank=True)
    features = models.JSONField(default=list, blank=True)
    nodes_differ = models.BooleanField(default=False)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="partition_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"


class ClusterVerification(BaseModel):
    """One run of the verification task, so that the owner's page can show its progress."""

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.RUNNING: {Status.SUCCEEDED, Status.FAILED},
        Status.SUCCEEDED: set(),
        Status.FAILED: set(),
    }

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="verifications")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    step = models.CharField(max_length=200, blank=True)
    # Every check as it ran: [{"key", "title", "status" (passed, failed, warning, skipped),
    # "detail"}], in order, for the page and the API.
    steps = models.JSONField(default=list, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    detail = models.CharField(max_length=1000, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["running", "succeeded", "failed"]),
                name="cluster_verification_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"verification of {self.cluster} ({self.status})"

    # A run still `running` after this long lost its worker: the page stops waiting for it and
    # a new request starts another.
    STALE_AFTER = timedelta(minutes=5)

    @property
    def is_stale(self) -> bool:
        return (
            self.status == self.Status.RUNNING
            and timezone.now() - self.created_at > self.STALE_AFTER
        )

    @property
    def shown_status(self) -> str:
        return self.Status.FAILED if self.is_stale else self.status

    @property
    def shown_detail(self) -> str:
        if self.is_stale:
            return "No worker finished this verification; verify again."
        return self.detail
