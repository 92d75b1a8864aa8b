"""PostgreSQL restarted (`pg_ctl restart -m immediate`: a crash as far as the server is
concerned) while a job's usage is being charged and while an auction is being cleared, by a real
Celery worker on a private PostgreSQL cluster and a private Redis: each is charged or cleared
exactly once after the restart, the ledger balances, and every hold is released once.

The moment: the test holds a row lock that the work needs near the end of its transaction (the
job's row, which the settlement locks after it has written the charge; a winning bid, which the
clearing updates after it has resized and released the holds), as a concurrent transaction
would, and restarts the server once pg_stat_activity shows the worker's transaction waiting
there with its ledger entries written. The restart ends that transaction; the periodic tasks
(sent by the test, as beat would) then do the work again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from psycopg2 import sql

from tests.faults.instances import PrivatePostgres, PrivateRedis, task_send, worker_start_on
from tests.scheduler_bridge.faults import ClusterShell
from tests.workers import REPOSITORY, WorkerProcess, worker_environment

# django_db: the suite's test database is set up (its schema is copied into the private
# cluster); the tests themselves touch only the private cluster.
pytestmark = [pytest.mark.slurm, pytest.mark.celery, pytest.mark.django_db]


@pytest.fixture(scope="module")
def private_postgres(django_db_setup: None) -> Iterator[PrivatePostgres]:
    """A PostgreSQL cluster of the module's own, with the schema of the suite's test database
    (migrated once for the session: copying it takes a second, migrating again a minute)."""
    from django.db import connection

    server = PrivatePostgres()
    try:
        server.initdb()
        server.start()
        server.create_database()
        server.copy_from(connection.settings_dict)
        yield server
    finally:
        server.remove()


@dataclass
class Stack:
    postgres: PrivatePostgres
    redis: PrivateRedis
    environment: dict[str, str]
    worker: WorkerProcess

    def step(self, name: str, **arguments: Any) -> dict[str, Any]:
        """Runs a step of tests/faults/steps.py on the private database."""
        result = subprocess.run(
            [sys.executable, "-m", "tests.faults.steps", name, json.dumps(arguments)],
            cwd=REPOSITORY,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return dict(json.loads(result.stdout.strip().splitlines()[-1]))

    def send(self, task: str, *arguments: object) -> None:
        task_send(self.redis.url(), task, *arguments)

    def value(self, query: str, *parameters: object) -> Any:
        """One value from the private database, over a connection of the test's own."""
        connection = self.postgres.connect()
        try:
            with connection.cursor() as cursor:
                cursor.execute(query, parameters)
                row = cursor.fetchone()
                return row[0] if row else None
        finally:
            connection.close()


@pytest.fixture(scope="module")
def stack(
    private_postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """One worker and Redis for the module: the worker outlives each restart (it connects
    afresh for every task)."""
    tmp_path = tmp_path_factory.mktemp("postgres-restart")
    redis = PrivateRedis(tmp_path)
    redis.start()
    environment = worker_environment(
        database=private_postgres.url(),
        redis=redis.url(),
        JOBS_SUBMIT_LEASE_SECONDS="20",
        JOBS_POLL_LEASE_SECONDS="10",
        JOBS_COMMAND_TIMEOUT_SECONDS="15",
        JOBS_TENANT_RUNS_READ_SECONDS="3",
        JOBS_RUN_RECORD_GRACE_SECONDS="5",
    )
    try:
        worker = worker_start_on(
            redis.url(),
            name="pg-restart",
            log_path=tmp_path / "worker.log",
            environment=environment,
        )
    except BaseException:
        redis.stop()
        raise
    try:
        yield Stack(private_postgres, redis, environment, worker)
    finally:
        worker.stop()
        redis.stop()


def wait(condition: Any, what: str, timeout: float, stack: Stack) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(
                f"{what}: not within {timeout:g} s\n--- worker\n{stack.worker.log()[-5000:]}\n"
                f"--- postgres\n{stack.postgres.log()[-2000:]}"
            )
        time.sleep(0.2)


def blocked_with_entries_written(stack: Stack, table: str, statement: str, entry_table: str):
    """The worker's backend, waiting for a row lock of `table` in a `statement`, in a
    transaction that has already inserted into `entry_table` (the ledger's entries)."""
    return stack.value(
        """
        SELECT activity.pid FROM pg_stat_activity AS activity
        WHERE activity.datname = current_database()
          AND activity.wait_event_type = 'Lock'
          AND activity.query ILIKE %s AND activity.query ILIKE %s
          AND EXISTS (
              SELECT 1 FROM pg_locks AS lock
              WHERE lock.pid = activity.pid AND lock.relation = %s::regclass
                AND lock.mode = 'RowExclusiveLock'
          )
        """,
        f'%"{table}"%',
        f"%{statement}%",
        entry_table,
    )


def restart_while_blocked(
    stack: Stack, table: str, row_id: int, send: Any, statement: str, entry_table: str
) -> float:
    """Holds `row_id` of `table` locked, starts the work (`send()`), and restarts PostgreSQL
    once the work waits for that row with its ledger entries written. Returns the restart's
    duration."""
    holder = stack.postgres.connect()
    with holder.cursor() as cursor:
        cursor.execute(
            sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE").format(sql.Identifier(table)),
            (row_id,),
        )
    send()
    wait(
        lambda: blocked_with_entries_written(stack, table, statement, entry_table),
        "the worker's transaction waiting on the locked row with its entries written",
        90,
        stack,
    )
    started = time.monotonic()
    stack.postgres.restart("immediate")
    holder.close()
    return time.monotonic() - started


def test_postgres_restarted_during_a_settlement_charges_the_run_once(stack: Stack, testcluster):
    shell = ClusterShell(testcluster.ssh_settings())
    given = stack.step("settlement-setup")
    try:
        # Given a job the worker submitted, which has run and ended on the cluster, and which
        # no poll has seen yet.
        scheduler_job_id = wait(
            lambda: stack.value(
                sql.SQL("SELECT scheduler_job_id FROM {} WHERE id = %s").format(
                    sql.Identifier(given["job_table"])
                ),
                given["job"],
            ),
            "the job submitted",
            120,
            stack,
        )
        wait(
            lambda: (runs := shell.runs(scheduler_job_id)) and all(run.is_ended for run in runs),
            "the job ended on the cluster",
            180,
            stack,
        )

        # When PostgreSQL restarts while the poll's settlement has written the charge and waits
        # for the job's row, and the poll is then sent every second, as beat would.
        restart = restart_while_blocked(
            stack,
            given["job_table"],
            given["job"],
            lambda: stack.send("scheduler_bridge.tasks.cluster_poll_task", given["cluster"]),
            "FOR UPDATE",
            given["entry_table"],
        )
        assert stack.value("SELECT count(*) FROM scheduler_bridge_jobrun") == 0

        def settled() -> bool:
            stack.send("scheduler_bridge.tasks.cluster_poll_task", given["cluster"])
            time.sleep(1)
            return bool(stack.value("SELECT count(*) FROM scheduler_bridge_jobrun"))

        wait(settled, "the run charged after the restart", 120, stack)
        time.sleep(3)  # two more polls, which must charge nothing more
        outcome = stack.step("settlement-outcome", job=given["job"])
    finally:
        shell.cancel_named([given["scheduler_name"]])

    # Then the run is charged once, the reservation released once, and the ledger balances.
    assert outcome["state"] == "completed", outcome
    assert (outcome["runs"], outcome["charges"]) == (1, 1), outcome
    assert outcome["tasks_released"] == [True]
    assert outcome["run_costs"] == [outcome["cost"]]
    assert outcome["hold_captured"] == outcome["cost"]
    assert outcome["allocation_used"] == outcome["units"]
    assert outcome["allocation_reserved"] == "0.000000"
    assert outcome["ledger_problems"] == []
    assert "settling task" in stack.worker.log()  # the first attempt did fail at the restart
    print(f"restart took {restart:.1f} s; charged {outcome['cost']}")


def test_postgres_restarted_during_an_auctions_clearing_clears_it_once(stack: Stack):
    # Given the worked example's auction, closed.
    given = stack.step("auction-setup")
    offer_status = 'SELECT status FROM "marketplace_offer" WHERE id = %s'

    # When PostgreSQL restarts while the clearing has resized and released the holds and waits
    # to update a winning bid, and the periodic clearing is then sent every second.
    restart = restart_while_blocked(
        stack,
        given["bid_table"],
        given["bids"]["A"],
        lambda: stack.send("marketplace.tasks.auction_clear_task", given["offer"]),
        "UPDATE",
        given["entry_table"],
    )
    assert stack.value(offer_status, given["offer"]) == "open"

    def cleared() -> bool:
        stack.send("marketplace.tasks.auctions_clear_due_task")
        time.sleep(1)
        return stack.value(offer_status, given["offer"]) == "cleared"

    wait(cleared, "the auction cleared after the restart", 90, stack)
    stack.send("marketplace.tasks.auction_clear_task", given["offer"])  # once more: a no-op
    time.sleep(2)
    outcome = stack.step("auction-outcome", offer=given["offer"])

    # Then it is cleared once, as docs/design.md's worked example says, and each hold released once:
    # held now, released, ever placed (D's hold closed).
    holds = {
        name: [Decimal(held), Decimal(released), Decimal(placed), status]
        for name, (held, released, placed, status) in outcome["holds"].items()
    }
    assert (Decimal(outcome["clearing_price"]), outcome["units_sold"]) == (Decimal("1.80"), 100)
    assert outcome["bids"] == {
        "A": ["won", 40],
        "B": ["won", 30],
        "C": ["partially_won", 30],
        "D": ["lost", 0],
    }
    assert outcome["allocations"] == [["A", 40], ["B", 30], ["C", 30]]
    assert holds == {
        "A": [Decimal(72), Decimal(28), Decimal(100), "open"],
        "B": [Decimal(54), Decimal(6), Decimal(60), "open"],
        "C": [Decimal(54), Decimal(36), Decimal(90), "open"],
        "D": [Decimal(0), Decimal(24), Decimal(24), "closed"],
    }, outcome
    assert outcome["releases"] == 4
    assert outcome["ledger_problems"] == []
    print(f"restart took {restart:.1f} s")
