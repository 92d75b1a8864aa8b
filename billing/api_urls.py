from django.urls import path

from billing import api

urlpatterns = [
    path("billing/stripe/webhook/", api.StripeWebhookApi.as_view(), name="api-stripe-webhook"),
]
