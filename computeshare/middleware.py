from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from computeshare.errors import ApplicationError, NotFound


class ApplicationErrorMiddleware:
    """Answers the web pages' uncaught service refusals: `NotFound` with the 404 page, any other
    refusal with the error page and its own status (the API renders its own through DRF)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, NotFound):
            return render(request, "404.html", status=404)
        if isinstance(exception, ApplicationError) and exception.status_code < 500:
            return render(request, "error.html", {"error": exception}, status=exception.status_code)
        return None
