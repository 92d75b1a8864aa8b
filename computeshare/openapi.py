"""What the endpoints share in their OpenAPI description."""

from drf_spectacular.utils import OpenApiParameter

from computeshare.api import ErrorSerializer

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="Replays the first answer for the same key and body; 409 for another body.",
)
PAGE_PARAMETERS = [
    OpenApiParameter("page", int, OpenApiParameter.QUERY, required=False),
    OpenApiParameter(
        "page_size",
        {"type": "integer", "minimum": 1, "maximum": 200},
        OpenApiParameter.QUERY,
        required=False,
        description="From 1 to 200; 50 when not given.",
    ),
]
# A bad page size is 400, a page past the end 404.
LIST_ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 404: ErrorSerializer}
ERRORS = {
    400: ErrorSerializer,
    401: ErrorSerializer,
    403: ErrorSerializer,
    404: ErrorSerializer,
    409: ErrorSerializer,
}
