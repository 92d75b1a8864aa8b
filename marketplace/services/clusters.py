"""Clusters: registration with a pinned host key, verification over SSH, and the Slurm accounts
the platform manages for buying organizations.

No transaction is open while SSH talks to a cluster: each service reads what it needs, lets go
of the database, talks to the cluster, then writes the result in one short transaction."""

import os
import re
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from computeshare.errors import AddressNotAllowed, FieldErrors, PermissionDenied, ValidationFailed
from computeshare.outbound import AddressDenied, OutboundPolicy
from computeshare.states import status_move, status_move_all
from hpc.errors import HostKeyMismatch as BridgeHostKeyMismatch
from hpc.errors import (
    InvalidKey,
)
from hpc.slurm.inventory import ClusterInventory, PartitionInfo
from hpc.ssh import (
    DEFAULT_SFTP_SERVER,
    SSHSettings,
    fingerprint,
    host_key_from_line,
    private_key_from_text,
)
from marketplace.models import Cluster, Partition
from marketplace.services.capacity import hardware_changes_record
from organizations.models import Membership, Organization

# A DNS name or an IPv4/IPv6 address; nothing a shell or an SSH option could read otherwise.
_HOST = re.compile(
    r"^(?=.{1,253}$)([A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+$|^[0-9a-fA-F:.]+$"
)
_UNIX_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
_PROGRAM_PATH = re.compile(r"^/[A-Za-z0-9_./+-]{1,254}$")
DEFAULT_TENANT_GROUP = "computeshare-tenants"
_SLURM_ACCOUNT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
# sacctmgr keeps a QOS's name in lower case: a name given otherwise would never match it.
_SLURM_QOS = re.compile(r"^[a-z0-9_][a-z0-9_.-]{0,63}$")
VERIFY_TIMEOUT_SECONDS = 30.0


def _name(value: str, field: str = "name", limit: int = 120) -> str:
    cleaned = " ".join((value or "").split())
    if not cleaned:
        raise ValidationFailed(fields={field: ["Required."]})
    if len(cleaned) > limit:
        raise ValidationFailed(fields={field: [f"At most {limit} characters."]})
    return cleaned


def _market_qos(value: str) -> str:
    """The market QOS the owner made (`scripts/cluster-setup --market-qos`); empty for the
    default, `computeshare-market`."""
    cleaned = (value or "").strip()
    if cleaned and not _SLURM_QOS.match(cleaned):
        raise ValidationFailed(
            fields={
                "market_qos": [
                    "A Slurm QOS name as sacctmgr keeps it (lower-case letters, digits, - _ .)."
                ]
            }
        )
    return cleaned


def require_admin(actor: Membership) -> None:
    if not actor.is_admin:
        raise PermissionDenied("Only an admin of the owning organization can do this.")


def _connection_fields(
    *,
    ssh_host: str,
    ssh_port: int,
    ssh_user: str,
    ssh_private_key: str,
    ssh_host_key: str,
    tenant_group: str = DEFAULT_TENANT_GROUP,
    sftp_server: str = DEFAULT_SFTP_SERVER,
) -> dict[str, Any]:
    """Checks the connection settings without connecting; returns the cleaned fields."""
    fields = FieldErrors()
    host, user = _ssh_fields_check(fields, ssh_host, ssh_port, ssh_user, ssh_private_key)
    host_key_line, key_fingerprint = _host_key_check(fields, ssh_host_key)
    group, program = _pool_fields_check(fields, tenant_group, sftp_server)
    fields.raise_if_any()
    _host_check(host, ssh_port)
    return {
        "tenant_group": group,
        "sftp_server": program,
        "ssh_host": host,
        "ssh_port": ssh_port,
        "ssh_user": user,
        "ssh_private_key": ssh_private_key.strip() + "\n",
        "ssh_host_key": host_key_line,
        "host_key_fingerprint": key_fingerprint,
    }


def _ssh_fields_check(
    fields: FieldErrors, ssh_host: str, ssh_port: int, ssh_user: str, ssh_private_key: str
) -> tuple[str, str]:
    """Adds to `fields` what is wrong with the SSH endpoint and key; the host and user as
    cleaned."""
    host = (ssh_host or "").strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # an IPv6 address as a URL writes it
    if not _HOST.match(host):
        fields.add("ssh_host", "A host name or an IP address.")
    if not isinstance(ssh_port, int) or not 1 <= ssh_port <= 65535:
        fields.add("ssh_port", "A port number from 1 to 65535.")
    user = (ssh_user or "").strip()
    if not _UNIX_USER.match(user):
        fields.add("ssh_user", "A Unix user name (lower-case letters, digits, - _ .).")
    try:
        private_key_from_text(ssh_private_key or "")
    except InvalidKey:
        fields.add(
            "ssh_private_key",
            "An unencrypted Ed25519, ECDSA or RSA private key in OpenSSH or PEM format.",
        )
    return host, user


def _host_key_check(fields: FieldErrors, ssh_host_key: str) -> tuple[str, str]:
    """The host key line as stored (`type base64`) and its fingerprint; what is wrong with it
    added to `fields`."""
    host_key_line = " ".join((ssh_host_key or "").split())
    key_fingerprint = ""
    try:
        host_key = host_key_from_line(host_key_line)
        key_fingerprint = fingerprint(host_key)
        host_key_line = f"{host_key.get_name()} {host_key.get_base64()}"
    except InvalidKey as error:
        fields.add("ssh_host_key", f"A public key line, `type base64`: {error}")
    return host_key_line, key_fingerprint


def _pool_fields_check(fields: FieldErrors, tenant_group: str, sftp_server: str) -> tuple[str, str]:
    """The tenant group and the SFTP server program as cleaned; what is wrong with them added
    to `fields`."""
    group = (tenant_group or "").strip()
    if not _UNIX_USER.match(group):
        fields.add(
            "tenant_group",
            "The Unix group of the tenant accounts scripts/cluster-setup made "
            "(lower-case letters, digits, - _ .).",
        )
    program = (sftp_server or "").strip()
    if not _PROGRAM_PATH.match(program):
        fields.add(
            "sftp_server",
            "The absolute path of the SFTP server program, as on the `Subsystem sftp` line of "
            "the cluster's sshd_config.",
        )
    return group, program


def _host_check(host: str, port: int) -> None:
    """Refuses a host that resolves to an address the platform never connects to (loopback, the
    private network, the metadata service...: computeshare/outbound.py). A name that does not
    resolve now is accepted: every connection resolves and checks it again, and verification
    says that it cannot connect."""
    try:
        OutboundPolicy.from_settings().resolve(host, port)
    except AddressDenied as error:
        raise AddressNotAllowed(
            fields={
                "ssh_host": [
                    f"{host} is {error.address}, an address the platform does not connect to "
                    "(loopback, private, link-local or reserved). Give the login node's public "
                    "name or address."
                    if host == str(error.address)
                    else f"{host} resolves to {error.address}, an address the platform does not "
                    "connect to (loopback, private, link-local or reserved). Give the login "
                    "node's public name or address."
                ]
            }
        ) from error
    except OSError:
        pass


def _account_fields(account_mode: str | None, slurm_account: str | None) -> dict[str, str]:
    account = (slurm_account or "").strip()
    mode = account_mode or (Cluster.AccountMode.FIXED if account else Cluster.AccountMode.MANAGED)
    if mode not in Cluster.AccountMode.values:
        raise ValidationFailed(fields={"account_mode": ["Either `managed` or `fixed`."]})
    if mode == Cluster.AccountMode.FIXED and not _SLURM_ACCOUNT.match(account):
        raise ValidationFailed(
            fields={"slurm_account": ["The Slurm account every job runs under (fixed mode)."]}
        )
    if mode == Cluster.AccountMode.MANAGED and account:
        raise ValidationFailed(
            fields={"slurm_account": ["Managed mode creates one account per buyer: leave empty."]}
        )
    return {"account_mode": mode, "slurm_account": account}


@transaction.atomic
def cluster_create(
    *,
    actor: Membership,
    name: str,
    ssh_host: str,
    ssh_port: int = 22,
    ssh_user: str,
    ssh_private_key: str,
    ssh_host_key: str,
    account_mode: str | None = None,
    slurm_account: str | None = None,
    tenant_group: str = DEFAULT_TENANT_GROUP,
    sftp_server: str = DEFAULT_SFTP_SERVER,
    market_qos: str = "",
) -> Cluster:
    """Registers an owner's Slurm cluster, `unverified`. The host key is pinned now and every
    later connection must present it; the private key is stored encrypted. `tenant_group` is
    the Unix group of the pool of tenant accounts the owner made (scripts/cluster-setup);
    `market_qos` the QOS its preemptible jobs run under, when not `computeshare-market`."""
    require_admin(actor)
    fields = {
        "name": _name(name),
        **_connection_fields(
            ssh_host=ssh_host,
            ssh_port=ssh_port,
            ssh_user=ssh_user,
            ssh_private_key=ssh_private_key,
            ssh_host_key=ssh_host_key,
            tenant_group=tenant_group,
            sftp_server=sftp_server,
        ),
        **_account_fields(account_mode, slurm_account),
        "market_qos": _market_qos(market_qos),
    }
    if Cluster.objects.filter(
        organization=actor.organization, name__iexact=fields["name"]
    ).exists():
        raise ValidationFailed(fields={"name": ["Your organization has a cluster of this name."]})
    try:
        with transaction.atomic():
            return Cluster.objects.create(organization=actor.organization, **fields)
    except IntegrityError as error:  # registered concurrently under the same name
        raise ValidationFailed(
            fields={"name": ["Your organization has a cluster of this name."]}
        ) from error


@transaction.atomic
def cluster_connection_update(*, actor: Membership, cluster: Cluster, **changes: Any) -> Cluster:
    """Changes how the platform reaches a cluster (host, port, user, private key, pinned host
    key, tenant group, SFTP server program, market QOS): after a host key was rotated on
    purpose, for example. The cluster goes back to `unverified` (its partitions stay, for the
    offers that point at them) until it is verified with the new settings. A suspended cluster
    stays suspended."""
    if actor.organization_id != cluster.organization_id:
        raise PermissionDenied("Only the cluster's owners can change it.")
    require_admin(actor)
    allowed = {
        "ssh_host",
        "ssh_port",
        "ssh_user",
        "ssh_private_key",
        "ssh_host_key",
        "tenant_group",
        "sftp_server",
    }
    if unknown := set(changes) - allowed - {"market_qos"}:
        raise ValidationFailed(fields={name: ["Cannot be changed."] for name in sorted(unknown)})
    market_qos = _market_qos(changes.pop("market_qos")) if "market_qos" in changes else None
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    current = {name: getattr(cluster, name) for name in allowed}
    fields = _connection_fields(**{**current, **changes})
    if market_qos is not None:
        fields["market_qos"] = market_qos
    for name, value in fields.items():
        setattr(cluster, name, value)
    if cluster.status != Cluster.Status.SUSPENDED:
        status_move(cluster, Cluster.Status.UNVERIFIED)
        cluster.status_detail = "Connection settings changed: verify the cluster again."
    cluster.save()
    return cluster


@transaction.atomic
def cluster_create_local(*, organization: Organization, name: str) -> Cluster:
    """A cluster on the `local` backend (jobs run as processes on this machine): for the demo
    and development only, never offered to owners through the API. It sells both kinds of
    capacity: every job runs at once (no owner's job to give way to), and the local scheduler
    keeps the reservations of reserved blocks itself."""
    return Cluster.objects.create(
        organization=organization,
        name=_name(name),
        backend=Cluster.Backend.LOCAL,
        account_mode=Cluster.AccountMode.FIXED,
        slurm_account="local",
        sells_preemptible=True,
        sells_reserved=True,
    )


def ssh_settings_for(cluster: Cluster, *, connect_timeout: float = 10.0) -> SSHSettings:
    """How to reach the cluster: every connection resolves its host once and goes only to
    addresses the outbound rules allow (checked again each time: DNS may have changed since
    the cluster was registered)."""
    return SSHSettings(
        host=cluster.ssh_host,
        port=cluster.ssh_port,
        user=cluster.ssh_user,
        private_key=cluster.ssh_private_key,
        host_key=cluster.ssh_host_key,
        connect_timeout=connect_timeout,
        sftp_server=cluster.sftp_server,
        resolver=OutboundPolicy.from_settings(),
    )


def local_inventory_memory_mb() -> int:
    """This machine's memory in megabytes, as Slurm's RealMemory counts it; 0 where the system
    does not say."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0
    return max(0, pages * page_size // (1024 * 1024))


def local_inventory() -> ClusterInventory:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    partition = PartitionInfo(
        name="local",
        nodes=1,
        cpus=cpus or 1,
        gpus=0,
        max_time_minutes=None,
        is_up=True,
        is_default=True,
        cpus_per_node=cpus or 1,
        memory_per_node_mb=local_inventory_memory_mb(),
    )
    return ClusterInventory(cluster_name="local", slurm_version="", partitions=(partition,))


@transaction.atomic
def cluster_host_key_refused(*, cluster: Cluster, error: BridgeHostKeyMismatch) -> str:
    """Marks a cluster whose host offered another key than the pinned one (the connection was
    refused; nothing more goes to it until the owners re-pin the key and verify again), and
    returns the detail shown to them."""
    detail = (
        f"The host offered a {error.offered_type} key {error.offered_fingerprint}; "
        f"the pinned key is {cluster.host_key_fingerprint}."
    )
    cluster_status_mark(cluster, Cluster.Status.HOST_KEY_MISMATCH, detail)
    return detail


def cluster_status_mark(cluster: Cluster, status: str, detail: str) -> None:
    """Moves the cluster to `status` with its detail, unless its table forbids it (a suspended
    cluster stays suspended whatever it answers), and reads back what it is now."""
    status_move_all(Cluster.objects.filter(pk=cluster.pk), status, status_detail=detail[:500])
    cluster.refresh_from_db(fields=["status", "status_detail", "updated_at"])


@transaction.atomic
def cluster_inventory_store(cluster: Cluster, inventory: ClusterInventory) -> Cluster:
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    existing = {partition.name: partition for partition in cluster.partitions.all()}
    hardware_changes_record(cluster=cluster, before=existing, after=inventory.partitions)
    seen = set()
    for info in inventory.partitions:
        seen.add(info.name)
        values = {
            "nodes": info.nodes,
            "cpus": info.cpus,
            "gpus": info.gpus,
            "max_time_minutes": info.max_time_minutes,
            "is_up": info.is_up,
            "cpus_per_node": info.cpus_per_node,
            "memory_per_node_mb": info.memory_per_node_mb,
            "gpus_per_node": info.gpus_per_node,
            "gpu_types": list(info.gpu_types),
            "features": list(info.features),
            "nodes_differ": info.nodes_differ,
        }
        if (partition := existing.get(info.name)) is None:
            Partition.objects.create(cluster=cluster, name=info.name, **values)
        else:
            for field, value in values.items():
                setattr(partition, field, value)
            partition.save()
    # A partition the cluster no longer has stays (offers point at it) but is marked down.
    cluster.partitions.exclude(name__in=seen).update(is_up=False, updated_at=timezone.now())
    if cluster.status != Cluster.Status.SUSPENDED:  # suspended while it was verified
        status_move(cluster, Cluster.Status.ONLINE)
        cluster.status_detail = ""
    cluster.slurm_cluster_name = inventory.cluster_name
    cluster.slurm_version = inventory.slurm_version
    cluster.verified_at = timezone.now()
    cluster.save()
    return cluster


@transaction.atomic
def cluster_suspend(*, cluster: Cluster, reason: str) -> Cluster:
    """An operator takes a cluster off the market: no new offers, no bids or purchases on its
    open offers, and the owners cannot verify it back. Existing allocations keep their holds.
    `cluster_reinstate` lifts it."""
    cluster_status_mark(cluster, Cluster.Status.SUSPENDED, reason)
    return cluster


@transaction.atomic
def cluster_reinstate(*, cluster: Cluster) -> Cluster:
    """Lifts a suspension: the cluster is `unverified` until its owners verify it again."""
    if cluster.status == Cluster.Status.SUSPENDED:
        cluster_status_mark(
            cluster, Cluster.Status.UNVERIFIED, "Reinstated: verify the cluster again."
        )
    return cluster
