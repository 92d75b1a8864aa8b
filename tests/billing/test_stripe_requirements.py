"""Stripe's requirement names in words: the known ones from the table, people's details by
whose and what they are, and any other spelled out; each thing to do once."""

import pytest

from billing.stripe_requirements import requirement_words, requirements_in_words


@pytest.mark.parametrize(
    ("name", "words"),
    [
        (
            "business_type",
            "Say what kind of business the organization is (a company, an individual…)",
        ),
        ("tos_acceptance.date", "Accept Stripe's terms of service"),
        ("external_account", "Add the bank account that payouts go to"),
        ("business_profile.url", "Give the organization's website"),
        ("individual.dob.day", "Give your date of birth"),
        ("individual.verification.document", "Upload your identity document"),
        ("representative.first_name", "Give the representative's name"),
        ("company.tax_id", "Give the company's tax ID"),
        ("person_1AbC2d.relationship.title", "Give a listed person's job title"),
        ("company.owners_provided", "Confirm that every owner of the company is listed"),
        # Not known here: words still, not a field path.
        ("company.structure", "Stripe asks for: company structure"),
        ("individual.political_exposure", "Stripe asks for: individual political exposure"),
    ],
)
def test_each_requirement_says_what_to_do(name, words):
    assert requirement_words(name) == words


def test_names_that_ask_the_same_thing_are_said_once_in_stripes_order():
    names = [
        "tos_acceptance.date",
        "individual.address.city",
        "individual.address.postal_code",
        "tos_acceptance.ip",
        "individual.first_name",
        "individual.last_name",
    ]

    assert requirements_in_words(names) == [
        "Accept Stripe's terms of service",
        "Give your address",
        "Give your name",
    ]
    assert requirements_in_words([]) == []
