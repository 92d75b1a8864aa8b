"""The offers list reads ids as the database's text: PostgreSQL writes a UUID with hyphens,
SQLite (the platform of `make cluster-check`) as its 32 hex digits, which the API's paths do not
take back (`POST /offers/<id>/buy/` answered 404)."""

import uuid

from marketplace.selectors.offers import _uuid_text


def test_an_id_read_as_text_has_its_hyphens_whichever_database_wrote_it():
    value = uuid.uuid4()
    assert _uuid_text(value.hex) == str(value)
    assert _uuid_text(str(value)) == str(value)
