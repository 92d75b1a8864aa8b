"""The REST API of the market, and of the money of organizations: an organization's wallet,
budget, top-ups, ledger and payouts live here, above billing, and call billing's services and
selectors (organizations' own endpoints: organizations.api)."""
