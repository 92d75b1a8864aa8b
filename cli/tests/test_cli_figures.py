"""The CLI writes money and shares as the pages do (computeshare_cli/figures.py): to the cent
with the currency, `< 0.01 USD` with the exact figure beside it, prices with their digits,
shares as `0.4 %`; and the commands that show them use those rules (a fake API here; the
end-to-end tests run the real one)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from click.testing import CliRunner
from computeshare_cli import context, figures
from computeshare_cli.main import cli


@pytest.mark.parametrize(
    ("value", "currency", "text"),
    [
        ("12.345000", "USD", "12.35 USD"),
        ("1200.5", "USD", "1,200.50 USD"),
        ("0.000000", "USD", "0.00 USD"),
        ("0.000095", "USD", "< 0.01 USD (0.000095)"),
        ("-0.000095", "USD", "> -0.01 USD (-0.000095)"),
        ("0.005", None, "0.01"),
        (None, "USD", "-"),
    ],
)
def test_an_amount_is_written_to_the_cent_and_never_as_nothing(value, currency, text):
    assert figures.amount_text(value, currency) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [("0.020000", "0.02 USD"), ("0.012500", "0.0125 USD"), ("3", "3.00 USD")],
)
def test_a_price_keeps_the_digits_it_has(value, text):
    assert figures.price_text(value, "USD") == text


@pytest.mark.parametrize(
    ("value", "text"),
    [("0.0039", "0.4 %"), ("0.002", "0.2 %"), ("1", "100.0 %"), ("0.0001", "< 0.1 %")],
)
def test_a_share_is_a_percentage_with_one_decimal_as_on_the_pages(value, text):
    assert figures.percent_text(value) == text


def test_an_offer_shows_its_price_per_hour_its_total_and_for_a_block_per_day():
    hours = {
        "reserve_price": "0.020000",
        "buy_now_price": None,
        "quantity": "200",
        "quantity_unit": "core-hours",
        "unit_hours": 1,
        "capacity": "preemptible",
        "resource": "cpu",
        "currency": "USD",
    }
    block = {
        **hours,
        "reserve_price": "0.125000",
        "quantity": "2",
        "quantity_unit": "cores",
        "unit_hours": 6,
        "capacity": "reserved",
    }

    assert figures.offer_prices(hours, "reserve_price") == (
        "0.02 USD/core-hour; 4.00 USD for 200 core-hours"
    )
    assert figures.offer_prices(hours, "buy_now_price") == "-"
    assert figures.offer_prices(block, "reserve_price") == (
        "0.125 USD/core-hour; 1.50 USD for 2 cores; 3.00 USD/core/day"
    )


class FakeClient:
    """The API's answers, by path."""

    answers: dict[str, Any] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.answers[path]

    def paginate(self, path: str, params: Any = None, *, limit: int = 50) -> Any:
        return iter(self.answers[path])

    def close(self) -> None:
        pass


JOB = {
    "id": "8c1f0d2a-0000-4000-8000-000000000001",
    "name": "tiny",
    "state": "completed",
    "nodes": 1,
    "ntasks": 1,
    "cpus_per_task": 1,
    "gpus": 0,
    "reserved_units": "0.166667",
    "estimated_max_cost": "0.333334",
    "usage": {"units": "0.000278", "elapsed_seconds": 1},
    "cost": "0.000556",
    "currency": "USD",
    "efficiency": {"cpu": "0.0039"},
    "tasks": [],
    "runs": [],
}
OFFER = {
    "id": "5d2e9c10-0000-4000-8000-000000000002",
    "cluster_name": "aurora-local",
    "partition": "debug",
    "resource": "cpu",
    "capacity": "reserved",
    "remaining": "1",
    "quantity": "1",
    "quantity_unit": "cores",
    "unit_hours": 8,
    "reserve_price": "0.040000",
    "buy_now_price": "0.060000",
    "status": "open",
    "currency": "USD",
}


@pytest.fixture
def runner(monkeypatch, tmp_path) -> CliRunner:
    monkeypatch.setattr(context, "ApiClient", FakeClient)
    monkeypatch.setenv("COMPUTESHARE_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("NO_COLOR", "1")
    FakeClient.answers = {
        f"/jobs/{JOB['id']}/": JOB,
        "/offers/": [OFFER],
        f"/offers/{OFFER['id']}/": OFFER,
        "/me/": {"organizations": [{"id": "o1", "name": "Nimbus"}]},
        "/organizations/o1/": {
            "name": "Nimbus",
            "wallet": {"available": "149.997220", "held": "0.000095", "currency": "USD"},
        },
    }
    return CliRunner()


def lines(output: str) -> list[str]:
    return [" ".join(line.split()) for line in output.splitlines()]


def test_jobs_show_writes_cents_and_the_efficiency_as_the_page_does(runner):
    result = runner.invoke(cli, ["--token", "t", "jobs", "show", JOB["id"]])

    assert result.exit_code == 0, result.output
    shown = lines(result.output)
    assert "at most 0.33 USD" in shown
    assert "cost < 0.01 USD (0.000556)" in shown
    assert "cpu efficiency 0.4 %" in shown


def test_the_wallet_and_an_offer_are_written_in_cents_and_per_hour_total_and_day(runner):
    wallet = runner.invoke(cli, ["--token", "t", "wallet"])
    offer = runner.invoke(cli, ["--token", "t", "offers", "show", OFFER["id"]])

    assert wallet.exit_code == 0, wallet.output
    assert "available 150.00 USD" in lines(wallet.output)
    assert "held < 0.01 USD (0.000095)" in lines(wallet.output)
    assert offer.exit_code == 0, offer.output
    assert "reserve 0.04 USD/core-hour; 0.32 USD for 1 core; 0.96 USD/core/day" in lines(
        offer.output
    )
    assert "buy now 0.06 USD/core-hour; 0.48 USD for 1 core; 1.44 USD/core/day" in lines(
        offer.output
    )


def test_the_json_keeps_every_digit(runner):
    result = runner.invoke(cli, ["--token", "t", "--json", "jobs", "show", JOB["id"]])

    assert result.exit_code == 0
    assert '"cost": "0.000556"' in result.output
    assert Decimal("0.000556") == Decimal(JOB["cost"])
