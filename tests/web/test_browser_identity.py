"""A newcomer's first visit in headless Chromium: sign up, log in, create an organization,
add a member, make an API token, use it and revoke it."""

import re

import pytest
from playwright.sync_api import Page, expect

from organizations.models import Membership

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-passphrase-42"


def navigation(page: Page):
    return page.locator("#main-nav")


def sign_up(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}/")
    navigation(page).get_by_role("link", name="Sign up").click()
    page.get_by_label("Username").fill(username)
    page.get_by_label("Email").fill(f"{username}@example.org")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password confirmation").fill(PASSWORD)
    page.get_by_role("button", name="Sign up").click()
    expect(page.get_by_text(f"Welcome to ComputeShare, {username}.")).to_be_visible()


def log_out(page: Page) -> None:
    page.get_by_role("button", name="Log out").click()
    expect(navigation(page).get_by_role("link", name="Log in")).to_be_visible()


def test_newcomer_signs_up_creates_an_organization_adds_a_member_and_uses_a_token(
    page: Page, live_server
):
    base = live_server.url
    sign_up(page, base, "bob")
    log_out(page)

    # Alice signs up, logs out and logs in again.
    sign_up(page, base, "alice")
    log_out(page)
    navigation(page).get_by_role("link", name="Log in").click()
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("wrong password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text("Please enter a correct username and password")).to_be_visible()
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Your organizations")).to_be_visible()

    # She creates an organization and is its admin.
    page.get_by_role("link", name="New organization").click()
    page.get_by_label("Organization name").fill("Plasma Lab")
    page.get_by_role("button", name="Create organization").click()
    expect(page.get_by_role("heading", name="Plasma Lab")).to_be_visible()
    expect(page.get_by_text("you: admin")).to_be_visible()

    # She invites an unknown name and Bob: both read alike; nobody joins before accepting.
    member_form = page.locator("#member-invite")
    member_form.get_by_label("Username").fill("nobody")
    member_form.get_by_role("button", name="Send invitation").click()
    expect(
        page.get_by_text("nobody is invited as Member. They join once they accept.")
    ).to_be_visible()
    member_form.get_by_label("Username").fill("bob")
    member_form.get_by_label("Role").select_option("member")
    member_form.get_by_role("button", name="Send invitation").click()
    expect(
        page.get_by_text("bob is invited as Member. They join once they accept.")
    ).to_be_visible()
    expect(page.locator("#invitations tbody tr")).to_have_count(2)
    members = page.locator("#members tbody tr")
    expect(members).to_have_count(1)
    expect(members.filter(has_text="alice")).to_contain_text("admin")
    assert not Membership.objects.filter(user__username="bob").exists()

    # The tokens page (in the menu under her name) makes a named token, shows its key once, and
    # the key works.
    navigation(page).locator("#nav-account").click()
    navigation(page).get_by_role("link", name="API tokens").click()
    page.get_by_label("Name").fill("laptop")
    page.get_by_label("Expires").select_option(label="In 30 days")
    page.get_by_role("button", name="Make token").click()
    expect(page.get_by_text("Copy its key now: it is shown this once.")).to_be_visible()
    token = page.locator("#api-token").input_value()
    assert re.fullmatch(r"cs_[A-Za-z0-9]{55}", token)
    expect(page.locator("#tokens tbody tr").filter(has_text="laptop")).to_contain_text(token[:15])
    me = page.request.get(f"{base}/api/v1/me/", headers={"Authorization": f"Token {token}"})
    assert me.status == 200
    assert me.json()["username"] == "alice"
    assert me.json()["organizations"][0]["name"] == "Plasma Lab"

    # Revoking it stops it at once; the page no longer shows the key.
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke laptop").click()
    expect(page.get_by_text("The token laptop was revoked; it no longer works.")).to_be_visible()
    expect(page.locator("#api-token")).to_have_count(0)
    expect(page.locator("#tokens tbody tr").filter(has_text="laptop")).to_contain_text("revoked")
    old = page.request.get(f"{base}/api/v1/me/", headers={"Authorization": f"Token {token}"})
    assert old.status == 401
    assert old.json()["code"] == "token_revoked"

    # Bob logs in.
    log_out(page)
    navigation(page).get_by_role("link", name="Log in").click()
    page.get_by_label("Username").fill("bob")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    # Bob sees his invitation counted in the navigation and accepts it.
    expect(navigation(page).locator("#invitation-count")).to_contain_text("1")
    navigation(page).get_by_role("link", name=re.compile("Invitations")).click()
    page.get_by_role("button", name="Accept the invitation to Plasma Lab").click()
    expect(page.get_by_text("You joined Plasma Lab.")).to_be_visible()
    expect(page.get_by_text("you: member")).to_be_visible()
    expect(page.get_by_text("Only an admin of Plasma Lab can add members.")).to_be_visible()
    expect(navigation(page).locator("#invitation-count")).to_have_count(0)
    assert Membership.objects.get(user__username="bob").role == "member"

    # Then he leaves it.
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Leave").click()
    expect(page.get_by_text("You left Plasma Lab.")).to_be_visible()
    assert not Membership.objects.filter(user__username="bob").exists()


def test_api_docs_render_offline_from_our_own_static_files(page: Page, live_server):
    outside_requests: list[str] = []

    def refuse_outside(route):
        url = route.request.url
        if url.startswith(live_server.url) or url.startswith("data:"):
            route.continue_()
        else:
            outside_requests.append(url)
            route.abort()

    page.route("**/*", refuse_outside)
    page.goto(f"{live_server.url}/api/v1/docs/")

    expect(page.get_by_role("heading", name=re.compile("ComputeShare API"))).to_be_visible()
    expect(page.get_by_text("/api/v1/organizations/", exact=True).first).to_be_visible()
    assert outside_requests == []
