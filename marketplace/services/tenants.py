"""Tenant accounts and their leases (docs/design.md, Tenants on a cluster).

A cluster's owner gives the platform a pool of unprivileged Unix accounts. A team that buys time
on the cluster leases one of them for as long as it has an open allocation or an unfinished job
there; everything done for the team runs as that account, and no other team gets it until the
lease has ended and the account has been scrubbed. A cluster therefore serves at most as many
teams at once as it has accounts, and the market refuses what would need more.

Leases are taken inside the market's own transactions (a purchase, a clearing), under row locks:
no account is ever leased to two teams at once. Scrubbing talks to the cluster and so runs with
no transaction open, between two short ones."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from computeshare.errors import PermissionDenied
from computeshare.queue import enqueue_after_commit
from computeshare.states import status_move, status_move_all
from hpc.errors import BridgeError
from hpc.slurm.node_checks import nodes_scrub
from hpc.slurm.nodes import idle_jobs_allowed, lease_nodes_read
from hpc.slurm.sacctmgr import AccountMissing
from hpc.slurm.tenants import PoolAccount, ScrubReport, tenant_scrub
from hpc.ssh import SSHConnection
from marketplace import errors, selectors
from marketplace.models import Cluster, TenantAccount, TenantLease
from organizations.models import Membership, Organization

logger = logging.getLogger(__name__)

# How long a scrub waits for the tenant's cancelled jobs to leave the queue.
SCRUB_WAIT_SECONDS = 60
# How long a scrub holds its lease: past the task's time limit, so that a worker that died
# mid-scrub does not keep the account out of the pool for long.
SCRUB_HOLD = timedelta(minutes=6)


# --- The pool --------------------------------------------------------------------------------


@transaction.atomic
def tenant_accounts_record(*, cluster: Cluster, accounts: Sequence[PoolAccount]) -> None:
    """Records the pool as a verification read it: new members become available, a member's
    home is updated, and an account no longer in the group is retired (unless a team holds
    it: its lease ends as usual and it is retired then, by the next verification)."""
    found = {account.user: account for account in accounts}
    now = timezone.now()
    existing = {
        account.username: account
        for account in TenantAccount.objects.select_for_update().filter(cluster=cluster)
    }
    for user, info in found.items():
        account = existing.get(user)
        if account is None:
            TenantAccount.objects.create(cluster=cluster, username=user, home=info.home)
            continue
        if account.home != info.home:
            TenantAccount.objects.filter(pk=account.pk).update(home=info.home, updated_at=now)
        if account.status == TenantAccount.Status.RETIRED:
            status_move_all(
                TenantAccount.objects.filter(pk=account.pk),
                TenantAccount.Status.AVAILABLE,
                from_statuses=[TenantAccount.Status.RETIRED],
                status_detail="",
                updated_at=now,
            )
    status_move_all(
        TenantAccount.objects.filter(cluster=cluster).exclude(username__in=found),
        TenantAccount.Status.RETIRED,
        from_statuses=[TenantAccount.Status.AVAILABLE],
        status_detail="No longer a member of the tenant group.",
        updated_at=now,
    )


# --- Taking leases ------------------------------------------------------------------------------


def tenant_lease_take(*, cluster: Cluster, organization_id: int) -> TenantLease | None:
    """The team's active lease on the cluster, or a new one on a free account, in the caller's
    transaction (a purchase): the account is the team's from the commit on. None on a cluster
    without tenants. Raises `TenantAccountsExhausted` (409) when every account is taken.

    The usual case, a team that holds its lease already (every job it submits), is one read
    and no lock: a lease ends only once the team has no open allocation there. Otherwise the
    team's purchases are serialized here, on the team's row (locked after the offer's or the
    allocation's, before any account): the second finds the lease the first made, rather than
    every free account locked by its own team's other purchases."""
    if not cluster.runs_jobs_as_tenants:
        return None
    lease = _active_lease(cluster, organization_id)
    if lease is not None:
        return lease
    # NO KEY UPDATE: it serializes the team's lease-takings without holding up the rows that
    # refer to the team (a hold of its other purchase); FOR UPDATE made those two deadlock.
    Organization.objects.select_for_update(no_key=True).filter(pk=organization_id).first()
    lease = _active_lease(cluster, organization_id)
    if lease is not None:
        return lease
    accounts = _free_accounts_lock(cluster, 1)
    if not accounts:
        raise errors.TenantAccountsExhausted(extra=selectors.tenant_account_totals(cluster))
    lease, _ = _lease_create(cluster, accounts[0], organization_id)
    return lease


@dataclass
class TenantSeats:
    """What a clearing may give out: the teams that hold a lease on the cluster already, and
    the free accounts this transaction has locked for teams that do not."""

    held: frozenset[int]
    free: list[TenantAccount]

    def lease_for(self, cluster: Cluster, organization_id: int) -> TenantLease | None:
        """The lease of a winner: its own, or a new one on the next locked free account. A
        purchase of the same team that committed its lease meanwhile wins the unique index;
        the clearing then uses that lease, and the account it locked stays free."""
        if organization_id in self.held:
            return _active_lease(cluster, organization_id)
        account = self.free.pop(0)
        lease, created = _lease_create(cluster, account, organization_id)
        if not created:
            self.free.insert(0, account)
        return lease

    def leases_for_all(self, cluster: Cluster, organization_ids: Iterable[int]) -> None:
        """`lease_for` for every winner of a clearing, in two statements rather than four
        round trips per team: the new teams' leases are inserted at once, skipping any that a
        purchase of the same team committed meanwhile (the unique index on active leases), and
        the accounts that did get a lease are marked leased. An account whose team had a lease
        already stays as it is, free."""
        teams = [pk for pk in dict.fromkeys(organization_ids) if pk not in self.held]
        if not teams:
            return
        if len(teams) > len(self.free):
            raise AssertionError("more new winners than the clearing locked free accounts for")
        accounts, self.free = self.free[: len(teams)], self.free[len(teams) :]
        TenantLease.objects.bulk_create(
            [
                TenantLease(account=account, cluster=cluster, organization_id=organization_id)
                for account, organization_id in zip(accounts, teams, strict=True)
            ],
            ignore_conflicts=True,
        )
        leased = TenantLease.objects.filter(
            account__in=accounts, status=TenantLease.Status.ACTIVE
        ).values("account_id")
        status_move_all(
            TenantAccount.objects.filter(pk__in=leased),
            TenantAccount.Status.LEASED,
            from_statuses=[TenantAccount.Status.AVAILABLE],
            status_detail="",
        )
        unused = {account.pk for account in accounts} - set(
            leased.values_list("account_id", flat=True)
        )
        self.free[:0] = [account for account in accounts if account.pk in unused]


def tenant_seats_lock(*, cluster: Cluster, organization_ids: Iterable[int]) -> TenantSeats | None:
    """For a clearing, in its transaction: which bidding teams hold a lease on the cluster, and
    up to one free account locked for each team that does not. Concurrent clearings on one
    cluster lock different accounts (SKIP LOCKED), so no account is promised twice. None on a
    cluster without tenants (every bid may win)."""
    if not cluster.runs_jobs_as_tenants:
        return None
    teams = set(organization_ids)
    # The cluster's active leases, at most one per account, rather than the bidders' (a
    # clearing's thousand ids in the query cost more than the leases they would leave out).
    held = teams.intersection(
        TenantLease.objects.filter(cluster=cluster, status=TenantLease.Status.ACTIVE).values_list(
            "organization_id", flat=True
        )
    )
    return TenantSeats(held=frozenset(held), free=_free_accounts_lock(cluster, len(teams - held)))


def _active_lease(cluster: Cluster, organization_id: int) -> TenantLease | None:
    return (
        TenantLease.objects.select_related("account")
        .filter(cluster=cluster, organization_id=organization_id, status=TenantLease.Status.ACTIVE)
        .first()
    )


def _free_accounts_lock(cluster: Cluster, count: int) -> list[TenantAccount]:
    """Up to `count` available accounts, locked for this transaction; the one scrubbed longest
    ago first, so that accounts are used in turn."""
    if count <= 0:
        return []
    return list(
        TenantAccount.objects.select_for_update(skip_locked=True)
        .filter(cluster=cluster, status=TenantAccount.Status.AVAILABLE)
        .order_by(F("last_scrubbed_at").asc(nulls_first=True), "username")[:count]
    )


def _lease_create(
    cluster: Cluster, account: TenantAccount, organization_id: int
) -> tuple[TenantLease, bool]:
    """A new lease of the locked free `account` for the team, and True. When a transaction of
    the same team committed a lease first (the unique index on active leases), that lease and
    False: `account` is then as its row is, still free."""
    try:
        with transaction.atomic():
            _account_move(account, TenantAccount.Status.LEASED, "")
            lease = TenantLease.objects.create(
                account=account, cluster_id=account.cluster_id, organization_id=organization_id
            )
        return lease, True
    except IntegrityError:
        held = _active_lease(cluster, organization_id)
        if held is None:
            raise
        account.refresh_from_db(fields=["status", "status_detail"])  # as the savepoint left it
        return held, False


def _account_move(account: TenantAccount, status: str, detail: str) -> None:
    """Moves the account (checked by `status_move`) with the reason shown to its owners, and
    saves both."""
    status_move(account, status)
    account.status_detail = detail[:1000]
    account.save(update_fields=["status", "status_detail", "updated_at"])


# --- Ending leases ------------------------------------------------------------------------------


@transaction.atomic
def tenant_lease_end_start(*, lease_id: int) -> bool:
    """Marks an active lease `ending` (the caller has checked that the team has neither an open
    allocation nor an unfinished job on the cluster); the scrub follows after the commit.
    Idempotent: False when the lease was not active."""
    lease = TenantLease.objects.select_for_update().get(pk=lease_id)
    if lease.status != TenantLease.Status.ACTIVE:
        return False
    status_move(lease, TenantLease.Status.ENDING)
    lease.ending_at = timezone.now()
    lease.save(update_fields=["status", "ending_at", "updated_at"])
    enqueue_after_commit(
        "marketplace.tasks.tenant_lease_scrub_task",
        lease_id,
        recovered_by="the periodic scrub of ending leases",
    )
    return True


def tenant_lease_scrub(*, lease_id: int) -> TenantLease:
    """Scrubs the account of an ending (or failed) lease: cancels the tenant's jobs and waits
    until the queue has none, ends its processes, removes its files, does the same on every
    compute node the lease's jobs ran on, checks that nothing is left anywhere, and, on a
    managed cluster, takes it out of the team's Slurm account. Then the lease
    has `ended` and the account is available to the next team; if anything is left, the lease
    has `failed` and the account is quarantined with the reason, for its owners to see.

    A cluster that cannot be reached leaves the lease `ending` (the error is raised; the task
    retries): the account is not given to anyone meanwhile. One scrub at a time per lease: a
    second call while one runs returns at once."""

    lease = TenantLease.objects.select_related("account", "cluster").get(pk=lease_id)
    if lease.status not in (TenantLease.Status.ENDING, TenantLease.Status.FAILED):
        return lease
    if not _scrub_claim(lease_id):
        return lease  # another worker is scrubbing the account right now
    try:
        return _scrub(lease)
    finally:
        TenantLease.objects.filter(pk=lease_id).update(scrubbing_until=None)


def _scrub_claim(lease_id: int) -> bool:
    """Takes the lease for one scrub, for longer than a scrub can take; False when another
    scrub holds it."""
    now = timezone.now()
    return bool(
        TenantLease.objects.filter(pk=lease_id)
        .filter(Q(scrubbing_until__isnull=True) | Q(scrubbing_until__lt=now))
        .update(scrubbing_until=now + SCRUB_HOLD)
    )


def _scrub(lease: TenantLease) -> TenantLease:
    from marketplace.services.clusters import ssh_settings_for
    from marketplace.services.slurm_accounts import tenant_slurm_leave

    account = lease.account
    with SSHConnection(ssh_settings_for(lease.cluster)) as connection:
        try:
            report = tenant_scrub(connection, account.username, wait_seconds=SCRUB_WAIT_SECONDS)
            report = _scrub_nodes(connection, lease, report)
        except BridgeError as error:
            if error.is_transient:
                raise
            return _scrub_finish(lease.pk, clean=False, detail=f"The scrub failed: {error}")
    if not report.is_clean:
        return _scrub_finish(
            lease.pk, clean=False, detail=f"Left after the scrub: {report.describe()}."
        )
    try:
        tenant_slurm_leave(lease_id=lease.pk)
    except BridgeError as error:
        if error.is_transient:
            raise
        return _scrub_finish(
            lease.pk, clean=False, detail=f"Could not leave the team's Slurm account: {error}"
        )
    return _scrub_finish(lease.pk, clean=True, detail=report.summary())


def _scrub_nodes(connection: SSHConnection, lease: TenantLease, report: ScrubReport) -> ScrubReport:
    """The scrub of every compute node the lease's jobs ran on (Slurm's accounting says which)
    other than the login node, which the login node's scrub has just done: one job as the
    tenant on each (docs/adr/0023). On a managed cluster the tenant's team QOS has no time left
    by now, so the jobs run in the idle account, allowed them for the moment."""
    cluster, user = lease.cluster, lease.account.username
    nodes = lease_nodes_read(connection, user, lease.created_at)
    login = tuple(target.node for target in nodes.ran if nodes.is_login_node(target.node))
    report = replace(report, login_nodes=login)
    targets = nodes.beyond_login
    if not targets:
        return report
    if cluster.account_mode != Cluster.AccountMode.MANAGED:
        scrub = nodes_scrub(connection, user, targets, account=cluster.slurm_account or None)
    elif not cluster.tenant_idle_account:
        raise AccountMissing(
            f"cluster {cluster.name} has no idle account recorded for its tenants, where the "
            "scrub of its nodes runs: verify the cluster again"
        )
    else:
        with idle_jobs_allowed(
            connection,
            cluster_name=cluster.slurm_cluster_name,
            user=user,
            account=cluster.tenant_idle_account,
            jobs=len(targets),
        ):
            scrub = nodes_scrub(connection, user, targets, account=cluster.tenant_idle_account)
    return replace(report, nodes=scrub.nodes, jobs_left=scrub.jobs_left)


@transaction.atomic
def _scrub_finish(lease_id: int, *, clean: bool, detail: str) -> TenantLease:
    lease = TenantLease.objects.select_for_update().select_related("account").get(pk=lease_id)
    account = TenantAccount.objects.select_for_update().get(pk=lease.account_id)
    now = timezone.now()
    if clean:
        status_move(lease, TenantLease.Status.ENDED)
        lease.ended_at = now
        account.last_scrubbed_at = now
        account.save(update_fields=["last_scrubbed_at", "updated_at"])
        _account_move(account, TenantAccount.Status.AVAILABLE, "")
    else:
        status_move(lease, TenantLease.Status.FAILED)
        _account_move(account, TenantAccount.Status.QUARANTINED, detail)
        logger.warning("tenant %s quarantined: %s", account, detail)
    lease.scrub_detail = detail[:1000]
    lease.save(update_fields=["status", "ended_at", "scrub_detail", "updated_at"])
    return lease


@transaction.atomic
def tenant_account_rescrub(*, actor: Membership, account: TenantAccount) -> TenantAccount:
    """The owners, having looked at a quarantined account (and perhaps cleaned it by hand),
    ask for another scrub; it returns the account to the pool if it passes."""
    if actor.organization_id != account.cluster.organization_id or not actor.is_admin:
        raise PermissionDenied("Only an admin of the cluster's owners can do this.")
    account = TenantAccount.objects.select_for_update().get(pk=account.pk)
    if account.status != TenantAccount.Status.QUARANTINED:
        raise errors.TenantAccountNotQuarantined(extra={"status": account.status})
    lease = (
        TenantLease.objects.select_for_update()
        .filter(account=account, status=TenantLease.Status.FAILED)
        .first()
    )
    if lease is None:
        # Quarantined without a lease (by hand in the admin): nothing of a team is on it.
        _account_move(account, TenantAccount.Status.AVAILABLE, "")
        return account
    status_move(lease, TenantLease.Status.ENDING)
    lease.save(update_fields=["status", "updated_at"])
    lease_id = lease.pk
    enqueue_after_commit(
        "marketplace.tasks.tenant_lease_scrub_task",
        lease_id,
        recovered_by="the periodic scrub of ending leases",
    )
    return account
