"""Error pages: JSON under /api/, HTML elsewhere."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

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
