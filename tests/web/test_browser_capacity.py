"""An owner's capacity page in headless Chromium at 390 px: the coming week's calendar shows
what the partition's offers take in each hour, the idle pattern what the poll's samples found,
and one click lists the offer suggested for the next idle window, after which the calendar
shows it taken. Nothing pans sideways and the console stays free of errors."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page, expect

from hpc.slurm.inventory import PartitionIdle
from marketplace import capacity, services
from marketplace.models import Offer
from organizations.models import Membership
from tests.factories import ClusterFactory, MembershipFactory, OfferFactory, PartitionFactory
from tests.web.test_browser_market import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOUR = timedelta(hours=1)


def console_errors(page: Page) -> list[str]:
    errors: list[str] = []
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def pans_sideways(page: Page) -> bool:
    return bool(
        page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")
    )


def test_an_owner_reads_the_calendar_and_lists_the_suggested_offer_in_one_click(
    page: Page, live_server
):
    base = live_server.url
    admin = MembershipFactory(role=Membership.Role.ADMIN)
    owners = admin.organization
    cluster = ClusterFactory(organization=owners, name="fjord")
    partition = PartitionFactory(cluster=cluster, name="batch", cpus=16, gpus=0, nodes=1)
    now = timezone.now()
    # Three auctions cleared on the partition: the suggested reserve is their median, 0.80.
    for price in ("0.70", "0.90", "0.80"):
        cleared = OfferFactory(partition=partition, quantity=10)
        Offer.objects.filter(pk=cleared.pk).update(
            status=Offer.Status.CLEARED,
            clearing_price=Decimal(price),
            auction_closes_at=now - timedelta(days=3),
            window_start=now - timedelta(days=3),
            window_end=now - timedelta(days=2),
        )
    # An offer of 10 cores an hour from 00:00 to 06:00 the day after tomorrow.
    day = capacity.hour_floor(now).replace(hour=0) + timedelta(days=2)
    services.offer_create(
        actor=admin,
        cluster=cluster,
        partition="batch",
        resource="cpu",
        quantity=60,
        window_start=day,
        window_end=day + 6 * HOUR,
        reserve_price="1.00",
        auction_closes_at=day - HOUR,
    )
    # What the poll sampled a week ago, three to eight hours on from now: 12 of 16 CPUs idle.
    first = capacity.hour_floor(now) + 3 * HOUR
    for index in range(5):
        services.partition_idle_record(
            cluster=cluster,
            idle=[PartitionIdle(name="batch", cpus=16, idle_cpus=12, gpus=0, idle_gpus=0)],
            at=first + index * HOUR - timedelta(days=7) + timedelta(minutes=10),
        )
    errors = console_errors(page)
    page.set_viewport_size({"width": 390, "height": 800})

    log_in(page, base, admin.user.username)
    page.goto(f"{base}{reverse('organization-clusters', args=[owners.uuid])}")
    page.get_by_role("link", name="Capacity, idle time, track record").click()

    expect(page.get_by_role("heading", name="Capacity of fjord")).to_be_visible()
    calendar = page.locator(
        '[data-partition="batch"] [data-resource="cpu"] [data-field="calendar"]'
    )
    offered = calendar.locator(f'[data-hour="{day.isoformat()}"]')
    # Listed and not sold yet: not counted as sold, but no longer free to list.
    expect(offered).to_have_attribute("data-sold", "0.00")
    expect(offered).to_have_attribute("data-listed", "10.00")
    expect(offered).to_have_attribute("data-free", "6.00")
    expect(offered).to_have_attribute(
        "title", re.compile(r": 0\.00 of 16 sold, 10\.00 listed and not sold yet, 6\.00 free")
    )
    expect(calendar.locator(f'[data-hour="{(day + 6 * HOUR).isoformat()}"]')).to_have_attribute(
        "data-listed", "0.00"
    )
    idle = page.locator('[data-partition="batch"] [data-resource="cpu"] [data-field="idle"]')
    sampled = idle.locator(f'[data-weekday="{first.strftime("%a")}"] [data-hour="{first.hour}"]')
    expect(sampled).to_have_attribute("data-idle", "75")
    suggestion = page.locator(
        '[data-partition="batch"] [data-resource="cpu"] [data-field="suggestion"]'
    )
    expect(suggestion.locator('[data-field="suggestion-quantity"]')).to_have_text("60")
    expect(suggestion.locator('[data-field="suggestion-per-hour"]')).to_have_text("12")
    expect(suggestion.locator('[data-field="suggestion-price"]')).to_have_text("0.80")
    expect(suggestion).to_contain_text("the median clearing price of the last 3 auctions")
    expect(page.locator('[data-field="track-record"]').first).to_have_attribute(
        "data-clean", "true"
    )
    assert not pans_sideways(page)

    suggestion.get_by_role("button", name="List this offer").click()

    expect(page.locator(".alert-success").first).to_contain_text(
        "Listed 60 core-hours on fjord/batch"
    )
    listed = Offer.objects.get(partition=partition, window_start=first)
    assert (
        listed.quantity,
        listed.window_end,
        listed.reserve_price,
        listed.auction_closes_at,
        listed.status,
    ) == (60, first + 5 * HOUR, Decimal("0.800000"), first - HOUR, "open")
    calendar = page.locator(
        '[data-partition="batch"] [data-resource="cpu"] [data-field="calendar"]'
    )
    expect(calendar.locator(f'[data-hour="{first.isoformat()}"]')).to_have_attribute(
        "data-listed", "12.00"
    )
    # What is left idle and unsold in those hours is suggested next: 4 an hour.
    expect(
        page.locator(
            '[data-partition="batch"] [data-resource="cpu"] [data-field="suggestion-per-hour"]'
        )
    ).to_have_text("4")
    assert not pans_sideways(page)
    assert errors == []
