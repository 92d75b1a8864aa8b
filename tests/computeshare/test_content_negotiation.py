"""`ContentNegotiation` answers a request that accepts anything without parsing its header: it
must pick what DRF's own negotiation picks, and leave every other request to it."""

import pytest
from django.http import Http404
from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from computeshare.api import ContentNegotiation


class CSVRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"


class PlainTextRenderer(BaseRenderer):
    media_type = "text/plain; charset=utf-8"
    format = "txt"


RENDERER_LISTS = [
    [JSONRenderer()],
    [JSONRenderer(), CSVRenderer()],
    [CSVRenderer(), JSONRenderer()],
    [PlainTextRenderer(), JSONRenderer()],
]


def picked(
    negotiation: DefaultContentNegotiation,
    request: Request,
    renderers: list[BaseRenderer],
    suffix: str | None,
) -> tuple[str, str] | str:
    """The renderer's class and the media type, or the refusal's class."""
    try:
        renderer, media_type = negotiation.select_renderer(request, renderers, suffix)
    except (exceptions.NotAcceptable, Http404) as error:
        return type(error).__name__
    return type(renderer).__name__, media_type


@pytest.mark.parametrize("renderers", RENDERER_LISTS)
@pytest.mark.parametrize(
    ("accept", "query", "suffix"),
    [
        (None, "", None),
        ("*/*", "", None),
        ("*/*", "format=csv", None),
        ("*/*", "format=", None),
        ("*/*", "", "csv"),
        ("application/json", "", None),
        ("application/json; indent=4", "", None),
        ("text/csv", "", None),
        ("text/html", "", None),
        ("*/*;q=0.8, text/csv", "", None),
    ],
)
def test_it_picks_what_drf_picks(
    renderers: list[BaseRenderer], accept: str | None, query: str, suffix: str | None
) -> None:
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    request = Request(APIRequestFactory().get(f"/api/v1/offers/?{query}", **headers))

    assert picked(ContentNegotiation(), request, renderers, suffix) == picked(
        DefaultContentNegotiation(), request, renderers, suffix
    )
