"""The market in headless Chromium: an owner lists capacity on the owner's offers page, a team
finds it with the filters, watches the hold its bid will place as it types, bids, and after
the auction clears sees its allocation and the clearing price in the price history. And an
owner registers the real Slurm test cluster and watches its verification run in a real
Celery worker, live, without the page reloading."""

import datetime
import re
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing import selectors as billing_selectors
from marketplace import services
from marketplace.models import Allocation, Bid, Cluster, ClusterVerification, Offer
from organizations.models import Membership
from tests.factories import (
    PASSWORD,
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    OrganizationFactory,
    PartitionFactory,
    funded_organization,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def log_in(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}{reverse('login')}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Your organizations")).to_be_visible()


def log_out(page: Page) -> None:
    page.get_by_role("button", name="Log out").click()
    expect(page.locator("#main-nav").get_by_role("link", name="Log in")).to_be_visible()


def open_organization(page: Page, name: str) -> None:
    page.locator("#main-nav").get_by_role("link", name="Organizations").click()
    page.get_by_role("link", name=name, exact=True).click()
    expect(page.get_by_role("heading", name=name, exact=True)).to_be_visible()


def minute(moment: datetime.datetime) -> str:
    """A time as a `datetime-local` input takes it, in UTC."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M")


def test_an_owner_lists_capacity_and_a_team_finds_it_bids_and_wins_it(page: Page, live_server):
    base = live_server.url
    owners = OrganizationFactory(name="Fjord Compute")
    owner = MembershipFactory(organization=owners, role=Membership.Role.ADMIN).user
    cluster = ClusterFactory(organization=owners, name="fjord")
    PartitionFactory(cluster=cluster, name="batch", nodes=2, cpus=128, gpus=0)
    # Decoys that the team's filters leave out: GPU-hours, and core-hours above its price.
    OfferFactory(resource="gpu", reserve_price=Decimal("1.00"))
    OfferFactory(resource="cpu", reserve_price=Decimal("9.00"))
    team = funded_organization("1000", name="Tidal Team")
    buyer = MembershipFactory(organization=team, role=Membership.Role.ADMIN).user
    now = timezone.now()
    closes = now + datetime.timedelta(hours=1)
    starts = now + datetime.timedelta(hours=2)
    ends = starts + datetime.timedelta(days=30)

    # The owner lists 200 core-hours of fjord/batch on the owner's offers page.
    log_in(page, base, owner.username)
    open_organization(page, "Fjord Compute")
    page.get_by_role("link", name="Offers of our clusters").click()
    expect(page.get_by_role("heading", name="Offers of Fjord Compute")).to_be_visible()
    form = page.locator("#offer-create")
    form.get_by_label("Cluster").select_option(label="fjord")
    form.get_by_label("Partition").select_option("batch")
    form.get_by_label("Resource").select_option("cpu")
    form.get_by_label("Units for sale").fill("200")
    form.get_by_label("Window starts (UTC)").fill(minute(starts))
    form.get_by_label("Window ends (UTC)").fill(minute(ends))
    form.get_by_label("Reserve price per core-hour (GPU-hour)").fill("1.50")
    form.get_by_label("Buy-now price per core-hour (GPU-hour)").fill("4")
    form.get_by_label("Auction closes (UTC)").fill(minute(closes))
    form.get_by_role("button", name="List offer").click()
    expect(page.get_by_role("alert")).to_contain_text(
        f"Listed 200 core-hours on fjord/batch; the auction closes {minute(closes)[:10]}"
    )
    listed = page.locator("#organization-offers tbody tr")
    expect(listed).to_have_count(1)
    expect(listed.first).to_contain_text("fjord/batch")
    expect(listed.first.locator("[data-field=status]")).to_have_text("Open")
    offer = Offer.objects.get(cluster=cluster)
    assert (offer.quantity, offer.reserve_price, offer.buy_now_price) == (
        200,
        Decimal("1.50"),
        Decimal("4"),
    )
    assert offer.auction_closes_at == closes.replace(second=0, microsecond=0)
    log_out(page)

    # The team finds it: core-hours at 2.00 or less leave the two decoys out.
    log_in(page, base, buyer.username)
    page.locator("#main-nav").get_by_role("link", name="Offers").click()
    rows = page.locator("#offers tbody tr")
    expect(rows).to_have_count(3)
    page.get_by_label("Resource").select_option(label="Core-hours")
    page.get_by_label("Reserve price, at most").fill("2")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("fjord")
    expect(rows.first).to_contain_text("200 / 200")
    rows.first.get_by_role("link", name=re.compile("^View the offer")).click()
    expect(page.get_by_role("heading", name="200 core-hours on fjord/batch")).to_be_visible()

    # The hold the bid will place shows as the team types, against the wallet's balance.
    bid_form = page.locator("#bid-form")
    hold = page.locator("#bid-hold-amount")
    note = page.locator("#bid-hold-note")
    expect(bid_form.get_by_label("Organization")).to_have_value(str(team.uuid))
    bid_form.get_by_label("Units", exact=True).press_sequentially("40")
    expect(hold).to_have_text("—")
    expect(note).to_have_text("Enter the units and the price per unit to see the hold.")
    price = bid_form.get_by_label("Price per unit")
    price.press_sequentially("2")
    expect(hold).to_have_text("80.00 USD")
    price.press_sequentially(".5")
    expect(hold).to_have_text("100.00 USD")
    expect(note).to_have_text("Of the 1,000.00 USD available to Tidal Team.")
    bid_form.get_by_label("Units", exact=True).fill("401")
    expect(hold).to_have_text("1,002.50 USD")
    expect(note).to_have_text(
        "More than the 1,000.00 USD available to Tidal Team: the order would be refused."
    )
    expect(page.locator("#bid-hold")).to_have_class(re.compile(r"\btext-danger\b"))
    # Exact decimals, rounded half up to the cent as the server rounds.
    bid_form.get_by_label("Units", exact=True).fill("3")
    price.fill("0.333333")
    expect(hold).to_have_text("1.00 USD")
    price.fill("0.1")
    expect(hold).to_have_text("0.30 USD")
    bid_form.get_by_label("Units", exact=True).fill("40")
    price.fill("2.5")
    expect(hold).to_have_text("100.00 USD")
    expect(page.locator("#bid-hold")).not_to_have_class(re.compile(r"\btext-danger\b"))

    # Buying now would hold the buy-now price times the units.
    buy_form = page.locator("#buy-form")
    buy_form.get_by_label("Units", exact=True).press_sequentially("3")
    expect(page.locator("#buy-hold-amount")).to_have_text("12.00 USD")
    expect(page.locator("#buy-hold-note")).to_have_text(
        "Of the 1,000.00 USD available to Tidal Team."
    )

    bid_form.get_by_role("button", name="Place bid").click()
    expect(page.get_by_role("alert")).to_contain_text(
        "Your bid of 40 units at 2.50 USD is placed; 100.00 USD is held on Tidal Team's wallet"
    )
    bid_row = page.locator("#bids tbody tr")
    expect(bid_row).to_have_count(1)
    expect(bid_row.locator("[data-field=held]")).to_have_text("100.00 USD")
    expect(page.locator("#offer-demand")).to_have_text("1 bid for 40 units")
    bid = Bid.objects.get()
    assert (bid.organization, bid.quantity, bid.price, bid.status) == (
        team,
        40,
        Decimal("2.5"),
        Bid.Status.OPEN,
    )
    assert billing_selectors.wallet_get(team).available == Decimal("900")

    # The allocations page shows the open bid and its hold, and no allocation yet.
    open_organization(page, "Tidal Team")
    page.get_by_role("link", name="Allocations and bids").click()
    expect(page.get_by_role("heading", name="Allocations of Tidal Team")).to_be_visible()
    team_bid = page.locator("#organization-bids tbody tr")
    expect(team_bid).to_have_count(1)
    expect(team_bid.locator("[data-field=status]")).to_have_text("Open")
    expect(team_bid.locator("[data-field=held]")).to_have_text("100.00")
    expect(page.locator("#allocations tbody tr")).to_contain_text("No allocations yet.")

    # The auction closes and clears: one bid for 40 of 200 units pays the reserve, 1.50.
    Offer.objects.filter(pk=offer.pk).update(
        auction_closes_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    outcome = services.auction_clear(offer_id=offer.pk)
    assert (outcome.cleared, outcome.price, outcome.units_sold) == (True, Decimal("1.5"), 40)

    page.reload()
    allocation_row = page.locator("#allocations tbody tr")
    expect(allocation_row).to_have_count(1)
    expect(allocation_row.locator("[data-field=quantity]")).to_have_text("40")
    expect(allocation_row.locator("[data-field=unit-price]")).to_have_text("1.50")
    expect(allocation_row.locator("[data-field=held]")).to_have_text("60.00")
    expect(allocation_row.locator("[data-field=remaining]")).to_have_text("40.00")
    expect(allocation_row.locator("[data-field=status]")).to_have_text("upcoming")
    expect(team_bid.locator("[data-field=status]")).to_have_text("Won")
    expect(team_bid.locator("[data-field=price-paid]")).to_have_text("1.50")
    expect(team_bid.locator("[data-field=held]")).to_have_text("kept by the allocation")
    allocation = Allocation.objects.get()
    assert (allocation.organization, allocation.offer, allocation.quantity) == (team, offer, 40)
    assert (allocation.unit_price, allocation.hold.amount) == (Decimal("1.5"), Decimal("60"))
    wallet = billing_selectors.wallet_get(team)
    assert (wallet.available, wallet.held) == (Decimal("940"), Decimal("60"))

    # The offer page links its price history, which shows the clearing price.
    allocation_row.get_by_role("link", name="fjord").click()
    expect(page.locator("#offer-clearing-price")).to_have_text(
        "1.50 USD per unit, 40 units sold at auction"
    )
    page.locator("#price-history-link").click()
    expect(
        page.get_by_role("heading", name="Price history of fjord/batch, core-hours")
    ).to_be_visible()
    history = page.locator("#price-history tbody tr")
    expect(history).to_have_count(1)
    expect(history.locator("[data-field=clearing-price]")).to_have_text("1.50")
    expect(history).to_contain_text("40 / 200")
    # Chart.js drew the one point on the canvas.
    page.wait_for_function("document.getElementById('price-chart').chart !== undefined")
    drawn = page.evaluate(
        "() => document.getElementById('price-chart').chart.data.datasets[0].data"
        ".map((point) => point.label)"
    )
    assert drawn == ["1.50"]


@pytest.mark.slurm
@pytest.mark.celery
def test_the_verify_button_shows_the_verification_live_until_the_cluster_is_online(
    page: Page, live_server, celery_worker, testcluster
):
    base = live_server.url
    owners = OrganizationFactory(name="Aurora Lab")
    owner = MembershipFactory(organization=owners, role=Membership.Role.ADMIN).user

    log_in(page, base, owner.username)
    open_organization(page, "Aurora Lab")
    page.get_by_role("link", name="Clusters", exact=True).click()
    expect(page.get_by_role("heading", name="Clusters of Aurora Lab")).to_be_visible()
    form = page.locator("#cluster-register")
    form.get_by_label("Name", exact=True).fill("Aurora")
    form.get_by_label("SSH host", exact=True).fill(testcluster.host)
    form.get_by_label("SSH port").fill(str(testcluster.port))
    form.get_by_label("SSH user", exact=True).fill(testcluster.user)
    form.get_by_label("Private key of the SSH user").fill(testcluster.private_key)
    form.get_by_label("Host key of the login node").fill(testcluster.host_key)
    form.get_by_label("Slurm accounts").select_option("managed")
    # The pool settings come prefilled with what scripts/cluster-setup makes by default.
    expect(form.get_by_label("SFTP server")).to_have_value("/usr/lib/openssh/sftp-server")
    form.get_by_label("Tenant group").fill(testcluster.managed_pool.group)
    form.get_by_role("button", name="Register cluster").click()
    expect(page.get_by_role("alert")).to_contain_text("Aurora is registered with host key SHA256:")
    cluster = Cluster.objects.get(name="Aurora")
    card = page.locator(f"#cluster-{cluster.uuid}")
    expect(card.locator("[data-field=status]")).to_have_text("Unverified")
    expect(card.locator("[data-field=fingerprint]")).to_have_text(cluster.host_key_fingerprint)
    expect(card.locator("[data-field=partitions] tbody")).to_contain_text("No partitions read yet")

    # Verify: the card shows the worker's progress, then the result, in the same page.
    page.evaluate("window.verificationPage = 'still here'")
    card.get_by_role("button", name="Verify Aurora").click()
    progress = card.locator("[data-field=verification]")
    expect(progress).to_have_attribute("data-verification-status", "running")
    expect(progress).to_contain_text("Verifying:")
    expect(card.get_by_role("button", name="Verify Aurora")).to_be_disabled()
    expect(progress).to_have_attribute("data-verification-status", "succeeded", timeout=30_000)
    tenants = [tenant.user for tenant in testcluster.managed_pool.tenants]
    expect(progress).to_contain_text(f"Online: 1 partition, {len(tenants)} tenant accounts.")
    # Each check with its outcome; this test cluster tracks processes without cgroups.
    steps = card.locator("[data-field=verification-steps] li")
    expect(steps.first).to_have_attribute("data-step", "connect")
    expect(card.locator("[data-step=sudo]")).to_have_attribute("data-status", "passed")
    expect(card.locator("[data-step=proctrack]")).to_have_attribute("data-status", "warning")
    expect(card.locator("[data-step=pool]")).to_contain_text(", ".join(tenants))
    # A job as the first tenant on the one node, which is also the login node.
    nodes = card.locator("[data-step=nodes]")
    expect(nodes).to_have_attribute("data-status", "passed")
    expect(nodes).to_contain_text(f"As {tenants[0]} on vm: the login node's uid")
    expect(card.locator("[data-field=tenant-accounts] tbody tr")).to_have_count(len(tenants))
    expect(card.locator(f"[data-account={tenants[0]}]")).to_contain_text("Available")
    expect(card.locator("[data-field=status]")).to_have_text("Online")
    expect(card.locator(f"[data-partition={testcluster.partition}]")).to_contain_text("up")
    expect(card.get_by_role("button", name="Verify Aurora")).to_be_enabled()
    assert page.evaluate("window.verificationPage") == "still here"

    cluster.refresh_from_db()
    assert cluster.status == Cluster.Status.ONLINE
    assert cluster.slurm_cluster_name == testcluster.cluster_name
    verification = ClusterVerification.objects.get()
    assert (verification.status, verification.requested_by, verification.error_code) == (
        ClusterVerification.Status.SUCCEEDED,
        owner,
        "",
    )
    assert cluster.partitions.filter(is_up=True).count() == 1
    assert verification.detail == (
        f"Online: 1 partition, {len(testcluster.managed_pool.tenants)} tenant accounts."
    )


@pytest.mark.parametrize("width", [1280, 390])
def test_the_demo_clusters_card_says_it_runs_on_this_machine(page: Page, live_server, width):
    """Issue 30: the local backend's card showed "SSH @:22" and "Pinned host key —"."""
    owners = OrganizationFactory(name="Demo Owners")
    owner = MembershipFactory(organization=owners, role=Membership.Role.ADMIN).user
    cluster = ClusterFactory(
        organization=owners,
        name="demo",
        backend=Cluster.Backend.LOCAL,
        tenant_group="",
        ssh_host="",
        ssh_user="",
    )
    page.set_viewport_size({"width": width, "height": 900})

    log_in(page, live_server.url, owner.username)
    page.goto(f"{live_server.url}{reverse('organization-clusters', args=[owners.uuid])}")

    card = page.locator(f"#cluster-{cluster.uuid}")
    expect(card.locator("[data-field=backend]")).to_contain_text(
        "The local backend, on this machine"
    )
    expect(card).not_to_contain_text("@:")
    expect(card.get_by_text("Pinned host key")).to_have_count(0)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
