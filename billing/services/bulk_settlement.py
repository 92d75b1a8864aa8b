"""Holds settled many at a time, in a few set-based statements rather than a transaction per
hold: an auction's clearing keeps what each winner pays and gives back the rest
(`holds_settle`), and the losers' holds are released after its commit from one
`HoldReleaseBatch` (`hold_release_batch_apply`). One release transaction per organization is
posted (the holds keep the per-hold detail), on PostgreSQL in one statement; the rules are the
ledger's (`ledger`'s docstring)."""

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import F, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from billing.errors import HoldNotOpen, HoldTooSmall
from billing.models import ZERO, Account, Entry, Hold, HoldReleaseBatch, Transaction
from billing.services.ledger import (
    AccountKey,
    balances_write,
)
from computeshare.queue import enqueue_after_commit
from computeshare.states import status_move_all
from hpc.batches import batched


@transaction.atomic
def holds_settle(
    *,
    holds: QuerySet[Hold],
    keep: Mapping[int, Decimal],
    reference_kind: str,
    reference: UUID,
    memo: str,
    release_after_commit: bool = False,
) -> int:
    """Settles many holds at once, as an auction's clearing does: each hold of `holds` keeps
    `keep[hold.pk]` (nothing when absent) and gives the rest back to available; a hold that
    keeps nothing closes. Posts one release transaction per organization (the holds themselves
    keep the per-hold detail), so that a clearing of many bids costs a few set-based statements
    rather than a transaction per bid. Returns the number of holds settled.

    With `release_after_commit`, the holds that keep nothing are not released here: they move
    to `releasing` (still held, on the hold and on the wallet) and are listed in one
    `HoldReleaseBatch`, which a task releases after the commit (`hold_release_batch_apply`), or
    the periodic sweep when the task is lost. The caller's transaction then writes one row
    for them instead of their ledger lines.

    Locks the holds, then the wallets' accounts, in primary-key order: the order every hold
    service uses."""
    rows = list(
        holds.select_for_update(of=("self",))
        .order_by("pk")
        .values_list("pk", "organization_id", "amount", "status")
    )
    if not rows:
        return 0
    plan = _settlement_plan(rows, keep, release_after_commit=release_after_commit)
    now = timezone.now()
    _holds_keep(plan.settled, now)
    if plan.later:
        _holds_release_after_commit(plan.later, reference_kind, reference, memo, now)
    released = plan.released_by_organization
    _releases_post(
        sorted(pk for pk, total in released.items() if total),
        released,
        reference_kind,
        reference,
        memo,
        now,
        prefix=f"settle:{reference}:",
    )
    return len(rows)


@dataclass
class _Plan:
    """What a settlement does to each hold, worked out before anything is written."""

    settled: list[tuple[int, Decimal]] = field(default_factory=list)  # (hold, what it keeps)
    later: list[int] = field(default_factory=list)  # holds released after the commit
    released_by_organization: dict[int, Decimal] = field(default_factory=dict)


def _settlement_plan(
    rows: list[tuple[int, int, Decimal, str]],
    keep: Mapping[int, Decimal],
    *,
    release_after_commit: bool,
) -> _Plan:
    """Refuses a hold that is not open or that would keep more than it holds, and a `keep` of a
    hold that is not being settled; else what each hold keeps, and what each organization
    gets back now."""
    plan = _Plan()
    for pk, organization_id, amount, status in rows:
        if status != Hold.Status.OPEN:
            raise HoldNotOpen(extra={"hold": pk})
        keeping = keep.get(pk, ZERO)
        if not ZERO <= keeping <= amount:
            raise HoldTooSmall(extra={"held": str(amount), "requested": str(keeping)})
        if release_after_commit and not keeping:
            plan.later.append(pk)
            continue
        plan.settled.append((pk, keeping))
        plan.released_by_organization[organization_id] = (
            plan.released_by_organization.get(organization_id, ZERO) + amount - keeping
        )
    if missing := set(keep) - {row[0] for row in rows}:
        raise AssertionError(f"holds to keep that are not being settled: {sorted(missing)}")
    return plan


def _holds_keep(settled: list[tuple[int, Decimal]], now: datetime.datetime) -> None:
    """Each hold keeps its amount and releases the rest; one that keeps nothing closes."""
    if not settled:
        return
    if connection.vendor == "postgresql":
        _holds_keep_sql([pk for pk, _ in settled], [keeping for _, keeping in settled], now)
        if closing := [pk for pk, keeping in settled if not keeping]:
            status_move_all(
                Hold.objects.filter(pk__in=_ids(closing)), Hold.Status.CLOSED, updated_at=now
            )
        return
    kept: dict[Decimal, list[int]] = {}
    for pk, keeping in settled:
        kept.setdefault(keeping, []).append(pk)
    # Holds grouped by what they keep: an auction's winners keep `price x units won`, so there
    # are only as many groups as distinct quantities won, and one UPDATE serves each.
    for keeping, pks in kept.items():
        for batch in batched(pks, 10_000):
            if keeping:
                Hold.objects.filter(pk__in=batch).update(
                    amount=keeping, released=F("released") + F("amount") - keeping, updated_at=now
                )
            else:
                status_move_all(
                    Hold.objects.filter(pk__in=batch),
                    Hold.Status.CLOSED,
                    released=F("released") + F("amount"),
                    amount=0,
                    updated_at=now,
                )


def _ids(ids: list[int]) -> Any:
    """`pk__in` of many ids: on PostgreSQL one array parameter (`IN (SELECT unnest(...))`);
    rendering ten thousand placeholders cost more than the UPDATE that used them."""
    if connection.vendor != "postgresql":
        return ids
    return RawSQL("SELECT unnest(%s::bigint[])", [ids])


def _holds_release_after_commit(
    hold_ids: list[int], reference_kind: str, reference: UUID, memo: str, now: datetime.datetime
) -> None:
    """Moves the (locked, open) holds to `releasing` and writes the batch that releases them,
    whose task is sent after the commit."""
    for batch in batched(hold_ids, 10_000):
        moved = status_move_all(
            Hold.objects.filter(pk__in=_ids(batch)),
            Hold.Status.RELEASING,
            from_statuses=[Hold.Status.OPEN],
            updated_at=now,
        )
        if moved != len(batch):
            raise AssertionError("a locked open hold did not move to releasing")
    release = HoldReleaseBatch.objects.create(
        hold_ids=hold_ids, reference_kind=reference_kind, reference=reference, memo=memo[:255]
    )
    enqueue_after_commit(
        "billing.tasks.hold_release_batch_apply_task",
        release.pk,
        recovered_by="the periodic sweep of hold release batches (hold_release_batches_due_task)",
    )


@transaction.atomic
def hold_release_batch_apply(*, batch_id: int) -> int:
    """Releases a `HoldReleaseBatch`: each of its holds still `releasing` closes and gives its
    whole amount back to available, each organization gets one release transaction for the
    sum, and the batch is deleted, all in one transaction under the batch's row lock. Another
    task (or the sweep) for the same batch skips it while it is being applied (SKIP LOCKED) and
    finds it gone afterwards; the holds move only from `releasing` (compare-and-set), and the
    release transactions' idempotency references name the batch: so a batch is applied once,
    however many tasks and workers are sent to it. Returns the number of holds released.

    Locks the batch, then its holds, then the wallets' accounts, in primary-key order."""
    release = (
        HoldReleaseBatch.objects.select_for_update(skip_locked=True).filter(pk=batch_id).first()
    )
    if release is None:
        return 0
    rows: list[tuple[int, int, Decimal]] = []
    for batch in batched(sorted(release.hold_ids), 10_000):
        rows += (
            Hold.objects.select_for_update()
            .filter(pk__in=batch, status=Hold.Status.RELEASING)
            .order_by("pk")
            .values_list("pk", "organization_id", "amount")
        )
    released_by_organization: dict[int, Decimal] = {}
    for _, organization_id, amount in rows:
        released_by_organization[organization_id] = (
            released_by_organization.get(organization_id, ZERO) + amount
        )
    now = timezone.now()
    for batch in batched([row[0] for row in rows], 10_000):
        status_move_all(
            Hold.objects.filter(pk__in=_ids(batch)),
            Hold.Status.CLOSED,
            from_statuses=[Hold.Status.RELEASING],
            released=F("released") + F("amount"),
            amount=0,
            updated_at=now,
        )
    organizations = sorted(pk for pk, total in released_by_organization.items() if total)
    _releases_post(
        organizations,
        released_by_organization,
        release.reference_kind,
        release.reference,
        release.memo,
        now,
        prefix=f"release:{release.uuid}:",
    )
    release.delete()
    return len(rows)


def _releases_post(
    organizations: Sequence[int],
    released_by_organization: Mapping[int, Decimal],
    reference_kind: str,
    reference: UUID | None,
    memo: str,
    now: datetime.datetime,
    *,
    prefix: str,
) -> None:
    """One release transaction per organization, for what its holds gave back; each one's
    idempotency reference is `prefix` and the organization's id."""
    if not organizations:
        return
    post = _releases_post_sql if connection.vendor == "postgresql" else _releases_post_orm
    post(organizations, released_by_organization, reference_kind, reference, memo, now, prefix)


def _holds_keep_sql(ids: list[int], keeps: list[Decimal], now: datetime.datetime) -> None:
    """Every settled hold in one `UPDATE ... FROM unnest(...)`: each keeps its amount and
    releases the rest (PostgreSQL). The caller closes those that keep nothing."""
    table = Hold._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET amount = new.keep, "  # noqa: S608 - our own table name
            f"released = {table}.released + {table}.amount - new.keep, updated_at = %s "
            "FROM unnest(%s::bigint[], %s::numeric[]) AS new(id, keep) "
            f"WHERE {table}.id = new.id",
            [now, ids, keeps],
        )


def _wallets_lock(organizations: Sequence[int]) -> dict[AccountKey, tuple[int, Decimal]]:
    """Locks the `available` and `held` accounts of many organizations in primary-key order
    and returns each one's id and balance (plain rows: no model objects for thousands)."""
    locked: dict[AccountKey, tuple[int, Decimal]] = {}
    for batch in batched(organizations, 10_000):
        found = (
            Account.objects.select_for_update()
            .filter(organization_id__in=batch, kind__in=[Account.Kind.AVAILABLE, Account.Kind.HELD])
            .order_by("id")
            .values_list("id", "organization_id", "kind", "balance")
        )
        locked.update({(org, kind): (pk, balance) for pk, org, kind, balance in found})
    return locked


def _releases_post_sql(
    organizations: Sequence[int],
    released_by_organization: Mapping[int, Decimal],
    reference_kind: str,
    reference: UUID | None,
    memo: str,
    now: datetime.datetime,
    prefix: str,
) -> None:
    """`holds_settle`'s release transactions on PostgreSQL: one statement writes every
    organization's transaction and its two entries (data-modifying CTE over arrays), one more
    every cached balance. Two round trips for any number of organizations, and no model object
    built per line: at a thousand teams, Django's bulk_create spent more time building and
    rendering objects than the database spent writing them."""
    if not organizations:
        return
    accounts = _wallets_lock(organizations)
    columns: dict[str, list[Any]] = {
        name: [] for name in ("org", "released", "held", "held_after", "available", "avail_after")
    }
    balances: dict[int, Decimal] = {}
    for organization_id in organizations:
        released = released_by_organization[organization_id]
        held_id, held_balance = accounts[(organization_id, Account.Kind.HELD)]
        available_id, available_balance = accounts[(organization_id, Account.Kind.AVAILABLE)]
        if held_balance < released:
            raise AssertionError(
                f"organization {organization_id} holds less than its holds release"
            )
        balances[held_id] = held_balance - released
        balances[available_id] = available_balance + released
        for name, value in zip(
            columns,
            (
                organization_id,
                released,
                held_id,
                balances[held_id],
                available_id,
                balances[available_id],
            ),
            strict=True,
        ):
            columns[name].append(value)
    with connection.cursor() as cursor:
        cursor.execute(
            _RELEASES_SQL,
            {
                **columns,
                "now": now,
                "kind": Transaction.Kind.RELEASE,
                "entry_kind": Entry.Kind.RELEASE,
                "reference_kind": reference_kind,
                "reference": reference,
                "prefix": prefix,
                "memo": memo[:255],
            },
        )
    balances_write(list(balances), list(balances.values()), now)


def _releases_post_orm(
    organizations: Sequence[int],
    released_by_organization: Mapping[int, Decimal],
    reference_kind: str,
    reference: UUID | None,
    memo: str,
    now: datetime.datetime,
    prefix: str,
) -> None:
    """`holds_settle`'s release transactions with the ORM, for SQLite (the embedded demo)."""
    accounts: dict[AccountKey, Account] = {}
    for batch in batched(organizations, 10_000):
        found = (
            Account.objects.select_for_update()
            .filter(organization_id__in=batch, kind__in=[Account.Kind.AVAILABLE, Account.Kind.HELD])
            .order_by("id")
        )
        accounts.update({(account.organization_id, account.kind): account for account in found})
    postings = Transaction.objects.bulk_create(
        [
            Transaction(
                kind=Transaction.Kind.RELEASE,
                organization_id=organization_id,
                reference_kind=reference_kind,
                reference=reference,
                idempotency_reference=f"{prefix}{organization_id}",
                memo=memo[:255],
            )
            for organization_id in organizations
        ],
        batch_size=5_000,
    )
    entries = []
    for posted in postings:
        released = released_by_organization[posted.organization_id]
        held = accounts[(posted.organization_id, Account.Kind.HELD)]
        available = accounts[(posted.organization_id, Account.Kind.AVAILABLE)]
        if held.balance < released:
            raise AssertionError(f"{held} holds less than the holds release")
        for account, amount in ((held, -released), (available, released)):
            account.balance += amount
            account.updated_at = now
            entries.append(
                Entry(
                    transaction=posted,
                    account=account,
                    kind=Entry.Kind.RELEASE,
                    amount=amount,
                    balance_after=account.balance,
                )
            )
    Entry.objects.bulk_create(entries, batch_size=5_000)
    Account.objects.bulk_update(
        list(accounts.values()), ["balance", "updated_at"], batch_size=2_000
    )


# Column names are the models' own (billing_transaction, billing_entry); `moves` is one row per
# organization. Entries go in transaction order, held before available, as `ledger_post` writes
# them.
_RELEASES_SQL = """
WITH moves AS (
    SELECT * FROM unnest(
        %(org)s::bigint[], %(released)s::numeric[], %(held)s::bigint[],
        %(held_after)s::numeric[], %(available)s::bigint[], %(avail_after)s::numeric[]
    ) AS m(organization_id, released, held_id, held_after, available_id, available_after)
), posted AS (
    INSERT INTO billing_transaction (
        uuid, created_at, updated_at, kind, organization_id, hold_id, reference_kind, reference,
        idempotency_reference, memo, created_by_id, source, source_name
    )
    SELECT gen_random_uuid(), %(now)s, %(now)s, %(kind)s, organization_id, NULL,
        %(reference_kind)s, %(reference)s, %(prefix)s || organization_id, %(memo)s, NULL, NULL, ''
    FROM moves ORDER BY organization_id
    RETURNING id, organization_id
)
INSERT INTO billing_entry (
    uuid, created_at, updated_at, transaction_id, account_id, kind, amount, balance_after
)
SELECT gen_random_uuid(), %(now)s, %(now)s, posted.id, line.account_id, %(entry_kind)s,
    line.amount, line.balance_after
FROM posted JOIN moves USING (organization_id)
CROSS JOIN LATERAL (VALUES
    (1, moves.held_id, -moves.released, moves.held_after),
    (2, moves.available_id, moves.released, moves.available_after)
) AS line(position, account_id, amount, balance_after)
ORDER BY posted.id, line.position
"""
