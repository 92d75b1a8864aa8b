"""Every task goes to one of the three queues of docs/scaling.md: a new task without a route
would fall silently into Celery's default queue, which no production worker consumes
(docker-compose.yml starts one pool per queue, each with -Q)."""

import importlib

import pytest
from django.conf import settings

from computeshare.celery import app

QUEUES = {"cluster", "money", "io"}
# Each app's tasks module, imported here: a test process imports only those its tests use.
TASK_MODULES = [
    "billing.tasks",
    "marketplace.tasks",
    "notifications.tasks",
    "organizations.tasks",
    "scheduler_bridge.tasks",
    "webhooks.tasks",
]


@pytest.fixture(scope="module")
def project_tasks() -> set[str]:
    for module in TASK_MODULES:
        importlib.import_module(module)
    app.loader.import_default_modules()
    return {name for name in app.tasks if not name.startswith("celery.")}


def test_every_registered_task_has_a_route_to_one_of_the_three_queues(project_tasks):
    routes = settings.CELERY_TASK_ROUTES

    assert sorted(project_tasks - set(routes)) == []
    assert {route["queue"] for route in routes.values()} == QUEUES
    assert len(project_tasks) >= 30


def test_every_route_names_a_task_that_exists(project_tasks):
    assert sorted(set(settings.CELERY_TASK_ROUTES) - project_tasks) == []


def test_no_task_is_routed_to_two_queues():
    names = [name for tasks in settings.TASK_QUEUE_OF.values() for name in tasks]

    assert len(names) == len(set(names))


def test_the_router_sends_each_task_to_its_queue_and_the_default_queue_is_still_declared():
    router = app.amqp.Router()

    assert router.route({}, "scheduler_bridge.tasks.cluster_poll_task")["queue"].name == "cluster"
    assert router.route({}, "marketplace.tasks.auction_clear_task")["queue"].name == "money"
    assert router.route({}, "webhooks.tasks.webhook_deliveries_send_task")["queue"].name == "io"
    # A worker started without -Q (the demo's, the tests') consumes every declared queue. (The
    # declared ones: Celery adds a queue to its runtime map for each new name a task is routed
    # to, such as the tests' own queues.)
    assert set(app.conf.task_queues) == QUEUES | {app.conf.task_default_queue}


def test_the_beat_schedule_names_only_routed_tasks():
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}

    assert sorted(scheduled - set(settings.CELERY_TASK_ROUTES)) == []


def test_tasks_routed_to_sends_every_task_to_the_test_queue_and_puts_the_routes_back():
    from tests.workers import tasks_routed_to

    with tasks_routed_to("routes-test") as queue:
        routed = app.amqp.router.route({}, "scheduler_bridge.tasks.cluster_poll_task")

    assert routed["queue"].name == queue
    after = app.amqp.router.route({}, "scheduler_bridge.tasks.cluster_poll_task")
    assert after["queue"].name == "cluster"
