"""An owner's capacity page for one cluster: each partition's capacity calendar for the coming
week, when it has been idle over the last weeks, a one-click offer for its next idle window,
and the cluster's track record as buyers see it. The owners only (a 404 to anyone else), like
the cluster's verification."""

from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views import View

from computeshare.authentication import request_user
from computeshare.errors import ApplicationError, NotFound
from computeshare.numbers import MICRO_PLACES
from marketplace import capacity, selectors, services
from marketplace.forms.market import UTC
from marketplace.models import Cluster, Partition, Resource
from marketplace.views.clusters import owner_membership
from marketplace.views.navigation import next_url
from marketplace.views.refusals import SHOWN_ON_FORM, refusal_text
from organizations import selectors as organization_selectors
from organizations.models import Membership

CALENDAR_DAYS = 7


def _level(share: Fraction) -> int:
    """The shade of a cell, 0 to 4 (a quarter each), 5 past full."""
    if share > 1:
        return 5
    return min(4, int(share * 4 + Fraction(1, 2))) if share > 0 else 0


def calendar_rows(
    partition: Partition, resource: str, now: datetime
) -> tuple[list[dict[str, Any]], int]:
    """The coming week's calendar as one row of 24 hours a day (UTC), and the capacity."""
    first = capacity.hour_floor(now).replace(hour=0)
    hours = selectors.partition_calendar(
        partition, resource, first, first + timedelta(days=CALENDAR_DAYS)
    )
    per_hour = selectors.partition_capacity(partition, resource)
    rows = []
    for day in range(CALENDAR_DAYS):
        cells = []
        for hour in hours[day * 24 : (day + 1) * 24]:
            # Shaded by what buyers bought; what is listed and not sold yet is marked apart,
            # and an hour that carries more than the partition has (sold and listed) is red.
            share = hour.bought / per_hour if per_hour else Fraction(0)
            listed = hour.sold - hour.bought
            cells.append(
                {
                    "start": hour.start,
                    "sold": capacity.units_text(hour.bought),
                    "listed": capacity.units_text(listed),
                    "is_listed": listed > 0,
                    "free": capacity.units_text(hour.free),
                    "level": 5 if hour.sold > per_hour else _level(share),
                    "is_past": hour.start + capacity.HOUR <= now,
                }
            )
        rows.append({"date": first + timedelta(days=day), "cells": cells})
    return rows, per_hour


def idle_rows(partition: Partition, resource: str, now: datetime) -> list[dict[str, Any]]:
    grid = selectors.idle_pattern(partition, resource, now)
    return [
        {
            "weekday": selectors.WEEKDAYS[weekday],
            "cells": [
                {
                    "hour": hour,
                    "cell": cell,
                    "level": 0
                    if cell is None
                    else _level(Fraction(cell.share).limit_denominator()),
                    "percent": None if cell is None else round(cell.share * 100),
                }
                for hour, cell in enumerate(cells)
            ],
        }
        for weekday, cells in enumerate(grid)
    ]


class SuggestionForm(forms.Form):
    """The suggested offer as the page shows it, posted back as it was shown: the service checks
    it again like any listing (the calendar may have filled meanwhile)."""

    partition = forms.CharField(max_length=64)
    resource = forms.ChoiceField(choices=Resource.choices)
    quantity = forms.IntegerField(min_value=1)
    window_start = forms.DateTimeField()
    window_end = forms.DateTimeField()
    auction_closes_at = forms.DateTimeField()
    reserve_price = forms.DecimalField(max_digits=20, decimal_places=MICRO_PLACES)


def capacity_page(
    request: HttpRequest,
    cluster: Cluster,
    membership: Membership,
    *,
    refusal: str = "",
    status: int = 200,
) -> HttpResponse:
    now = timezone.now()
    partitions = []
    for partition in cluster.partitions.filter(is_up=True).order_by("name"):
        resources = [Resource.CPU] + ([Resource.GPU] if partition.gpus else [])
        sections = []
        for resource in resources:
            rows, per_hour = calendar_rows(partition, resource, now)
            sections.append(
                {
                    "resource": resource,
                    "label": Resource(resource).label.lower(),
                    "unit": "GPUs" if resource == Resource.GPU else "CPUs",
                    "calendar": rows,
                    "capacity": per_hour,
                    "idle": idle_rows(partition, resource, now),
                    "suggestion": selectors.offer_suggestion(partition, resource, now),
                }
            )
        partitions.append({"partition": partition, "sections": sections})
    context = {
        "cluster": cluster,
        "organization": cluster.organization,
        "membership": membership,
        "partitions": partitions,
        "track_record": selectors.track_record(cluster, now),
        "outages": selectors.outage_list(cluster),
        "hardware_changes": selectors.hardware_change_list(cluster),
        "refusal": refusal,
        "currency": settings.PLATFORM_CURRENCY,
        "hours": range(24),
        "sample_minutes": (
            max(1, round(settings.IDLE_SAMPLE_SECONDS / 60)) if settings.IDLE_SAMPLE_SECONDS else 0
        ),
        "pattern_weeks": selectors.IDLE_PATTERN_DAYS // 7,
    }
    return render(request, "marketplace/market/capacity.html", context, status=status)


class ClusterCapacityView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest, cluster_id: str) -> HttpResponse:
        cluster = selectors.cluster_get(cluster_id)
        return capacity_page(request, cluster, owner_membership(request, cluster))


class SuggestedOfferCreateView(LoginRequiredMixin, View):
    """The one click: lists the suggested offer as shown (an admin of the owners)."""

    def post(self, request: HttpRequest, cluster_id: str) -> HttpResponse:
        cluster = selectors.cluster_get(cluster_id)
        membership = owner_membership(request, cluster)
        form = SuggestionForm(request.POST)
        if not form.is_valid():
            return capacity_page(
                request,
                cluster,
                membership,
                refusal="The suggestion could not be read: reload the page and try again.",
                status=400,
            )
        data = form.cleaned_data
        try:
            offer = services.offer_create(
                actor=membership,
                cluster=cluster,
                partition=data["partition"],
                resource=data["resource"],
                quantity=data["quantity"],
                window_start=data["window_start"],
                window_end=data["window_end"],
                auction_closes_at=data["auction_closes_at"],
                reserve_price=Decimal(data["reserve_price"]),
            )
        except SHOWN_ON_FORM as error:
            return capacity_page(
                request, cluster, membership, refusal=_refusal(error), status=error.status_code
            )
        messages.success(
            request,
            f"Listed {offer.quantity} {offer.get_resource_display().lower()} on "
            f"{cluster.name}/{offer.partition.name} for {offer.window_start:%Y-%m-%d %H:%M} to "
            f"{offer.window_end:%Y-%m-%d %H:%M} UTC; the auction closes "
            f"{offer.auction_closes_at:%Y-%m-%d %H:%M} UTC.",
        )
        return HttpResponseRedirect(reverse("cluster-capacity", args=[cluster.uuid]))


def _refusal(error: ApplicationError) -> str:
    fields = error.extra.get("fields") if isinstance(error.extra, dict) else None
    if fields:
        return " ".join(
            f"{name.replace('_', ' ')}: {' '.join(messages)}" for name, messages in fields.items()
        )
    return refusal_text(error)


class OfferGrowForm(forms.Form):
    quantity = forms.IntegerField(min_value=1, required=False)
    # A `datetime-local` input: read as UTC, as the offer form reads its times.
    window_end = forms.DateTimeField(required=False)


class OfferExtendView(LoginRequiredMixin, View):
    """The owners grow an open offer from their offers page: more units, or a later end of its
    window; a refusal (the calendar, bids on the window) is said in a message."""

    def post(self, request: HttpRequest, offer_id: str) -> HttpResponse:
        offer = selectors.offer_get(offer_id)
        membership = organization_selectors.membership_in(
            request_user(request), offer.cluster.organization_id
        )
        if membership is None:
            raise NotFound("No such offer.")
        back = next_url(
            request, reverse("organization-offers", args=[membership.organization.uuid])
        )
        with timezone.override(UTC):
            form = OfferGrowForm(request.POST)
            is_valid = form.is_valid()
        if not is_valid:
            messages.error(
                request, "Give the new quantity as a whole number and the end as a date and time."
            )
            return HttpResponseRedirect(back)
        window_end = form.cleaned_data["window_end"]
        if window_end == offer.window_end.replace(second=0, microsecond=0):
            window_end = None  # the field as the page filled it in: the end is not changed
        quantity = form.cleaned_data["quantity"]
        if quantity == offer.quantity and window_end is not None:
            quantity = None
        try:
            grown = services.offer_extend(
                actor=membership, offer=offer, quantity=quantity, window_end=window_end
            )
        except SHOWN_ON_FORM as error:
            messages.error(
                request, f"{offer.cluster.name}/{offer.partition.name}: {_refusal(error)}"
            )
        else:
            messages.success(
                request,
                f"The offer on {offer.cluster.name}/{offer.partition.name} now sells "
                f"{grown.quantity} units until {grown.window_end:%Y-%m-%d %H:%M} UTC.",
            )
        return HttpResponseRedirect(back)
