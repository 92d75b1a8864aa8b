"""Error pages: JSON under /api/, HTML elsewhere; the favicon at the address browsers ask for
without a link tag (/favicon.ico)."""

from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.shortcuts import render
from django.templatetags.static import static
from django.views import defaults

from computeshare.api import json_not_found, json_server_error


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return json_not_found(request)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return json_server_error(request)
    return render(request, "500.html", status=500)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's own refusals (a body past DATA_UPLOAD_MAX_MEMORY_SIZE, too many fields, a host
    not in ALLOWED_HOSTS): in the API's error shape under /api/."""
    if _is_api(request):
        body = {"detail": "The request is malformed.", "code": "malformed_request", "extra": {}}
        return JsonResponse(body, status=400)
    return defaults.bad_request(request, exception)


def favicon(request: HttpRequest) -> HttpResponse:
    """Pages without the base template's link tag (the API's JSON, a file) still make the
    browser ask for /favicon.ico: it is the static one, not a 404 in the log."""
    return HttpResponsePermanentRedirect(static("favicon.ico"))
