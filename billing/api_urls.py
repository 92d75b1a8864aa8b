from django.urls import path

from billing.api import stripe_webhook as api

urlpatterns = [
    path("billing/stripe/webhook/", api.StripeWebhookApi.as_view(), name="api-stripe-webhook"),
]
