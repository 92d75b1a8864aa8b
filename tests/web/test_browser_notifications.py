"""The bell in the navigation, the notifications page and the preferences page in Chromium, at
desktop width and at 390 px: the unread count, opening and marking read, turning a kind off,
no sideways panning and a console free of errors."""

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from notifications.models import Notification, NotificationPreference
from notifications.services import NotificationEvent, notifications_record
from scheduler_bridge.models import Job, JobState
from scheduler_bridge.services.submission import job_state_record
from tests.factories import PASSWORD, MembershipFactory, UserFactory, allocation_bought
from tests.web.test_job_pages import submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = {"desktop": (1280, 800), "phone": (390, 844)}


def log_in(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}{reverse('login')}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login/" not in url)


def no_sideways_panning(page: Page) -> None:
    overflow = page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0


@pytest.mark.parametrize("width", WIDTHS)
def test_the_bell_counts_unread_and_the_list_marks_them_read(page: Page, live_server, width):
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS[width], strict=True)))
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.on("pageerror", lambda error: errors.append(str(error)))
    mia = UserFactory(username="mia", email="mia@example.org")
    notifications_record(
        [
            NotificationEvent(
                kind="job_ended",
                key=f"job_ended:job:{number}",
                title=f"Job render-{number} completed",
                body="State completed, exit code 0; cost so far 0.02 USD.",
                link=reverse("job-list"),
                user_ids=[mia.pk],
            )
            for number in range(2)
        ]
    )

    log_in(page, live_server.url, "mia")
    # Seen without opening the menu, on a phone too.
    expect(page.locator("#notification-count")).to_be_visible()
    expect(page.locator("#notification-count")).to_have_text("2 unread")
    no_sideways_panning(page)
    page.locator("#nav-notifications").click()
    expect(page.get_by_role("heading", name="Notifications")).to_be_visible()
    rows = page.locator("#notifications [data-kind='job_ended']")
    expect(rows).to_have_count(2)
    no_sideways_panning(page)

    page.get_by_role("button", name="Mark “Job render-0 completed” read").click()
    expect(page.locator("#notification-count")).to_have_text("1 unread")
    # Open follows the notice's link and marks it read.
    page.locator("[data-read='no']").get_by_role("button", name="Open").click()
    expect(page).to_have_url(f"{live_server.url}{reverse('job-list')}")
    expect(page.locator("#notification-count")).to_have_count(0)
    assert Notification.objects.filter(user=mia, read_at__isnull=True).count() == 0
    if width == "phone":
        # The menu still opens beside the bell.
        page.locator(".navbar-toggler").click()
        expect(page.get_by_role("link", name="Jobs", exact=True)).to_be_visible()
    assert errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_the_preferences_page_turns_a_kind_off_and_it_sticks(page: Page, live_server, width):
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS[width], strict=True)))
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.on("pageerror", lambda error: errors.append(str(error)))
    tom = UserFactory(username="tom", email="tom@example.org")

    log_in(page, live_server.url, "tom")
    page.goto(f"{live_server.url}{reverse('notification-preferences')}")
    expect(page.get_by_role("heading", name="Notification preferences")).to_be_visible()
    no_sideways_panning(page)
    page.get_by_label("By mail: Job ended").uncheck()
    page.get_by_label("In the site: Budget threshold reached").uncheck()
    page.get_by_role("button", name="Save preferences").click()

    expect(page.get_by_text("Your notification preferences are saved.")).to_be_visible()
    expect(page.get_by_label("By mail: Job ended")).not_to_be_checked()
    expect(page.get_by_label("In the site: Job ended")).to_be_checked()
    expect(page.get_by_label("In the site: Budget threshold reached")).not_to_be_checked()
    chosen = {
        row.kind: (row.in_site, row.by_email)
        for row in NotificationPreference.objects.filter(user=tom)
    }
    assert chosen["job_ended"] == (True, False)
    assert chosen["budget_threshold"] == (False, True)
    assert chosen["invitation"] == (True, True)
    no_sideways_panning(page)
    assert errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_an_ended_jobs_notice_says_how_it_ended_in_words(page: Page, live_server, width):
    """Issue 30: the notice said "NonZeroExitCode" where it means "exited with code 3"."""
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS[width], strict=True)))
    allocation = allocation_bought()
    mia = MembershipFactory(organization=allocation.organization, user__username="mia").user
    job = submit(allocation, mia, name="render")
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, exit_code=3)
    job.refresh_from_db()
    job_state_record(job, JobState.FAILED, "NonZeroExitCode")

    log_in(page, live_server.url, "mia")
    page.locator("#nav-notifications").click()

    notice = page.locator("#notifications [data-kind='job_ended']")
    expect(notice).to_contain_text("Job render failed")
    expect(notice).to_contain_text("State failed: exited with code 3;")
    expect(notice).not_to_contain_text("NonZeroExitCode")
    no_sideways_panning(page)
