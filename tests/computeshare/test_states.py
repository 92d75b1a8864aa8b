"""Checked status changes (computeshare/states.py), on a real model and table: a move its
TRANSITIONS allows happens, any other is refused, and the bulk form moves only the rows whose
status allows it, in one UPDATE."""

from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.db.models import CheckConstraint
from django.utils import timezone

from computeshare.states import (
    TransitionRefused,
    sources_of,
    status_move,
    status_move_all,
    tables_of,
    transitions_of,
)
from organizations.models import Invitation
from scheduler_bridge.models import Job, JobState
from tests.factories import OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db
Status = Invitation.Status


def invitation(status: str = Status.PENDING) -> Invitation:
    return Invitation.objects.create(
        organization=OrganizationFactory(),
        username=UserFactory().username,
        role="member",
        invited_by=UserFactory(),
        status=status,
        expires_at=timezone.now() + timedelta(days=7),
        answered_at=None if status == Status.PENDING else timezone.now(),
    )


def test_an_allowed_move_is_made_in_memory_and_a_refused_one_changes_nothing():
    row = invitation()
    assert status_move(row, Status.ACCEPTED) is True
    assert row.status == Status.ACCEPTED
    assert status_move(row, Status.ACCEPTED) is False  # staying put is no move

    with pytest.raises(TransitionRefused, match="cannot go from 'accepted' to 'declined'"):
        status_move(row, Status.DECLINED)
    assert row.status == Status.ACCEPTED


def test_the_sources_of_a_status_come_from_the_table():
    assert sources_of(Invitation, Status.EXPIRED) == {Status.PENDING}
    assert sources_of(Invitation, Status.PENDING) == set()


def test_the_bulk_move_updates_only_rows_whose_status_allows_it():
    pending = [invitation(), invitation()]
    accepted = invitation(Status.ACCEPTED)
    before = accepted.updated_at

    moved = status_move_all(Invitation.objects.all(), Status.EXPIRED, answered_at=timezone.now())

    assert moved == 2
    for row in pending:
        row.refresh_from_db()
        assert row.status == Status.EXPIRED
        assert row.updated_at > before
    accepted.refresh_from_db()
    assert (accepted.status, accepted.updated_at) == (Status.ACCEPTED, before)
    # Run again, nothing is left to move: a compare-and-set, not a blind write.
    assert status_move_all(Invitation.objects.all(), Status.EXPIRED, answered_at=None) == 0


def test_the_bulk_move_refuses_a_source_the_table_does_not_allow():
    row = invitation(Status.DECLINED)
    with pytest.raises(TransitionRefused):
        status_move_all(Invitation.objects.all(), Status.EXPIRED, from_statuses=[Status.DECLINED])
    row.refresh_from_db()
    assert row.status == Status.DECLINED


def app_models() -> list[type[Any]]:
    apps_with_states = {"billing", "marketplace", "organizations", "scheduler_bridge", "webhooks"}
    return [model for model in apps.get_models() if model._meta.app_label in apps_with_states]


def test_every_table_names_only_its_fields_choices():
    """A table is the field's own statuses: a misspelt status in a table would allow nothing
    (or a move to a status the check constraint refuses)."""
    wrong = {
        f"{model.__name__}.{field}": sorted(
            {*table, *(target for targets in table.values() for target in targets)}
            - {value for value, _ in model._meta.get_field(field).choices}
        )
        for model in app_models()
        for field, table in tables_of(model).items()
    }
    assert {name: statuses for name, statuses in wrong.items() if statuses} == {}


def test_every_field_with_a_table_has_a_check_constraint():
    unguarded = [
        f"{model.__name__}.{field}"
        for model in app_models()
        for field in tables_of(model)
        if not any(
            isinstance(constraint, CheckConstraint) and f"'{field}__in'" in str(constraint)
            for constraint in model._meta.constraints
        )
    ]
    assert unguarded == []


def test_a_second_state_field_moves_by_its_own_table():
    """A job's `state` moves by `Job.TRANSITIONS`, its `results_state` by
    `Job.RESULTS_STATE_TRANSITIONS`; a field without a table cannot be moved at all."""
    assert transitions_of(Job, "state") is Job.TRANSITIONS
    assert transitions_of(Job, "results_state") is Job.RESULTS_STATE_TRANSITIONS
    assert sources_of(Job, Job.ResultsState.EXPIRED, field="results_state") == {
        Job.ResultsState.READY
    }
    job = Job(state=JobState.COMPLETED, results_state=Job.ResultsState.FAILED)
    with pytest.raises(TransitionRefused, match="results_state cannot go from 'failed'"):
        status_move(job, Job.ResultsState.READY, field="results_state")
    assert job.results_state == Job.ResultsState.FAILED
    with pytest.raises(TypeError, match=r"Job\.name has no table"):
        transitions_of(Job, "name")
