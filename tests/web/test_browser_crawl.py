"""Every page the site links to, as each kind of user reaches it, at desktop width and on a
390 px phone: axe-core finds no serious or critical violation, the console shows no error, and
the document is no wider than the viewport (nothing pans sideways).

Each persona (visitor, team member, team admin, cluster owner) starts at the home page and
follows the site's own links, GET only, breadth first: each kind of page once (the same path
with other ids, or other values of the same query, is the same kind), up to `PAGE_LIMIT` kinds.
A page another engineer adds is covered as soon as a page links to it. Left out: the API (its
docs are Swagger UI's page), Django's admin, downloads, and links to other sites.

One browser and one context per persona: each page is loaded once, checked at 1280 px, then
the viewport is narrowed to 390 px and the page checked again."""

from __future__ import annotations

import datetime
import html
import re
from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl, urljoin, urlsplit

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page

from organizations import services as organization_services
from organizations.models import Membership
from scheduler_bridge.models import Job, JobState, JobTask
from tests.factories import (
    PASSWORD,
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    PartitionFactory,
    allocation_bought,
    funded_organization,
)
from tests.web.pagecheck import ConsoleErrors, axe_violations, panning, settled, with_axe
from tests.web.test_job_pages import submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
PAGE_LIMIT = 40
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
NOT_CRAWLED = re.compile(r"^/(api/|admin/|healthz)|/files/|\.tar\.gz$|/download/|\.csv$|/logout/$")
DOWNLOAD_QUERY = re.compile(r"(^|&)format=csv(&|$)")


def kind_of(path: str, query: str) -> str:
    """A page's kind: its path with ids replaced, and the names of its query's parameters."""
    names = sorted({name for name, _ in parse_qsl(query, keep_blank_values=True)})
    return UUID.sub("<id>", path) + ("?" + "&".join(names) if names else "")


HREF = re.compile(r"<a\s[^>]*?href=\"([^\"]+)\"([^>]*)>", re.IGNORECASE)


def internal(hrefs: list[str], base: str) -> list[str]:
    """The links to crawl among `hrefs` (absolute, or relative to `base`)."""
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(base))
    found = []
    for href in hrefs:
        parts = urlsplit(urljoin(base + "/", html.unescape(href)))
        if (
            f"{parts.scheme}://{parts.netloc}" != origin
            or NOT_CRAWLED.search(parts.path)
            or DOWNLOAD_QUERY.search(parts.query)
        ):
            continue
        found.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    return found


def links_of(page: Page, base: str) -> list[str]:
    hrefs: list[str] = page.eval_on_selector_all(
        "a[href]:not([download])", "anchors => anchors.map(anchor => anchor.href)"
    )
    return internal(hrefs, base)


# Two frames: what the page does on a resize (it runs in the next frame) is done.
AFTER_LAYOUT = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def check(page: Page, console: ConsoleErrors) -> list[str]:
    problems = axe_violations(page) + panning(page)
    page.set_viewport_size(PHONE)  # type: ignore[arg-type]
    page.evaluate(AFTER_LAYOUT)
    problems += [f"at 390 px: {problem}" for problem in axe_violations(page) + panning(page)]
    page.set_viewport_size(DESKTOP)  # type: ignore[arg-type]
    page.evaluate(AFTER_LAYOUT)
    return problems + console.take()


def is_per_persona(kind: str) -> bool:
    """Kinds of page whose content depends on who looks (an organization's pages, the home
    page and the dashboard) are checked for each persona; any other kind once in the crawl."""
    return kind in ("/", "/dashboard/") or kind.startswith("/organizations/<id>/")


@dataclass
class Crawl:
    browser: Browser
    base: str
    checked: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def persona(self, name: str, username: str | None) -> list[str]:
        """Crawls as `username` (None: a visitor); the kinds of page it reached."""
        context = self.browser.new_context(viewport=DESKTOP)  # type: ignore[arg-type]
        context.set_default_timeout(15_000)
        with_axe(context)
        page = context.new_page()
        console = ConsoleErrors(page)
        reached: list[str] = []
        try:
            if username is not None:
                page.goto(f"{self.base}/login/")
                page.get_by_label("Username").fill(username)
                page.get_by_label("Password").fill(PASSWORD)
                page.get_by_role("button", name="Log in").click()
                page.wait_for_load_state()
            queue = deque(["/"])
            seen: set[str] = set()
            while queue and len(reached) < PAGE_LIMIT:
                url = queue.popleft()
                parts = urlsplit(url)
                kind = kind_of(parts.path, parts.query)
                if kind in seen:
                    continue
                seen.add(kind)
                reached.append(kind)
                # A visitor's pages are not a member's: the menu and what they may see differ.
                key = f"{username is None}:{kind}"
                if key in self.checked and not is_per_persona(kind):
                    # Checked already: only its links are read, without drawing it.
                    response = context.request.get(self.base + url)
                    if response.ok and response.headers["content-type"].startswith("text/html"):
                        hrefs = [
                            href
                            for href, rest in HREF.findall(response.text())
                            if "download" not in rest
                        ]
                        queue.extend(internal(hrefs, self.base + url))
                    continue
                self.checked.add(key)
                queue.extend(self.visit(page, console, url, f"{name}: {url}"))
        finally:
            context.close()
        return reached

    def visit(self, page: Page, console: ConsoleErrors, url: str, label: str) -> list[str]:
        """Loads and checks one page; its links."""
        response = page.goto(self.base + url)
        if response is None or response.status >= 400:
            status = response.status if response is not None else "no answer"
            self.problems.append(f"{label}: HTTP {status}")
            console.take()
            return []
        if not response.headers.get("content-type", "").startswith("text/html"):
            return []
        settled(page)
        self.problems += [f"{label}: {problem}" for problem in check(page, console)]
        return links_of(page, self.base)


def market_with_people() -> dict[str, Any]:
    """An owner's cluster with an open auction and a sold allocation; a team with an admin and
    a member, a finished array job and a running one; a pending invitation."""
    owner_org = funded_organization("0", name="Northern HPC")
    owner = MembershipFactory(organization=owner_org, role=Membership.Role.ADMIN)
    cluster = ClusterFactory(organization=owner_org, name="aurora")
    partition = PartitionFactory(cluster=cluster, name="compute", cpus=64, nodes=4, gpus=0)
    OfferFactory(partition=partition, quantity=500, reserve_price=Decimal("0.80"))

    team = funded_organization("500", name="Tidal Team")
    team_admin = MembershipFactory(organization=team, role=Membership.Role.ADMIN)
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER)
    allocation = allocation_bought(team, partition=partition, quantity=100, price="2.00")

    now = timezone.now()
    sweep = submit(allocation, member.user, name="sweep", array="0-3")
    Job.objects.filter(pk=sweep.pk).update(
        state=JobState.COMPLETED,
        scheduler_job_id="4100",
        submitted_at=now,
        started_at=now,
        ended_at=now + datetime.timedelta(minutes=3),
        units=Decimal("0.2"),
        cost=Decimal("0.4"),
        elapsed_seconds=180,
    )
    JobTask.objects.filter(job=sweep).update(state=JobState.COMPLETED, exit_code=0)
    running = submit(allocation, member.user, name="train")
    Job.objects.filter(pk=running.pk).update(
        state=JobState.RUNNING, scheduler_job_id="4200", submitted_at=now, started_at=now
    )

    outsider = funded_organization("0", name="Harbor Lab")
    harbor_admin = MembershipFactory(organization=outsider, role=Membership.Role.ADMIN)
    organization_services.invitation_create(
        actor=harbor_admin, username=member.user.username, role="member"
    )
    return {
        "owner": owner.user.username,
        "team admin": team_admin.user.username,
        "member": member.user.username,
        "visitor": None,
    }


def test_every_linked_page_passes_axe_fits_a_phone_and_logs_no_error(browser: Browser, live_server):
    people = market_with_people()
    crawl = Crawl(browser, live_server.url)
    reached = {persona: crawl.persona(persona, username) for persona, username in people.items()}

    # The crawl reached the pages each persona has, not only the home page.
    assert "/jobs/<id>/" in reached["member"], reached["member"]
    assert "/organizations/<id>/money/" in reached["team admin"], reached["team admin"]
    assert "/organizations/<id>/clusters/" in reached["owner"], reached["owner"]
    assert "/login/" in reached["visitor"], reached["visitor"]
    # The footer's Status page and the menu's list of organizations (issue 30).
    assert "/status/" in reached["visitor"], reached["visitor"]
    assert "/organizations/" in reached["member"], reached["member"]
    assert crawl.problems == [], "\n".join(crawl.problems)
