"""An organization keeps an admin when its admins leave, are removed or demoted at the same
moment; two admins inviting one name at once make one invitation (PostgreSQL, threads with
their own connections)."""

import time

import pytest

from organizations import services as organization_services
from organizations.errors import LastAdmin
from organizations.models import Invitation, Membership
from organizations.services import memberships
from tests.concurrency import kinds, run_together
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _slow_admin_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Widens the window between counting the admins and the change: without the
    organization's row lock both threads would count two admins and both go."""
    count = memberships._is_last_admin

    def slow(membership: Membership) -> bool:
        answer = count(membership)
        time.sleep(0.3)
        return answer

    monkeypatch.setattr(memberships, "_is_last_admin", slow)


def fresh(membership: Membership) -> Membership:
    """The membership as a request would load it, in the calling thread's connection."""
    return Membership.objects.select_related("organization", "user").get(pk=membership.pk)


def test_two_admins_leaving_at_once_leave_one_admin():
    organization = OrganizationFactory()
    first = MembershipFactory(organization=organization, role="admin")
    second = MembershipFactory(organization=organization, role="admin")

    def leave(membership: Membership):
        def call() -> str:
            actor = fresh(membership)
            organization_services.membership_remove(actor=actor, membership=actor)
            return "left"

        return call

    outcomes = run_together([leave(first), leave(second)])

    assert sorted(kinds(outcomes).elements()) == ["LastAdmin", "str"]
    assert any(isinstance(outcome, LastAdmin) for outcome in outcomes)
    admins = Membership.objects.filter(organization=organization, role="admin")
    assert admins.count() == 1


def test_two_admins_demoting_each_other_at_once_leave_one_admin():
    organization = OrganizationFactory()
    first = MembershipFactory(organization=organization, role="admin")
    second = MembershipFactory(organization=organization, role="admin")
    member = MembershipFactory(organization=organization, role="member")

    def demote(actor: Membership, target: Membership):
        return lambda: organization_services.membership_role_change(
            actor=fresh(actor), membership=fresh(target), role="member"
        )

    def remove(actor: Membership, target: Membership):
        return lambda: organization_services.membership_remove(
            actor=fresh(actor), membership=fresh(target)
        )

    outcomes = run_together([demote(first, second), remove(second, first)])

    assert Membership.objects.filter(organization=organization, role="admin").count() == 1
    assert Membership.objects.filter(pk=member.pk).exists()
    # The loser either lost its right to act (demoted or removed first) or met the last admin.
    assert sum(isinstance(outcome, Exception) for outcome in outcomes) == 1


def test_two_admins_inviting_one_name_at_once_make_one_invitation():
    organization = OrganizationFactory()
    first = MembershipFactory(organization=organization, role="admin")
    second = MembershipFactory(organization=organization, role="admin")
    UserFactory(username="grace")

    def invite(actor: Membership):
        return lambda: (
            organization_services.invitation_create(
                actor=fresh(actor), username="grace", role="member"
            ).uuid
        )

    outcomes = run_together([invite(first), invite(second)] * 3)

    assert Invitation.objects.filter(organization=organization).count() == 1
    assert set(outcomes) == {Invitation.objects.get().uuid}
