"""Checked status changes (computeshare/states.py), on a real model and table: a move its
TRANSITIONS allows happens, any other is refused, and the bulk form moves only the rows whose
status allows it, in one UPDATE."""

from datetime import timedelta

import pytest
from django.utils import timezone

from computeshare.states import TransitionRefused, sources_of, status_move, status_move_all
from organizations.models import Invitation
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
