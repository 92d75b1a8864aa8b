"""Query filters of the offers list (API.md: `GET /offers/`), with django-filter. A bad value
is a 400 naming the parameter, never silently ignored."""

from decimal import Decimal
from typing import Any

import django_filters
from django.db.models import F, QuerySet

from marketplace.models import Offer, Resource


class OfferFilter(django_filters.FilterSet):
    resource = django_filters.ChoiceFilter(choices=Resource.choices)
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
    ordering = django_filters.OrderingFilter(
        fields=("reserve_price", "window_start", "auction_closes_at"),
    )

    class Meta:
        model = Offer
        fields: list[str] = []

    def get_form_class(self) -> Any:
        # django-filter builds a new form class for every request; these filters' fields depend
        # on nothing in the request, so one class serves them all (a sixth of a list request's
        # time otherwise).
        cls = type(self)
        if "_form_class" not in cls.__dict__:
            cls._form_class = super().get_form_class()
        return cls._form_class

    def filter_min_quantity(self, queryset: QuerySet[Offer], name: str, value: Any) -> Any:
        if value is None:
            return queryset
        return queryset.filter(quantity__gte=F("units_sold") + value)

    @property
    def qs(self) -> QuerySet[Offer]:
        # A stable order whatever the ordering asked for, so that pages never overlap.
        queryset = super().qs
        ordering = list(queryset.query.order_by) or ["auction_closes_at"]
        return queryset.order_by(*ordering, "pk")
