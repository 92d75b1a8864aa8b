"""Numbers as clients send them. Digits are ASCII digits wherever a number is read (Python's
`str.isdigit()` is true of "²", which `int()` refuses: a 500; `int()` and `\\d` take "\u0663" as 3,
which could reach sbatch as typed); money and quantities are decimal strings, and a JSON number
for one is a 400 that says what to send. Every refusal changes nothing."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from billing.models import Budget, TopUp
from computeshare.numbers import whole_number
from hpc.arrays import InvalidArray, parse_array
from marketplace.models import Bid, Offer
from scheduler_bridge.models import Job, JobTask
from tests.conftest import client_for
from tests.factories import PartitionFactory, allocation_bought
from tests.marketplace.test_market_api import API, market, offer_body, offer_for_sale

__all__ = ["market"]  # the fixture, used by name

pytestmark = pytest.mark.django_db

SUPERSCRIPT_TWO = "²"
ARABIC_INDIC = "\u0660-\u0663"  # "0-3" in Arabic-Indic digits
DECIMAL_STRING = 'Send this amount as a decimal string, such as "12.50".'
PRICE_STRING = 'Send this price as a decimal string, such as "1.50".'
QUANTITY_STRING = 'Send this quantity as a decimal string, such as "10".'


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("0", 0),
        ("007", 7),
        ("200", 200),
        ("²", None),
        ("\u0663", None),
        ("-1", None),
        ("", None),
        (" 1", None),
        ("1" * 5000, None),
        ("1.0", None),
    ],
)
def test_a_whole_number_is_ascii_digits_only(text, number):
    assert whole_number(text) == number


@pytest.mark.parametrize(
    "expression", ["0-3%²", ARABIC_INDIC, "\u0663", "1,²", "0-3:²", "0-3%\u0662"]
)
def test_the_array_parser_takes_ascii_digits_only(expression):
    with pytest.raises(InvalidArray):
        parse_array(expression)


# --- ?page_size= on every list ---------------------------------------------------------------


def _api_list_paths(organization_id: str) -> list[str]:
    """Every GET path of the API without an id in it, or with only the organization's."""
    paths = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and route.startswith("api/v1/"):
                route = route.replace("<uuid:organization_id>", organization_id)
                if "<" not in route and "^" not in route:
                    paths.append("/" + route)

    walk(get_resolver().url_patterns, "")
    return sorted(set(paths))


def test_page_size_in_other_digits_is_a_400_on_every_list(team):
    client = client_for(team.admin)
    paginated = []
    for path in _api_list_paths(str(team.organization.uuid)):
        answer = client.get(path, {"page_size": "10"})
        is_json = answer.get("Content-Type", "").startswith("application/json")
        if answer.status_code == 200 and is_json and {"count", "next"} <= set(answer.json()):
            paginated.append(path)

    assert len(paginated) >= 8, paginated  # offers, bids, allocations, jobs, ledger, usage...
    for path in paginated:
        for size in (SUPERSCRIPT_TWO, "\u0661\u0660", "1" * 5000, "0", "201", "ten"):
            answer = client.get(path, {"page_size": size})
            assert answer.status_code == 400, (path, size, answer.content)
            assert answer.json()["extra"]["fields"] == {
                "page_size": ["A whole number from 1 to 200, given once."]
            }


# --- Jobs: arrays, ?task=, the estimate --------------------------------------------------------


@pytest.fixture
def allocation(team):
    return allocation_bought(
        team.organization, partition=PartitionFactory(cpus=8, nodes=2, gpus=0), quantity=100
    )


def _job_body(allocation, **changes):
    return {
        "allocation": str(allocation.uuid),
        "name": "sweep",
        "script": "#!/bin/bash\necho hi\n",
        "time_limit_minutes": 60,
        **changes,
    }


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"array": "0-3%²"}, "array"),
        ({"array": ARABIC_INDIC}, "array"),
        ({"array": "0-3%\u0662"}, "array"),
        ({"cpus_per_task": "\u0662"}, "cpus_per_task"),
        ({"time_limit_minutes": "\u0666\u0660"}, "time_limit_minutes"),
        ({"time_limit_minutes": 60.0}, "time_limit_minutes"),
    ],
)
def test_a_job_with_other_digits_is_refused_and_nothing_is_written(
    team, allocation, changes, field
):
    answer = client_for(team.member).post(
        "/api/v1/jobs/", _job_body(allocation, **changes), format="json"
    )

    assert answer.status_code == 400, answer.content
    assert list(answer.json()["extra"]["fields"]) == [field]
    allocation.refresh_from_db()
    assert allocation.reserved == 0
    assert Job.objects.count() == 0 and JobTask.objects.count() == 0


def test_the_job_form_refuses_other_digits_and_reserves_nothing(client, team, allocation):
    client.force_login(team.member)
    data = {
        "name": "sweep",
        "script": "#!/bin/bash\necho hi\n",
        "time_limit_minutes": "60",
        "cpus_per_task": "1",
        "ntasks": "1",
        "nodes": "1",
        "environment": "",
    }

    for changes in ({"array": "0-3%²"}, {"array": ARABIC_INDIC}, {"ntasks": "\u0662"}):
        answer = client.post(reverse("job-submit", args=[allocation.uuid]), {**data, **changes})
        assert answer.status_code == 400, changes
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"array": "0-3%²"}, "Array: The limit after % must be a whole number of at least 1."),
        ({"array": ARABIC_INDIC}, "Array: `\u0660-\u0663` is not an index"),
        ({"cpus_per_task": "\u0662"}, "CPUs per task: Enter a whole number."),
        ({"time_limit_minutes": SUPERSCRIPT_TWO}, "Time limit (minutes): Enter a whole number."),
    ],
)
def test_the_estimate_says_it_cannot_read_other_digits(client, team, allocation, changes, problem):
    client.force_login(team.member)
    sizes = {"time_limit_minutes": "60", "cpus_per_task": "1", "ntasks": "1", "nodes": "1"}

    answer = client.get(reverse("job-estimate", args=[allocation.uuid]), {**sizes, **changes})

    # The estimate is a fragment the form shows as the user types: it answers with the problem
    # in place of the figures.
    assert answer.status_code == 200
    text = answer.content.decode()
    assert problem in text
    assert 'data-field="estimate-units"' not in text


def test_the_output_task_in_other_digits_is_a_400(client, team, allocation):
    job_id = (
        client_for(team.member)
        .post("/api/v1/jobs/", _job_body(allocation, array="0-3"), format="json")
        .json()["id"]
    )
    client.force_login(team.member)

    for task in (SUPERSCRIPT_TWO, "\u0663", "-1", "one"):
        api = client_for(team.member).get(f"/api/v1/jobs/{job_id}/output/", {"task": task})
        page = client.get(reverse("job-output", args=[job_id]), {"task": task})
        assert api.status_code == 400, (task, api.content)
        assert list(api.json()["extra"]["fields"]) == ["task"]
        assert page.status_code == 400, task
    for name in ("tail_bytes",):
        api = client_for(team.member).get(f"/api/v1/jobs/{job_id}/output/", {name: "\u0663"})
        assert api.status_code == 400


# --- Money and quantities are decimal strings --------------------------------------------------


def _raw_post(client, path: str, body: str):
    return client.post(path, body, content_type="application/json")


@pytest.mark.parametrize(
    "body",
    ['{"amount": 12.5}', '{"amount": 12}', '{"amount": 1e309}', '{"amount": -1e309}'],
)
def test_a_top_up_amount_as_a_json_number_is_refused_with_what_to_send(team, body):
    answer = _raw_post(
        client_for(team.admin), f"/api/v1/organizations/{team.organization.uuid}/top-ups/", body
    )

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert answer.json()["extra"]["fields"] == {"amount": [DECIMAL_STRING]}
    assert TopUp.objects.count() == 0


@pytest.mark.parametrize("body", ['{"amount": NaN}', '{"amount": Infinity}'])
def test_nan_and_infinity_are_no_json(team, body):
    answer = _raw_post(
        client_for(team.admin), f"/api/v1/organizations/{team.organization.uuid}/top-ups/", body
    )

    assert answer.status_code == 400
    assert answer.json()["code"] == "malformed_request"
    assert TopUp.objects.count() == 0


@pytest.mark.parametrize(
    "amount", ["NaN", "Infinity", "-inf", "1e309", "\u0661\u0662.\u0665\u0660", "12,50", "½"]
)
def test_a_top_up_amount_string_that_is_no_decimal_is_refused(team, amount):
    answer = client_for(team.admin).post(
        f"/api/v1/organizations/{team.organization.uuid}/top-ups/",
        {"amount": amount},
        format="json",
    )

    assert answer.status_code == 400
    assert list(answer.json()["extra"]["fields"]) == ["amount"]
    assert TopUp.objects.count() == 0


def test_a_budget_limit_is_a_decimal_string(team):
    client = client_for(team.admin)
    path = f"/api/v1/organizations/{team.organization.uuid}/budget/"

    refused = client.put(path, {"monthly_limit": 500, "alert_thresholds": [50]}, format="json")
    refused_threshold = client.put(
        path, {"monthly_limit": "500.00", "alert_thresholds": ["\u0665\u0660"]}, format="json"
    )
    accepted = client.put(
        path, {"monthly_limit": "500.00", "alert_thresholds": [50, "80"]}, format="json"
    )

    assert refused.status_code == 400
    assert refused.json()["extra"]["fields"] == {
        "monthly_limit": ['Send this amount as a decimal string, such as "500.00".']
    }
    assert refused_threshold.status_code == 400
    assert accepted.status_code == 200, accepted.content
    assert accepted.json()["monthly_limit"] == "500.00"
    assert Budget.objects.get(organization=team.organization).monthly_limit == Decimal("500.00")


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"reserve_price": 1.0}, "reserve_price", PRICE_STRING),
        ({"reserve_price": 1}, "reserve_price", PRICE_STRING),
        (
            {"buy_now_price": 2.5},
            "buy_now_price",
            'Send this price as a decimal string, such as "2.00".',
        ),
        ({"quantity": 1000.0}, "quantity", QUANTITY_STRING),
        ({"max_per_buyer": 4e2}, "max_per_buyer", QUANTITY_STRING),
        ({"quantity": "\u0661\u0660\u0660\u0660"}, "quantity", "A whole number of units."),
        ({"reserve_price": "\u0660.\u0660\u0665"}, "reserve_price", "A valid number is required."),
    ],
)
def test_offer_prices_and_quantities_as_json_numbers_are_refused(market, changes, field, message):
    answer = client_for(market.owner_admin).post(
        f"{API}/offers/", offer_body(market, **changes), format="json"
    )

    assert answer.status_code == 400, answer.content
    assert answer.json()["extra"]["fields"] == {field: [message]}
    assert Offer.objects.count() == 0


def test_offer_prices_as_decimal_strings_and_whole_quantities_are_still_taken(market):
    answer = client_for(market.owner_admin).post(
        f"{API}/offers/",
        offer_body(market, reserve_price="0.05", buy_now_price="0.12", quantity="1000"),
        format="json",
    )

    assert answer.status_code == 201, answer.content
    assert answer.json()["reserve_price"] == "0.050000"


@pytest.mark.parametrize("price", [2.5, 2, 1e309])
def test_a_bid_price_as_a_json_number_is_refused(market, price):
    offer = offer_for_sale(market)
    body = json.dumps({"organization": str(market.team.uuid), "quantity": 10})[:-1]

    answer = _raw_post(
        client_for(market.team_admin),
        f"{API}/offers/{offer.uuid}/bids/",
        body + f', "price": {price!r}}}'.replace("inf", "1e309"),
    )

    assert answer.status_code == 400, answer.content
    assert answer.json()["extra"]["fields"] == {"price": [PRICE_STRING]}
    assert Bid.objects.count() == 0
