from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from computeshare.health import healthz, status_page
from computeshare.views import favicon

api_v1: list[URLPattern | URLResolver] = [
    path("", include("organizations.api_urls")),
    path("", include("portal.api_urls")),
    path("", include("marketplace.api_urls")),
    path("", include("billing.api_urls")),
    path("", include("scheduler_bridge.api_urls")),
    path("", include("notifications.api_urls")),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("status/", status_page, name="status"),
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("", include("organizations.urls")),
    path("", include("billing.urls")),
    path("", include("portal.urls")),
    path("", include("marketplace.urls")),
    path("", include("scheduler_bridge.urls")),
    path("", include("notifications.urls")),
]

handler400 = "computeshare.views.bad_request"
handler404 = "computeshare.views.not_found"
handler500 = "computeshare.views.server_error"
