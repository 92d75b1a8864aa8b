"""The offers list's row and card of each offer, rendered once and kept in the cache under a
digest of everything they draw.

The offers page is the site's busiest, and drawing its fifty offers twice each (a table row for
wide screens, a card for narrow ones) was nine tenths of its CPU, in the template engine; from
the cache, a page of fifty costs about a quarter of the CPU it did (measured without the test
client's template instrumentation: about 25 ms rather than 100 on a development machine). An
offer's row and card change only when something they show changes, so each pair is kept in the
cache (Redis, which every process shares) under a key that digests all of it: the offer's fields
they show, its partition's hardware, its cluster's name, the cluster's track record, the
currency, the language, the time zone, the offer pages' URL, and the source of the templates
and of the code that formats them. A bid, a purchase, a status change, a rename, a verification
or a deploy changes the key, so the next page renders the new pair: nothing is invalidated, no
page shows an old pair, and the pairs no page asks for any more expire.

A missing pair is rendered from copies of the offer, its partition and its cluster that hold
only the digested values (`_fragment_offer`), never from the rows as read: what the key leaves
out, the fragments cannot show. Of the track record, only its `since` is left out of the key: it
moves with every request and the fragments draw its `days` instead."""

import dataclasses
import functools
import hashlib
import importlib
import inspect
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import django
from django.conf import settings
from django.core.cache import cache
from django.template import Engine, Template
from django.template.loader import render_to_string
from django.template.loader_tags import IncludeNode
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.safestring import SafeString, mark_safe

from marketplace.models import Cluster, Offer, Partition
from marketplace.selectors.track_records import TrackRecord

ROW_TEMPLATE = "marketplace/market/_offer_row.html"
CARD_TEMPLATE = "marketplace/market/_offer_card.html"
# What the two templates draw of an offer, its partition and its cluster.
OFFER_FIELDS = (
    "uuid",
    "resource",
    "capacity",
    "quantity",
    "units_sold",
    "window_start",
    "window_end",
    "reserve_price",
    "buy_now_price",
    "auction_closes_at",
    "status",
    "bid_count",
    "units_bid",
)
PARTITION_FIELDS = (
    "name",
    "cpus_per_node",
    "memory_per_node_mb",
    "gpus_per_node",
    "gpu_types",
    "features",
    "nodes_differ",
)
CLUSTER_FIELDS = ("name",)
# The same, as the page reads them: nothing else of the three rows is read.
LISTED_FIELDS = (
    *OFFER_FIELDS,
    *(f"partition__{name}" for name in PARTITION_FIELDS),
    *(f"cluster__{name}" for name in CLUSTER_FIELDS),
)
RECORD_FIELDS = tuple(
    field.name for field in dataclasses.fields(TrackRecord) if field.name != "since"
)
# The code that turns those values into the fragments' text, besides the templates.
FORMATTING_MODULES = (
    "marketplace.templatetags.market",
    "marketplace.templatetags.capacity",
    "computeshare.templatetags.figures",
    "computeshare.figures",
    "marketplace.models.offers",
    "marketplace.selectors.track_records",
)
# Long enough to outlast many pages of the same offers, short enough that the pairs of offers
# that changed do not pile up.
FRAGMENT_SECONDS = 600


class OfferListing(NamedTuple):
    row: SafeString
    card: SafeString


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """Everything one offer's row and card draw, as plain values."""

    offer: tuple[Any, ...]
    partition: tuple[Any, ...]
    cluster: tuple[Any, ...]
    record: tuple[Any, ...] | None


def offer_listings(
    offers: Iterable[Offer], records: Mapping[int, TrackRecord]
) -> list[OfferListing]:
    """Each offer's row and card, in the offers' order (`records`: the track records by
    cluster), in one read of the cache and one write of those it did not hold."""
    page = _page_inputs()
    wanted: dict[str, tuple[_Inputs, TrackRecord | None]] = {}
    for offer in offers:
        record = records.get(offer.cluster_id)
        inputs = _inputs_of(offer, record)
        wanted[_key(page, inputs)] = (inputs, record)
    found: dict[str, tuple[str, str]] = cache.get_many(wanted)
    rendered = {
        key: _render(inputs, record) for key, (inputs, record) in wanted.items() if key not in found
    }
    if rendered:
        cache.set_many(rendered, timeout=FRAGMENT_SECONDS)
    found.update(rendered)
    return [_listing(*found[key]) for key in wanted]


def _listing(row: str, card: str) -> OfferListing:
    # The templates' own output, escaped as they rendered it; the cache keeps it as text.
    return OfferListing(mark_safe(row), mark_safe(card))  # noqa: S308


def _inputs_of(offer: Offer, record: TrackRecord | None) -> _Inputs:
    return _Inputs(
        offer=tuple(getattr(offer, name) for name in OFFER_FIELDS),
        partition=tuple(getattr(offer.partition, name) for name in PARTITION_FIELDS),
        cluster=tuple(getattr(offer.cluster, name) for name in CLUSTER_FIELDS),
        record=None if record is None else tuple(getattr(record, name) for name in RECORD_FIELDS),
    )


def _page_inputs() -> tuple[Any, ...]:
    """What every fragment of a page draws besides its offer's values. The URL of an offer
    that does not exist stands for every offer's: its path and the site's prefix."""
    return (
        _rendering_version(),
        settings.PLATFORM_CURRENCY,
        translation.get_language(),
        timezone.get_current_timezone_name(),
        reverse("offer-detail", args=[uuid.UUID(int=0)]),
    )


def _key(page: tuple[Any, ...], inputs: _Inputs) -> str:
    # `repr` of the values: a Decimal keeps its places, a datetime its zone.
    text = repr((page, inputs))
    return f"offer-listing:{hashlib.blake2b(text.encode(), digest_size=20).hexdigest()}"


def _render(inputs: _Inputs, record: TrackRecord | None) -> tuple[str, str]:
    context = {"offer": _fragment_offer(inputs), "record": record}
    # Without the template files' first and last line ends: the page places each fragment.
    return (
        render_to_string(ROW_TEMPLATE, context).strip(),
        render_to_string(CARD_TEMPLATE, context).strip(),
    )


def _fragment_offer(inputs: _Inputs) -> Offer:
    """An unsaved offer with only the digested values (the others at their defaults), on an
    unsaved partition and cluster likewise."""
    offer = Offer(**dict(zip(OFFER_FIELDS, inputs.offer, strict=True)))
    offer.partition = Partition(**dict(zip(PARTITION_FIELDS, inputs.partition, strict=True)))
    offer.cluster = Cluster(**dict(zip(CLUSTER_FIELDS, inputs.cluster, strict=True)))
    return offer


def _rendering_version() -> str:
    """A digest of the fragments' templates, with those they include, and of the code that
    formats what they draw: fragments rendered by another release are never read. Digested once
    per loading of the templates, so that a template edited under `runserver`, which reloads the
    templates but not the code, renders new fragments too."""
    engine = Engine.get_default()
    return _version_of(engine.get_template(ROW_TEMPLATE), engine.get_template(CARD_TEMPLATE))


@functools.lru_cache(maxsize=1)
def _version_of(*templates: Template) -> str:
    digest = hashlib.blake2b(django.get_version().encode(), digest_size=20)
    for template in _templates_from(templates):
        digest.update(template.source.encode())
    for name in FORMATTING_MODULES:
        digest.update(inspect.getsource(importlib.import_module(name)).encode())
    return digest.hexdigest()


def _templates_from(templates: Iterable[Template]) -> Iterator[Template]:
    """The templates and, at any depth, those they include by a constant name."""
    for template in templates:
        yield template
        names = (
            node.template.var
            for node in template.nodelist.get_nodes_by_type(IncludeNode)
            if isinstance(node, IncludeNode)
        )
        yield from _templates_from(
            template.engine.get_template(name) for name in names if isinstance(name, str)
        )
