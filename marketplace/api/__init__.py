"""The REST API of organizations, and of the money the marketplace keeps for them: billing
does not know memberships (imports go one way), so the endpoints under /organizations/{id}/
live here and call billing's services and selectors."""
