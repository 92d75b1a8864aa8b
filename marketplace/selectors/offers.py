"""Offers and their price history: public, as the pages show them to visitors."""

import functools
import json
from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast
from django.db.models.query import ValuesIterable

from computeshare.errors import NotFound, ValidationFailed
from marketplace.filters import OfferFilter
from marketplace.models import (
    Capacity,
    Cluster,
    Offer,
    backend_runs_jobs_as_tenants,
    quantity_unit,
    window_hours,
)
from marketplace.selectors.clusters import tenant_account_counts, tenant_account_counts_of_offers
from organizations.models import Organization


def offer_list() -> QuerySet[Offer]:
    """Every offer (public: the pages show them to visitors), with what its listing shows in one
    query. The cluster's private key is left out (read, and decrypted, only by what connects)."""
    return Offer.objects.select_related("cluster", "partition").defer("cluster__ssh_private_key")


# What the offers list shows of each offer, read as plain rows: the busiest read of the site
# builds no model objects, and never reads (let alone decrypts) a cluster's private key.
OFFER_LISTING_FIELDS = (
    "uuid",
    "cluster__uuid",
    "cluster__name",
    "partition__name",
    "resource",
    "capacity",
    "quantity",
    "units_sold",
    "window_start",
    "window_end",
    "reserve_price",
    "buy_now_price",
    "auction_closes_at",
    "max_per_buyer",
    "status",
    "clearing_price",
    "cleared_at",
    "bid_count",
    "units_bid",
    "created_at",
    "partition__nodes",
    "partition__cpus_per_node",
    "partition__memory_per_node_mb",
    "partition__gpus_per_node",
    "partition__gpu_types",
    "partition__features",
    "partition__nodes_differ",
)


class _OfferRowIterable(ValuesIterable):
    """`offer_rows`' rows, each finished in Python as it is read: the values are selected as
    plain columns and shaped here, because SQL-built objects (`JSONObject`, `Case`) cost
    Django about 3 ms of expression resolving on every request of the busiest read. Being the
    queryset's iterable, it keeps the rows lazy: the paginator counts and slices as before."""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # ValuesIterable's own loop, with the columns read as text named as the fields they
        # are, once per query rather than renamed in every row.
        query = self.queryset.query
        compiler = query.get_compiler(self.queryset.db)
        columns = query.selected or [
            *query.extra_select,
            *query.values_select,
            *query.annotation_select,
        ]
        names = [_TEXT_COLUMNS.get(name, name) for name in columns]
        currency = settings.PLATFORM_CURRENCY
        for values in compiler.results_iter(
            chunked_fetch=self.chunked_fetch, chunk_size=self.chunk_size
        ):
            yield _offer_row_finish(dict(zip(names, values, strict=True)), currency)


_HARDWARE_FIELDS = (
    "nodes",
    "cpus_per_node",
    "memory_per_node_mb",
    "gpus_per_node",
    "gpu_types",
    "features",
    "nodes_differ",
)
# Read as text, not through the fields' converters: a uuid.UUID built per id only to be written
# out again, and a JSON parse per list, were a fifth of the busiest read's CPU. The partitions'
# lists repeat (most are `[]`): each text is parsed once per process, as a tuple no caller
# can change.
_AS_TEXT = ("uuid", "cluster__uuid", "partition__gpu_types", "partition__features")
_TEXT_COLUMNS = {f"{name}_text": name for name in _AS_TEXT}
_HARDWARE_COLUMNS = tuple((name, f"partition__{name}") for name in _HARDWARE_FIELDS)


@functools.lru_cache(maxsize=4096)
def _json_list(text: str) -> tuple[Any, ...]:
    return tuple(json.loads(text))


def _uuid_text(text: str) -> str:
    """A UUID's text as PostgreSQL writes it (with hyphens); SQLite keeps the 32 hex digits
    alone, which the API's paths would not take back."""
    if len(text) == 32:
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
    return text


def _offer_row_finish(row: dict[str, Any], currency: str) -> dict[str, Any]:
    row["uuid"] = _uuid_text(row["uuid"])
    row["cluster__uuid"] = _uuid_text(row["cluster__uuid"])
    row["partition__gpu_types"] = _json_list(row["partition__gpu_types"])
    row["partition__features"] = _json_list(row["partition__features"])
    row["currency"] = currency
    row["quantity_unit"] = quantity_unit(row["resource"], row["capacity"])
    row["unit_hours"] = (
        window_hours(row["window_start"], row["window_end"])
        if row["capacity"] == Capacity.RESERVED
        else 1
    )
    row["preemption_grace_seconds"] = (
        row.pop("cluster__preemption_grace_seconds")
        if row["capacity"] == Capacity.PREEMPTIBLE
        else None
    )
    row["hardware"] = {name: row[column] for name, column in _HARDWARE_COLUMNS}
    total, free = row.pop("tenant_accounts_total"), row.pop("tenant_accounts_free")
    runs_as_tenants = backend_runs_jobs_as_tenants(row.pop("cluster__backend"))
    row["tenant_accounts"] = {"total": total, "free": free} if runs_as_tenants else None
    return row


def offer_rows(offers: QuerySet[Offer]) -> QuerySet[Offer, dict[str, Any]]:
    """The offers (already filtered and ordered) as rows of `OFFER_LISTING_FIELDS`, each with
    what `OfferSerializer` renders as it is: `remaining`, `currency`, `hardware` (the
    partition's nodes) and `tenant_accounts` (`{"total", "free"}` of the cluster's pool; None
    on a cluster whose jobs do not run as tenant accounts, the demo's local backend, which
    serves any number of teams). One query, however many rows."""
    rows: QuerySet[Offer, dict[str, Any]] = offers.annotate(
        **tenant_account_counts_of_offers()
    ).values(
        *(name for name in OFFER_LISTING_FIELDS if name not in _AS_TEXT),
        "cluster__backend",
        "cluster__preemption_grace_seconds",
        "tenant_accounts_total",
        "tenant_accounts_free",
        remaining=Offer.REMAINING,
        **{f"{name}_text": Cast(name, TextField()) for name in _AS_TEXT},
    )
    rows._iterable_class = _OfferRowIterable
    return rows


def offer_rows_filtered(
    params: Mapping[str, Any],
) -> tuple[QuerySet[Offer, dict[str, Any]], dict[str, Any]]:
    """The offers as the API's query `params` filter and order them (`OfferFilter`), as
    `offer_rows`, with the filters as understood; `ValidationFailed` names each one not valid."""
    filters = OfferFilter(params, queryset=_offer_rows_unfiltered())
    if not filters.is_valid():
        errors = filters.errors.items()
        raise ValidationFailed(fields={name: list(map(str, each)) for name, each in errors})
    return filters.qs, dict(filters.form.cleaned_data)


# `offer_rows` of every offer, built once per process and cloned by each request's filters:
# building its joins, values and subqueries was a sixth of the offers list's CPU a request.
_offer_rows_unfiltered = functools.cache(lambda: offer_rows(offer_list()))


def offer_row_get(offer_uuid: Any) -> dict[str, Any]:
    """One offer as `offer_rows` reads each (public, as the offers are)."""
    try:
        return offer_rows(offer_list().filter(uuid=offer_uuid)).get()
    except (Offer.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such offer.") from error


def offer_get(offer_uuid: Any) -> Offer:
    """One offer, with its cluster's `tenant_accounts_total` and `tenant_accounts_free`."""
    try:
        return offer_list().annotate(**tenant_account_counts("cluster")).get(uuid=offer_uuid)
    except (Offer.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such offer.") from error


def offer_list_for_organization(organization: Organization) -> QuerySet[Offer]:
    """The offers on the organization's own clusters, newest first: an owner's listing."""
    return offer_list().filter(cluster__organization=organization).order_by("-created_at", "-id")


def price_history(
    *,
    cluster: Cluster | None = None,
    partition: str | None = None,
    resource: str | None = None,
    capacity: str = Capacity.PREEMPTIBLE,
) -> QuerySet[Offer]:
    """Cleared offers of one kind of capacity over time, oldest first: public. The two kinds'
    prices are never mixed (a reserved core-hour is dearer than a preemptible one)."""
    offers = Offer.objects.filter(status=Offer.Status.CLEARED, capacity=capacity).select_related(
        "cluster", "partition"
    )
    if cluster is not None:
        offers = offers.filter(cluster=cluster)
    if partition:
        offers = offers.filter(partition__name=partition)
    if resource:
        offers = offers.filter(resource=resource)
    return offers.order_by("auction_closes_at", "pk")
