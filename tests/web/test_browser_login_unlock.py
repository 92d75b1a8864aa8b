"""A locked account's owner in headless Chromium (issue 29): the log-in page says the account is
locked, its owner asks for a link by mail, opens it and logs in with the password despite the
lock; the link then no longer works."""

import re

import pytest
from django.core import mail
from playwright.sync_api import Page, expect

from computeshare.login_throttling import failure_record
from computeshare.models import User
from organizations.tasks import login_unlock_mail_task

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-passphrase-42"


def test_the_owner_of_a_locked_account_logs_in_by_the_mailed_link(
    page: Page, live_server, settings, monkeypatch
):
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 4
    User.objects.create_user("alice", email="alice@example.org", password=PASSWORD)
    # A guess at alice's password from four addresses has locked her name for everyone.
    for index in range(4):
        failure_record("alice", f"203.0.113.{index}")
    # The mail goes out as a worker would send it.
    monkeypatch.setattr(
        "organizations.services.login_unlock.enqueue_after_commit",
        lambda name, *args, **kwargs: login_unlock_mail_task(*args),
    )

    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Log-in locked for now")).to_be_visible()
    expect(page.get_by_label("User name")).to_have_value("alice")
    page.get_by_role("button", name="Mail me a link").click()
    expect(page.get_by_role("heading", name="Check your mail")).to_be_visible()

    [message] = mail.outbox
    link = re.search(r"http://\S+/login/unlock/\S+/", message.body)[0]
    path = "/login/" + link.split("/login/", 1)[1]
    page.goto(f"{live_server.url}{path}")
    expect(page.get_by_role("heading", name="Log in as alice")).to_be_visible()
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Your organizations")).to_be_visible()

    page.goto(f"{live_server.url}{path}")
    expect(page.get_by_role("heading", name="This link no longer works")).to_be_visible()
