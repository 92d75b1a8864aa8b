"""The pages' pager, and where a small form sends the user back."""

from django.http import HttpRequest
from django.utils.http import url_has_allowed_host_and_scheme

PAGE_SIZE = 50


def next_url(request: HttpRequest, default: str) -> str:
    """Where a small POST form sends the user back: its `next` when it is on this site."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


def page_query(request: HttpRequest, page_parameter: str = "page") -> str:
    """The query string without the page number, for the pager's links."""
    query = request.GET.copy()
    query.pop(page_parameter, None)
    return query.urlencode()
