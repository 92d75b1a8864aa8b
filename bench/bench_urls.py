"""The project's URLs plus `bench/bare-offers/`: the offers list the API serves, written as the
least Django can do (one query, `values()`, JsonResponse; no DRF, no authentication), as the
yardstick bench/marketplace.py measures the API against."""

from decimal import Decimal, InvalidOperation

from django.http import HttpRequest, JsonResponse
from django.urls import include, path

from marketplace.models import Offer
from marketplace.selectors import OFFER_LISTING_FIELDS


def bare_offers(request: HttpRequest) -> JsonResponse:
    try:
        max_price = Decimal(request.GET["max_price"])
        page_size = int(request.GET.get("page_size", "50"))
    except (KeyError, ValueError, InvalidOperation):
        return JsonResponse({"detail": "max_price and page_size"}, status=400)
    # The API's order for `ordering=reserve_price`: the filter adds the primary key last.
    offers = (
        Offer.objects.filter(
            resource=request.GET.get("resource", "cpu"),
            status=request.GET.get("status", "open"),
            reserve_price__lte=max_price,
        )
        .order_by("reserve_price", "pk")
        .values(*OFFER_LISTING_FIELDS)[:page_size]
    )
    return JsonResponse({"results": list(offers)})


urlpatterns = [
    path("bench/bare-offers/", bare_offers),
    path("", include("computeshare.urls")),
]

handler404 = "computeshare.views.not_found"
handler500 = "computeshare.views.server_error"
