"""Work handed to the broker after a commit survives the broker being down: the request that
committed still succeeds, and a periodic task finds the work from the database.

The broker here is a real Redis address on loopback where nothing listens (port 9), so the
publish fails as it does when Redis is stopped (tests/faults/test_redis_outage.py stops a real
one under a running stack)."""

import logging
from datetime import timedelta
from decimal import Decimal

import pytest
from celery import Celery, current_app
from django.core import mail
from django.db import transaction
from django.utils import timezone

from billing import selectors as billing_selectors
from billing import services as billing_services
from billing.models import BudgetAlert, ReferenceKind
from billing.tasks import budget_alerts_unmailed_notify_task
from computeshare.queue import (
    enqueue_after_commit,
    enqueue_once_after_commit,
    enqueued_once_started,
)
from marketplace import selectors
from marketplace.models import TenantLease
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OrganizationFactory,
    PartitionFactory,
    UserFactory,
    allocation_bought,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def unreachable_task():
    # Not the current app: shared tasks would follow it and publish to port 9 for the rest of
    # the session.
    app = Celery("unreachable", broker="redis://127.0.0.1:9/0", set_as_current=False)
    app.conf.broker_connection_retry = False
    app.conf.broker_connection_max_retries = 0
    app.conf.task_publish_retry = False

    @app.task(name="tests.unreachable")
    def unreachable(value: int) -> int:  # pragma: no cover: never runs
        return value

    # Services name their tasks; the name is looked up in the current app's registry.
    current_app.tasks[unreachable.name] = unreachable
    yield unreachable.name
    del current_app.tasks[unreachable.name]


def test_a_message_the_broker_refuses_is_logged_and_the_commit_stands(
    unreachable_task, caplog, django_capture_on_commit_callbacks
):
    caplog.set_level(logging.WARNING, logger="computeshare.queue")
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        organization = OrganizationFactory(name="Kept")
        enqueue_after_commit(unreachable_task, 7, recovered_by="the sweep finds it")

    organization.refresh_from_db()  # committed, and no exception reached the caller
    (record,) = [r for r in caplog.records if r.name == "computeshare.queue"]
    assert "tests.unreachable(7,)" in record.getMessage()
    assert "the sweep finds it" in record.getMessage()


def test_a_message_sent_once_that_the_broker_refuses_leaves_no_mark(
    unreachable_task, caplog, django_capture_on_commit_callbacks
):
    """The mark says a message waits for a worker: after a refused publish none does, so the
    next commit tries again rather than leaving its work to the sweep."""
    from django.core.cache import cache

    caplog.set_level(logging.WARNING, logger="computeshare.queue")
    enqueued_once_started(unreachable_task, 8)  # no mark of an earlier run
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            enqueue_once_after_commit(
                unreachable_task, 8, recovered_by="the sweep finds it", pending_seconds=10
            )

    refused = [r for r in caplog.records if r.name == "computeshare.queue"]
    assert len(refused) == 2
    assert all("tests.unreachable(8,)" in record.getMessage() for record in refused)
    assert cache.get(f"enqueued:{unreachable_task}:8") is None


def test_nothing_is_sent_for_a_transaction_that_rolls_back(unreachable_task, caplog):
    caplog.set_level(logging.WARNING, logger="computeshare.queue")

    class Abandoned(Exception):
        pass

    with pytest.raises(Abandoned), transaction.atomic():
        enqueue_after_commit(unreachable_task, 1, recovered_by="-")
        raise Abandoned

    assert [r for r in caplog.records if r.name == "computeshare.queue"] == []


def test_budget_alerts_whose_mail_never_went_are_mailed_by_the_periodic_task():
    organization = OrganizationFactory(name="Photon Lab")
    MembershipFactory(
        organization=organization, role="admin", user=UserFactory(email="ada@example.org")
    )
    billing_services.wallet_credit(
        organization=organization, amount=Decimal(500), idempotency_reference="c"
    )
    billing_services.budget_set(
        organization=organization, monthly_limit=Decimal("200.00"), alert_thresholds=[50]
    )
    billing_services.hold_place(
        organization=organization, amount=Decimal(110), reference_kind=ReferenceKind.BID
    )
    alert = BudgetAlert.objects.get()  # recorded; its message is never run in this test
    assert billing_selectors.budget_alerts_unmailed(older_than=timedelta(minutes=2)) == []

    BudgetAlert.objects.filter(pk=alert.pk).update(created_at=timezone.now() - timedelta(minutes=3))
    assert budget_alerts_unmailed_notify_task() == 1
    assert budget_alerts_unmailed_notify_task() == 0  # mailed once

    (message,) = mail.outbox
    assert message.to == ["ada@example.org"]
    assert "Photon Lab has reached 50% of its budget" in message.subject


def test_a_lease_left_ending_with_no_scrub_under_way_is_scrubbed_again():
    cluster = ClusterFactory(tenants=2)
    partition = PartitionFactory(cluster=cluster)
    for _ in range(2):
        allocation_bought(partition=partition, quantity=1)
    stalled, running = TenantLease.objects.filter(cluster=cluster).order_by("pk")
    long_ago = timezone.now() - timedelta(minutes=30)
    TenantLease.objects.filter(pk__in=[stalled.pk, running.pk]).update(
        status=TenantLease.Status.ENDING, updated_at=long_ago
    )
    TenantLease.objects.filter(pk=running.pk).update(
        scrubbing_until=timezone.now() + timedelta(minutes=5)
    )

    assert selectors.tenant_leases_to_scrub_again(quiet_for=timedelta(minutes=10)) == [stalled.pk]
    # A lease that changed lately is left to the scrub that is on its way.
    TenantLease.objects.filter(pk=stalled.pk).update(updated_at=timezone.now())
    assert selectors.tenant_leases_to_scrub_again(quiet_for=timedelta(minutes=10)) == []


def test_a_process_that_never_imported_the_tasks_module_still_sends_by_name():
    """The web server imports no app's tasks module (only the worker autodiscovers them): the
    name alone must find its task there, or every committed request's message raised
    NotRegistered. A fresh interpreter, with a broker where nothing listens (refused, logged)."""
    import os
    import subprocess
    import sys

    from django.db import connection

    from tests.workers import database_url

    script = (
        "import sys, django; django.setup()\n"
        "from computeshare.queue import enqueue_after_commit\n"
        "assert 'notifications.tasks' not in sys.modules\n"
        "enqueue_after_commit('notifications.tasks.notice_batches_due_task', recovered_by='-')\n"
        "print('sent')\n"
    )
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "computeshare.settings.test",
        "CELERY_BROKER_URL": "redis://127.0.0.1:9/0",
        "DATABASE_URL": database_url(connection.settings_dict),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=120
    )

    assert (done.returncode, done.stdout.strip()) == (0, "sent"), done.stderr[-2000:]
    assert "the broker did not take notifications.tasks.notice_batches_due_task" in done.stderr
