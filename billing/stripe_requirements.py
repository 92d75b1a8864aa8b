"""What Stripe still needs of a connected account, in words that say what to do.

Stripe names each missing piece by the path of its field in the Account object
(`requirements.currently_due`: `business_type`, `tos_acceptance.date`,
`individual.address.city`, `person_1Abc.dob.day`…). The Payouts page shows the owner's admins
what to do on Stripe's pages instead: the known names from a table, the people's details by
whose they are and what they are, and any name not known here spelled out as words. Several
names can say the same (a city and a postcode are one address): each is shown once. Stripe's
list of names: https://docs.stripe.com/connect/required-verification-information"""

import re

# Whole names.
KNOWN = {
    "business_type": "Say what kind of business the organization is (a company, an individual…)",
    "tos_acceptance.date": "Accept Stripe's terms of service",
    "tos_acceptance.ip": "Accept Stripe's terms of service",
    "external_account": "Add the bank account that payouts go to",
    "business_profile.url": "Give the organization's website",
    "business_profile.mcc": "Choose the organization's industry",
    "business_profile.product_description": "Describe what the organization sells",
    "business_profile.name": "Give the organization's public name",
    "business_profile.support_phone": "Give a support phone number",
    "settings.payments.statement_descriptor": "Choose the name shown on bank statements",
    "company.owners_provided": "Confirm that every owner of the company is listed",
    "company.directors_provided": "Confirm that every director of the company is listed",
    "company.executives_provided": "Confirm that every executive of the company is listed",
    "company.verification.document": "Upload a document that proves the company exists",
}

# A person's or the company's details: what they are, by the start of the field's path.
DETAILS = (
    ("first_name", "name"),
    ("last_name", "name"),
    ("name", "name"),
    ("dob.", "date of birth"),
    ("address.", "address"),
    ("email", "email address"),
    ("phone", "phone number"),
    ("id_number", "ID number"),
    ("ssn_last_4", "last 4 digits of the Social Security number"),
    ("tax_id", "tax ID"),
    ("relationship.title", "job title"),
    ("relationship.", "role in the company"),
    ("verification.additional_document", "second identity document"),
    ("verification.document", "identity document"),
)

WHOSE = (
    (re.compile(r"^individual\."), "your"),
    (re.compile(r"^representative\."), "the representative's"),
    (re.compile(r"^company\."), "the company's"),
    (re.compile(r"^person_[A-Za-z0-9]+\."), "a listed person's"),
)


def requirement_words(name: str) -> str:
    """What to do on Stripe's pages for one of Stripe's requirement names."""
    if name in KNOWN:
        return KNOWN[name]
    for owner, whose in WHOSE:
        found = owner.match(name)
        if found is None:
            continue
        rest = name[found.end() :]
        for start, detail in DETAILS:
            if rest.startswith(start):
                verb = "Upload" if detail.endswith("document") else "Give"
                return f"{verb} {whose} {detail}"
    return _spelled_out(name)


def _spelled_out(name: str) -> str:
    """An unknown name as words: `company.structure` is "Stripe asks for: company structure"."""
    words = " ".join(part for part in re.split(r"[._]+", name) if part)
    return f"Stripe asks for: {words}" if words else "Stripe asks for more details"


def requirements_in_words(names: list[str]) -> list[str]:
    """Each thing to do once, in Stripe's order."""
    return list(dict.fromkeys(requirement_words(name) for name in names))
