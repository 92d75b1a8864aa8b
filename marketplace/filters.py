"""Query filters of the offers list (docs/api.md: `GET /api/v1/offers/`), with django-filter.
A bad value is a 400 naming the parameter, never silently ignored."""

import copy
from decimal import Decimal
from typing import Any

import django_filters
from django import forms
from django.core.validators import RegexValidator
from django.db.models import F, Q, QuerySet

from computeshare.ids import id_prefix_q, id_prefix_validate
from hpc.slurm.inventory import FEATURE_PATTERN
from marketplace.models import Capacity, Offer, Resource

# A GPU type or node feature as slurm.conf names them; anything else is refused (400), so that
# the quoted name looked for in the stored JSON list cannot be made to match another.
hardware_name = RegexValidator(
    rf"\A{FEATURE_PATTERN}\Z", "Letters, digits and . _ + - only, at most 64.", code="invalid"
)
MEGABYTES_PER_GIGABYTE = 1024


def json_list_has(field: str, name: str) -> Q:
    """Rows whose JSON list `field` holds the string `name` (checked by `hardware_name`):
    matched as `"name"` in the list's text, which PostgreSQL's jsonb and the demo's SQLite
    both write, where a JSON containment lookup exists only on PostgreSQL."""
    return Q(**{f"{field}__icontains": f'"{name}"'})


class OfferFilter(django_filters.FilterSet):
    id_prefix = django_filters.CharFilter(
        method="filter_id_prefix", max_length=36, validators=[id_prefix_validate]
    )
    resource = django_filters.ChoiceFilter(choices=Resource.choices)
    capacity = django_filters.ChoiceFilter(choices=Capacity.choices)
    cluster = django_filters.UUIDFilter(field_name="cluster__uuid")
    partition = django_filters.CharFilter(field_name="partition__name", max_length=64)
    status = django_filters.ChoiceFilter(choices=Offer.Status.choices)
    min_quantity = django_filters.NumberFilter(
        method="filter_min_quantity", min_value=Decimal(0), label="At least this many units left"
    )
    max_price = django_filters.NumberFilter(
        field_name="reserve_price", lookup_expr="lte", min_value=Decimal(0)
    )
    window_starts_before = django_filters.IsoDateTimeFilter(
        field_name="window_start", lookup_expr="lte"
    )
    window_ends_after = django_filters.IsoDateTimeFilter(field_name="window_end", lookup_expr="gte")
    # The hardware read at verification (Partition).
    q = django_filters.CharFilter(
        method="filter_search",
        max_length=100,
        label="Search",
        help_text="Words each found in the cluster, owner, partition, GPU types or features.",
    )
    gpu_type = django_filters.CharFilter(
        method="filter_gpu_type", max_length=64, validators=[hardware_name], label="GPU type"
    )
    feature = django_filters.CharFilter(
        method="filter_feature", max_length=64, validators=[hardware_name], label="Node feature"
    )
    min_cpus_per_node = django_filters.NumberFilter(
        field_name="partition__cpus_per_node",
        lookup_expr="gte",
        min_value=Decimal(0),
        label="CPUs per node, at least",
    )
    min_memory_per_node_gb = django_filters.NumberFilter(
        method="filter_min_memory",
        min_value=Decimal(0),
        max_value=Decimal(10**9),
        label="Memory per node (GB), at least",
    )
    min_gpus_per_node = django_filters.NumberFilter(
        field_name="partition__gpus_per_node",
        lookup_expr="gte",
        min_value=Decimal(0),
        label="GPUs per node, at least",
    )
    ordering = django_filters.OrderingFilter(
        fields=("reserve_price", "window_start", "auction_closes_at"),
    )

    class Meta:
        model = Offer
        fields: list[str] = []

    base_filters: dict[str, Any]  # django-filter's metaclass sets it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # django-filter deep-copies every declared filter for every request (a tenth of a list
        # request's CPU), only to give each copy this filterset as `parent`. A shallow copy
        # does that: no filter keeps anything of a request but its parent, and a method
        # filter's proxy is made again so that it calls this filterset's method.
        base_filters, self.base_filters = self.base_filters, {}
        super().__init__(*args, **kwargs)
        self.base_filters = base_filters
        self.filters = {name: copy.copy(filter_) for name, filter_ in base_filters.items()}
        model = self.queryset.model
        for filter_ in self.filters.values():
            filter_.model = model
            filter_.parent = self
            if filter_.method is not None:
                filter_.method = filter_.method

    def get_form_class(self) -> Any:
        # django-filter builds a new form class for every request; these filters' fields depend
        # on nothing in the request, so one class serves them all (a sixth of a list request's
        # time otherwise).
        cls = type(self)
        if "_form_class" not in cls.__dict__:
            form_class = super().get_form_class()
            # The API's own filter only validates its form: it never renders it or changes its
            # fields, which the page's subclass does per request. Its fields can then be shared
            # instead of deep-copied for every request.
            cls._form_class = _shared_fields(form_class) if cls is OfferFilter else form_class
        return cls._form_class

    def filter_id_prefix(self, queryset: QuerySet[Offer], name: str, value: str) -> Any:
        return queryset.filter(id_prefix_q(value)) if value else queryset

    def filter_min_quantity(self, queryset: QuerySet[Offer], name: str, value: Any) -> Any:
        if value is None:
            return queryset
        return queryset.filter(quantity__gte=F("units_sold") + value)

    def filter_gpu_type(self, queryset: QuerySet[Offer], name: str, value: str) -> Any:
        return queryset.filter(json_list_has("partition__gpu_types", value)) if value else queryset

    def filter_feature(self, queryset: QuerySet[Offer], name: str, value: str) -> Any:
        return queryset.filter(json_list_has("partition__features", value)) if value else queryset

    def filter_min_memory(self, queryset: QuerySet[Offer], name: str, value: Any) -> Any:
        if value is None:
            return queryset
        megabytes = int((value * MEGABYTES_PER_GIGABYTE).to_integral_value())
        return queryset.filter(partition__memory_per_node_mb__gte=megabytes)

    def filter_search(self, queryset: QuerySet[Offer], name: str, value: str) -> Any:
        for word in value.split()[:8]:
            queryset = queryset.filter(
                Q(cluster__name__icontains=word)
                | Q(cluster__organization__name__icontains=word)
                | Q(partition__name__icontains=word)
                | Q(partition__gpu_types__icontains=word)
                | Q(partition__features__icontains=word)
            )
        return queryset

    @property
    def qs(self) -> QuerySet[Offer, Any]:
        # A stable order whatever the ordering asked for, so that pages never overlap.
        # (Model rows for the page, `offer_rows` for the API: whatever it was given.)
        queryset: QuerySet[Offer, Any] = super().qs
        ordering = list(queryset.query.order_by) or ["auction_closes_at"]
        return queryset.order_by(*ordering, "pk")


def _shared_fields(form_class: type[forms.Form]) -> type[forms.Form]:
    """`form_class` whose forms use its fields as they are, not a deep copy of them each: for
    a form that is only validated (a field's `clean` changes nothing of the field)."""

    def __init__(self: forms.Form, *args: Any, **kwargs: Any) -> None:
        fields = self.base_fields
        vars(self)["base_fields"] = {}  # what Django deep-copies: nothing
        form_class.__init__(self, *args, **kwargs)
        del vars(self)["base_fields"]
        self.fields = dict(fields)

    return type(form_class.__name__, (form_class,), {"__init__": __init__})
