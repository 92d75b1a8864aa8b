"""Input and output shapes of the cluster and tenant account endpoints (docs/api.md).
They translate; the services decide."""

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from computeshare.ids import IdPrefixField
from marketplace.models import (
    Capacity,
    Cluster,
    ClusterVerification,
    TenantAccount,
    backend_runs_jobs_as_tenants,
)

MARKET_QOS_HELP = (
    "The QOS the teams' preemptible jobs run under, as `scripts/cluster-setup --preemption ... "
    "--market-qos NAME` made it; `computeshare-market` when not given or blank. Verification "
    "checks that the owner's QOS preempt it."
)


class PartitionSerializer(serializers.Serializer):
    name = serializers.CharField()
    cpus = serializers.IntegerField()
    gpus = serializers.IntegerField()
    nodes = serializers.IntegerField()
    max_time_minutes = serializers.IntegerField(allow_null=True)
    is_up = serializers.BooleanField()


class TenantAccountsSerializer(serializers.Serializer):
    """A cluster's pool of tenant accounts as buyers need it: each team on the cluster works as
    one account of its own."""

    total = serializers.IntegerField(
        help_text="How many teams the cluster can serve at once: its tenant accounts, those "
        "quarantined included, the retired ones not."
    )
    free = serializers.IntegerField(
        help_text="How many more teams it can take now: accounts no team holds. A purchase or "
        "a winning bid by a team without an account there is refused (409 "
        "`tenant_accounts_exhausted`) while this is 0."
    )


def cluster_capacity_kinds(cluster: Cluster) -> list[str]:
    """The kinds the cluster sells, in their fixed order."""
    kinds = [(Capacity.PREEMPTIBLE, cluster.sells_preemptible)]
    kinds.append((Capacity.RESERVED, cluster.sells_reserved))
    return [str(kind) for kind, sold in kinds if sold]


def tenant_accounts_of(backend: str, counts: Mapping[str, Any]) -> dict[str, int] | None:
    """`{"total", "free"}` from the annotations `selectors.tenant_account_counts` makes; None
    on a cluster whose jobs do not run as tenant accounts (the demo's local backend), which
    serves any number of teams."""
    if not backend_runs_jobs_as_tenants(backend):
        return None
    return {"total": counts["tenant_accounts_total"], "free": counts["tenant_accounts_free"]}


class ClusterSerializer(serializers.Serializer):
    """Public fields for everyone signed in; the connection fields only for the clusters the
    selector marks `viewer_is_owner` (their owners). The private key is never returned."""

    id = serializers.UUIDField(source="uuid")
    name = serializers.CharField()
    organization = serializers.UUIDField(source="organization.uuid")
    organization_name = serializers.CharField(source="organization.name")
    status = serializers.ChoiceField(choices=Cluster.Status.choices)
    partitions = PartitionSerializer(many=True)
    verified_at = serializers.DateTimeField(allow_null=True)
    tenant_accounts = serializers.SerializerMethodField(
        help_text="How many teams the cluster serves at once and how many more it can take "
        "now; null on the demo's local backend, where jobs do not run as tenant accounts."
    )
    capacity_kinds = serializers.SerializerMethodField(
        help_text="The kinds of capacity the cluster can sell, as its last verification found "
        "Slurm able to hold them: `preemptible`, `reserved`."
    )
    preemption_grace_seconds = serializers.IntegerField(
        allow_null=True,
        help_text="How long a preempted job has between SIGTERM and its requeue (the market "
        "QOS's GraceTime); null where preemptible capacity is not sold.",
    )
    capacity_refusals = serializers.SerializerMethodField(
        required=False,
        help_text="Owners only: why each kind the cluster cannot sell is refused, in words to "
        'act on (`{"preemptible": "..."}`); empty when it sells both.',
    )
    market_qos = serializers.CharField(
        required=False,
        help_text="Owners only: the QOS teams' preemptible jobs run under (fixed mode).",
    )
    owner_qos = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Owners only: the owner's QOSes that preempt the market's.",
    )
    ssh_host = serializers.CharField(required=False, help_text="Owners only.")
    ssh_port = serializers.IntegerField(required=False, help_text="Owners only.")
    ssh_user = serializers.CharField(required=False, help_text="Owners only.")
    ssh_host_key = serializers.CharField(required=False, help_text="Owners only.")
    host_key_fingerprint = serializers.CharField(required=False, help_text="Owners only.")
    account_mode = serializers.ChoiceField(
        choices=Cluster.AccountMode.choices, required=False, help_text="Owners only."
    )
    slurm_account = serializers.CharField(required=False, help_text="Owners only.")
    status_detail = serializers.CharField(required=False, help_text="Owners only.")
    tenant_group = serializers.CharField(
        required=False,
        help_text="Owners only. The Unix group of the tenant accounts (scripts/cluster-setup).",
    )
    sftp_server = serializers.CharField(
        required=False,
        help_text="Owners only. The SFTP server program the tenants' sessions run.",
    )
    tenant_idle_account = serializers.CharField(
        required=False,
        help_text="Owners only. Managed mode: the Slurm account idle tenants sit in, as the "
        "last verification read it.",
    )
    tracks_gpus = serializers.BooleanField(
        required=False,
        help_text="Owners only. Whether accounting records GPUs (gres/gpu in "
        "AccountingStorageTRES), as the last verification read it; GPU offers need it.",
    )

    OWNER_FIELDS: tuple[str, ...] = (
        "ssh_host",
        "ssh_port",
        "ssh_user",
        "ssh_host_key",
        "host_key_fingerprint",
        "account_mode",
        "slurm_account",
        "status_detail",
        "tenant_group",
        "sftp_server",
        "tenant_idle_account",
        "tracks_gpus",
        "capacity_refusals",
        "market_qos",
        "owner_qos",
    )

    @extend_schema_field(serializers.ListField(child=serializers.ChoiceField(Capacity.choices)))
    def get_capacity_kinds(self, cluster: Cluster) -> list[str]:
        return cluster_capacity_kinds(cluster)

    @extend_schema_field(serializers.DictField(child=serializers.CharField()))
    def get_capacity_refusals(self, cluster: Cluster) -> dict[str, str]:
        refusals = {
            Capacity.PREEMPTIBLE: "" if cluster.sells_preemptible else cluster.preemptible_refusal,
            Capacity.RESERVED: "" if cluster.sells_reserved else cluster.reserved_refusal,
        }
        return {str(kind): reason for kind, reason in refusals.items() if reason}

    @extend_schema_field(TenantAccountsSerializer(allow_null=True))
    def get_tenant_accounts(self, cluster: Cluster) -> dict[str, int] | None:
        # Read from `selectors.cluster_list`'s annotations, as every endpoint loads clusters.
        return tenant_accounts_of(cluster.backend, vars(cluster))

    def to_representation(self, instance: Cluster) -> dict[str, Any]:
        data = super().to_representation(instance)
        # Who sees the owners' fields is the selector's to say (`cluster_list_for_user`).
        if not getattr(instance, "viewer_is_owner", False):
            for field in self.OWNER_FIELDS:
                data.pop(field, None)
        return data


class ClusterCreateSerializer(serializers.Serializer):
    organization = serializers.UUIDField()
    name = serializers.CharField(max_length=120)
    ssh_host = serializers.CharField(max_length=255)
    ssh_port = serializers.IntegerField(default=22, min_value=1, max_value=65535)
    ssh_user = serializers.CharField(max_length=64)
    ssh_private_key = serializers.CharField(
        write_only=True, max_length=20_000, trim_whitespace=False
    )
    ssh_host_key = serializers.CharField(max_length=2_000)
    account_mode = serializers.ChoiceField(choices=Cluster.AccountMode.choices, required=False)
    slurm_account = serializers.CharField(max_length=64, required=False, allow_blank=True)
    tenant_group = serializers.CharField(
        max_length=32,
        required=False,
        help_text="The Unix group of the tenant accounts scripts/cluster-setup made; "
        "`computeshare-tenants` when not given.",
    )
    sftp_server = serializers.CharField(
        max_length=255,
        required=False,
        help_text="The SFTP server program, as on the `Subsystem sftp` line of the cluster's "
        "sshd_config; `/usr/lib/openssh/sftp-server` when not given.",
    )
    market_qos = serializers.CharField(
        max_length=64,
        required=False,
        allow_blank=True,
        help_text=MARKET_QOS_HELP,
    )


class VerificationStepSerializer(serializers.Serializer):
    key = serializers.CharField(
        help_text="Which check: connect, partitions, queries, visibility, operator and limits "
        "(managed mode), pool, sudo, homes, sftp, idle (managed mode), sbatch, gpus, proctrack, "
        "nodes, preemption, reservations."
    )
    title = serializers.CharField(help_text="The check in words, with the names it concerns.")
    status = serializers.ChoiceField(choices=["passed", "failed", "warning", "running"])
    detail = serializers.CharField(
        help_text="Why it failed or warns, in words an owner can act on; what it found "
        "otherwise (may be empty)."
    )


class VerificationSerializer(serializers.Serializer):
    """One verification of a cluster, as the worker runs it and once it has ended."""

    id = serializers.UUIDField(source="uuid")
    status = serializers.ChoiceField(
        choices=ClusterVerification.Status.choices,
        source="shown_status",
        help_text="`running` while a worker verifies (follow the cluster's GET); `succeeded` "
        "or `failed` once it has ended. A verification no worker finished within a few "
        "minutes reads `failed`.",
    )
    step = serializers.CharField(help_text="The check running now (`Done` once ended).")
    steps = VerificationStepSerializer(many=True)
    code = serializers.CharField(
        source="error_code",
        help_text="Why it failed, once it has: `cluster_unreachable` (no SSH connection could "
        "be opened; one reason whatever the cause), `host_key_mismatch`, "
        "`cluster_misconfigured` (`failed_step` names the check), `cluster_suspended` or "
        "`internal_error`; empty otherwise.",
    )
    detail = serializers.CharField(source="shown_detail")
    failed_step = serializers.SerializerMethodField(
        help_text="The key of the step that failed, if one did."
    )
    requested_at = serializers.DateTimeField(source="created_at")
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_failed_step(self, verification: ClusterVerification) -> str | None:
        failed = [step for step in verification.steps if step.get("status") == "failed"]
        return failed[-1].get("key") if failed else None


class ClusterDetailSerializer(ClusterSerializer):
    """One cluster; its owners also see its latest verification."""

    verification = VerificationSerializer(
        source="latest_verification",
        allow_null=True,
        required=False,
        help_text="Owners only: the latest verification, null before the first.",
    )

    OWNER_FIELDS = (*ClusterSerializer.OWNER_FIELDS, "verification")


class ClusterConnectionSerializer(serializers.Serializer):
    """A partial change of how the platform reaches the cluster (PATCH)."""

    ssh_host = serializers.CharField(max_length=255, required=False)
    ssh_port = serializers.IntegerField(min_value=1, max_value=65535, required=False)
    ssh_user = serializers.CharField(max_length=64, required=False)
    ssh_private_key = serializers.CharField(
        write_only=True, max_length=20_000, trim_whitespace=False, required=False
    )
    ssh_host_key = serializers.CharField(max_length=2_000, required=False)
    tenant_group = serializers.CharField(max_length=32, required=False)
    sftp_server = serializers.CharField(max_length=255, required=False)
    market_qos = serializers.CharField(
        max_length=64, required=False, allow_blank=True, help_text=MARKET_QOS_HELP
    )


class TenantAccountSerializer(serializers.Serializer):
    """One account of a cluster's pool, as its owners see it."""

    username = serializers.CharField()
    status = serializers.ChoiceField(choices=TenantAccount.Status.choices)
    status_detail = serializers.CharField(
        help_text="Why a quarantined account is out of the pool (what the scrub left), or why "
        "one was retired."
    )
    leased_to = serializers.CharField(
        allow_null=True,
        help_text="The organization whose lease holds the account (also while it is scrubbed, "
        "and when its scrub failed); null when no team holds it.",
    )
    last_scrubbed_at = serializers.DateTimeField(allow_null=True)


class ClusterFilterSerializer(serializers.Serializer):
    id_prefix = IdPrefixField()
