"""The REST API of the market (an organization's money: billing.api; an organization's own
endpoints and webhooks: organizations.api)."""
