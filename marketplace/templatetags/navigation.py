"""The site header's wallet: a member sees the money available to the organization the page is
about (or their first one), with the navigation's Money item pointing at its page."""

from typing import Any

from django import template
from django.http import HttpRequest

from marketplace import selectors

register = template.Library()

_NOT_READ = object()


@register.simple_tag
def navigation_wallet(request: HttpRequest | None) -> selectors.NavigationWallet | None:
    """Read once per request (an error page rendered after a view, or a fragment, asks again):
    one query at most, none for visitors."""
    if request is None or not getattr(request.user, "is_authenticated", False):
        return None
    cached: Any = getattr(request, "_navigation_wallet", _NOT_READ)
    if cached is _NOT_READ:
        match = request.resolver_match
        organization = (match.kwargs.get("organization_id") if match else None) or (
            request.GET.get("organization")
        )
        cached = selectors.navigation_wallet_get(request.user, organization)  # type: ignore[arg-type]
        request._navigation_wallet = cached  # type: ignore[attr-defined]
    return cached  # type: ignore[no-any-return]
