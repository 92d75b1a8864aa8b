"""The money pages through Django's test client: who sees what on the money page, the budget
form and its errors, budget alerts, the monthly statement (page and CSV) and an owner's
earnings. The browser test walks the top-up in Chromium."""

import csv
import datetime
import io
import uuid
from decimal import ROUND_HALF_UP, Decimal
from html.parser import HTMLParser
from typing import Any

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from billing import selectors, services
from billing.models import Budget, BudgetAlert, Hold, ReferenceKind, TopUp, Transaction
from billing.selectors import month_start
from organizations.models import Membership
from tests.factories import MembershipFactory, OrganizationFactory, allocation_bought

pytestmark = pytest.mark.django_db

CENT = Decimal("0.01")


# --- Reading the HTML ----------------------------------------------------------------------


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: "Node | None") -> None:
        self.tag = tag
        self.attrs = attrs
        self.parent = parent
        self.children: list[Node | str] = []

    @property
    def classes(self) -> list[str]:
        return self.attrs.get("class", "").split()

    def text(self) -> str:
        parts = [c if isinstance(c, str) else c.text() for c in self.children]
        return " ".join(" ".join(parts).split())

    def find_all(self, tag: str | None = None, css_class: str | None = None, **attrs: str):
        found = []
        for child in self.children:
            if isinstance(child, str):
                continue
            if (
                (tag is None or child.tag == tag)
                and (css_class is None or css_class in child.classes)
                and all(child.attrs.get(name.replace("_", "-")) == v for name, v in attrs.items())
            ):
                found.append(child)
            found += child.find_all(tag, css_class, **attrs)
        return found

    def find(self, tag: str | None = None, css_class: str | None = None, **attrs: str):
        found = self.find_all(tag, css_class, **attrs)
        return found[0] if found else None

    def by_id(self, element_id: str) -> "Node | None":
        return self.find(id=element_id)


class _TreeBuilder(HTMLParser):
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("document", {}, None)
        self.current = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {name: value or "" for name, value in attrs}, self.current)
        self.current.children.append(node)
        if tag not in self.VOID:
            self.current = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.current.children.append(
            Node(tag, {name: value or "" for name, value in attrs}, self.current)
        )

    def handle_endtag(self, tag: str) -> None:
        node: Node | None = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data: str) -> None:
        self.current.children.append(data)


def html(response: Any) -> Node:
    builder = _TreeBuilder()
    builder.feed(response.content.decode())
    builder.close()
    return builder.root


def field_block(document: Node, name: str) -> tuple[Node, list[str]]:
    """The input of the form field `name` and the errors shown beside it."""
    field = document.by_id(f"id_{name}")
    assert field is not None, f"no field {name}"
    assert field.parent is not None
    return field, [error.text() for error in field.parent.find_all(css_class="invalid-feedback")]


def cents(amount: Decimal) -> str:
    """An amount as the pages show it: rounded half up to the cent, with thousands grouped."""
    return f"{amount.quantize(CENT, rounding=ROUND_HALF_UP):,.2f}"


# --- Fixtures and helpers ----------------------------------------------------------------


def money_url(organization: Any) -> str:
    return reverse("organization-money", args=[organization.uuid])


def statement_url(organization: Any, year: int, month: int) -> str:
    return reverse("organization-statement", args=[organization.uuid, year, month])


def backdate(transactions: list[Transaction], moment: datetime.datetime) -> None:
    """Moves whole transactions (and their entries) back to `moment`, a second apart in the
    order given. Entries are append-only in the database, so the trigger is switched off for
    the update, inside the test's transaction (rolled back with it); the deferred foreign-key
    checks run first, as PostgreSQL alters no table with pending trigger events."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE billing_entry DISABLE TRIGGER billing_entry_append_only")
        for offset, posted in enumerate(transactions):
            when = moment + datetime.timedelta(seconds=offset)
            cursor.execute(
                "UPDATE billing_entry SET created_at = %s WHERE transaction_id = %s",
                [when, posted.pk],
            )
            cursor.execute(
                "UPDATE billing_transaction SET created_at = %s WHERE id = %s", [when, posted.pk]
            )
        cursor.execute("ALTER TABLE billing_entry ENABLE TRIGGER billing_entry_append_only")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def hold_transaction(hold: Hold) -> Transaction:
    return Transaction.objects.get(hold=hold, kind=Transaction.Kind.HOLD)


# --- The money page ----------------------------------------------------------------------


def test_the_money_page_needs_a_login(client, team):
    response = client.get(money_url(team.organization))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_an_outsider_gets_404(client, team):
    client.force_login(team.outsider)

    response = client.get(money_url(team.organization))

    assert response.status_code == 404
    assert b"Quantum Lab" not in response.content


def test_a_member_sees_the_wallet_and_budget_but_not_the_ledger_or_forms(client, team):
    services.wallet_credit(
        organization=team.organization, amount=Decimal("1234.5"), idempotency_reference="t-1"
    )
    client.force_login(team.member)

    response = client.get(money_url(team.organization))

    assert response.status_code == 200
    page = html(response)
    assert page.by_id("wallet-available").text() == "1,234.50 USD"
    assert page.by_id("wallet-held").text() == "0.00 USD"
    assert page.by_id("budget-summary").text() == "No limit"
    for admin_only in ("ledger", "top-ups", "top-up-form", "budget-form", "earnings"):
        assert page.by_id(admin_only) is None, admin_only
    assert "Only an admin of Quantum Lab can top up, set the budget and read the ledger." in (
        page.text()
    )
    assert not page.find_all("script", src=response.context["stripe_js_url"])
    assert "entries" not in response.context


def test_an_admin_sees_the_ledger_top_ups_and_the_forms(client, team):
    services.wallet_credit(
        organization=team.organization, amount=Decimal("80.00"), idempotency_reference="t-1"
    )
    hold = services.hold_place(
        organization=team.organization, amount=Decimal("12.5"), reference_kind=ReferenceKind.BID
    )
    client.force_login(team.admin)

    response = client.get(money_url(team.organization))

    assert response.status_code == 200
    page = html(response)
    assert page.by_id("wallet-available").text() == "67.50 USD"
    assert page.by_id("wallet-held").text() == "12.50 USD"
    assert page.by_id("top-up-form") is not None
    assert page.by_id("budget-form") is not None
    rows = page.by_id("ledger").find("tbody").find_all("tr")
    # Newest first: the hold's two entries, then the top-up.
    assert [row.find_all("td")[2].text() for row in rows] == ["Hold", "Hold", "Top-up"]
    amounts = sorted(Decimal(row.find_all("td")[3].find("span").attrs["title"]) for row in rows)
    assert amounts == [
        Decimal("-12.5"),
        Decimal("12.5"),
        Decimal("80"),
    ]
    assert page.by_id("top-ups").text().endswith("No top-ups yet.")
    assert page.find_all("script", src=response.context["stripe_js_url"])
    assert hold.is_open


# --- The budget form ---------------------------------------------------------------------


@pytest.fixture
def budget(team) -> Budget:
    return services.budget_set(
        organization=team.organization, monthly_limit=Decimal("250.00"), alert_thresholds=[50, 80]
    )


def test_the_budget_form_shows_the_current_budget(client, team, budget):
    client.force_login(team.admin)

    page = html(client.get(money_url(team.organization)))

    assert page.by_id("id_monthly_limit").attrs["value"] == "250.00"
    assert page.by_id("id_alert_thresholds").attrs["value"] == "50, 80"
    assert page.by_id("budget-summary").text() == "0.00 of 250.00 USD"


def test_an_admin_saves_a_valid_budget(client, team, budget):
    client.force_login(team.admin)

    response = client.post(
        money_url(team.organization),
        {"monthly_limit": "1200.50", "alert_thresholds": "90, 25,75"},
    )

    assert response.status_code == 302
    assert response["Location"] == money_url(team.organization)
    budget.refresh_from_db()
    assert budget.monthly_limit == Decimal("1200.50")
    assert budget.alert_thresholds == [25, 75, 90]
    assert Budget.objects.count() == 1
    page = client.get(response["Location"])
    assert "The budget is saved." in html(page).text()
    assert html(page).by_id("budget-summary").text() == "0.00 of 1,200.50 USD"


def test_an_empty_limit_means_no_limit(client, team, budget):
    client.force_login(team.admin)

    response = client.post(
        money_url(team.organization), {"monthly_limit": "", "alert_thresholds": "100"}
    )

    assert response.status_code == 302
    budget.refresh_from_db()
    assert budget.monthly_limit is None
    assert budget.alert_thresholds == [100]


@pytest.mark.parametrize(
    ("limit", "thresholds", "field", "message"),
    [
        ("300", "abc", "alert_thresholds", "Whole numbers from 1 to 100, comma-separated."),
        ("300", "50, 0", "alert_thresholds", "Each threshold is a whole per cent, 1 to 100."),
        ("300", "101", "alert_thresholds", "Each threshold is a whole per cent, 1 to 100."),
        ("-5", "50", "monthly_limit", "Ensure this value is greater than or equal to 0."),
        ("1.234", "50", "monthly_limit", "Ensure that there are no more than 2 decimal places."),
        ("lots", "50", "monthly_limit", "Enter a number."),
    ],
)
def test_bad_budget_input_is_shown_beside_the_field_and_changes_nothing(
    client, team, budget, limit, thresholds, field, message
):
    client.force_login(team.admin)
    before = Budget.objects.values().get()

    response = client.post(
        money_url(team.organization), {"monthly_limit": limit, "alert_thresholds": thresholds}
    )

    assert response.status_code == 400
    page = html(response)
    invalid, errors = field_block(page, field)
    assert errors == [message]
    assert "is-invalid" in invalid.classes
    assert invalid.attrs["value"] == (limit if field == "monthly_limit" else thresholds)
    other = "alert_thresholds" if field == "monthly_limit" else "monthly_limit"
    valid, no_errors = field_block(page, other)
    assert no_errors == []
    assert "is-invalid" not in valid.classes
    assert "The budget is saved." not in page.text()
    assert Budget.objects.values().get() == before
    # The rest of the page is still there for the admin.
    assert page.by_id("ledger") is not None
    assert page.by_id("wallet-available").text() == "0.00 USD"


def test_a_member_cannot_change_the_budget(client, team, budget):
    client.force_login(team.member)

    response = client.post(
        money_url(team.organization), {"monthly_limit": "1", "alert_thresholds": "50"}
    )

    assert response.status_code == 403
    budget.refresh_from_db()
    assert budget.monthly_limit == Decimal("250.00")


# --- Budget alerts -----------------------------------------------------------------------


@pytest.fixture
def alert(team) -> BudgetAlert:
    services.budget_set(
        organization=team.organization,
        monthly_limit=Decimal("100.00"),
        alert_thresholds=[50, 80, 100],
    )
    services.wallet_credit(
        organization=team.organization, amount=Decimal("100"), idempotency_reference="t-1"
    )
    services.hold_place(
        organization=team.organization, amount=Decimal("60"), reference_kind=ReferenceKind.BID
    )
    return BudgetAlert.objects.get()


def test_a_budget_alert_is_shown_and_an_admin_dismisses_it(client, team, alert):
    client.force_login(team.admin)
    period = month_start().strftime("%B %Y")

    page = html(client.get(money_url(team.organization)))

    shown = page.find_all(css_class="budget-alert")
    assert len(shown) == 1
    assert shown[0].text() == (
        f"Quantum Lab reached 50% of its budget for {period}: "
        "60.00 of 100.00 USD committed and spent. Dismiss"
    )
    assert "alert-warning" in shown[0].classes
    assert shown[0].find("button", name="dismiss_alert").attrs["value"] == str(alert.uuid)
    assert page.by_id("budget-summary").text() == "60.00 of 100.00 USD"

    response = client.post(money_url(team.organization), {"dismiss_alert": str(alert.uuid)})

    assert response.status_code == 302
    assert response["Location"] == money_url(team.organization)
    alert.refresh_from_db()
    assert alert.dismissed_at is not None
    assert html(client.get(money_url(team.organization))).find_all(css_class="budget-alert") == []
    # The budget itself is untouched by the dismissal.
    assert Budget.objects.get().monthly_limit == Decimal("100.00")


def test_a_dismissal_that_names_no_alert_of_the_organization_dismisses_nothing(client, team, alert):
    other = OrganizationFactory(name="Other Lab")
    others_alert = BudgetAlert.objects.create(
        organization=other,
        period=alert.period,
        threshold=80,
        monthly_limit=Decimal("10.00"),
        committed_and_spent=Decimal("9"),
    )
    client.force_login(team.admin)

    malformed = client.post(money_url(team.organization), {"dismiss_alert": "not-a-uuid"})
    foreign = client.post(money_url(team.organization), {"dismiss_alert": str(others_alert.uuid)})

    assert malformed.status_code == 404
    assert foreign.status_code == 302
    assert BudgetAlert.objects.filter(dismissed_at__isnull=False).count() == 0


def test_a_member_sees_the_alert_but_cannot_dismiss_it(client, team, alert):
    client.force_login(team.member)

    page = html(client.get(money_url(team.organization)))
    response = client.post(money_url(team.organization), {"dismiss_alert": str(alert.uuid)})

    shown = page.find_all(css_class="budget-alert")
    assert len(shown) == 1
    assert "reached 50% of its budget" in shown[0].text()
    assert shown[0].find("button") is None
    assert response.status_code == 403
    alert.refresh_from_db()
    assert alert.dismissed_at is None


# --- Statements --------------------------------------------------------------------------


@pytest.fixture
def owner(db):
    owner = OrganizationFactory(name="Aurora Owners")
    admin = MembershipFactory(organization=owner, role=Membership.Role.ADMIN).user
    return owner, admin


@pytest.fixture
def month_of_money(team, owner):
    """Last month: a top-up of 1000 and a hold of 100. This month: a top-up of 500, a hold of
    40, a capture of 12.345678 from the first hold (paid to the owner) and a release of 7.645
    of the second."""
    payer = team.organization
    payee, _ = owner
    first = services.wallet_credit(
        organization=payer, amount=Decimal("1000.00"), idempotency_reference="t-last-month"
    )
    first_hold = services.hold_place(
        organization=payer, amount=Decimal("100.00"), reference_kind=ReferenceKind.ALLOCATION
    )
    this_month = month_start()
    backdate([first, hold_transaction(first_hold)], this_month - datetime.timedelta(days=3))

    services.wallet_credit(
        organization=payer, amount=Decimal("500.00"), idempotency_reference="t-this-month"
    )
    second_hold = services.hold_place(
        organization=payer, amount=Decimal("40.00"), reference_kind=ReferenceKind.BID
    )
    services.hold_capture(
        hold=first_hold,
        amount=Decimal("12.345678"),
        payee=payee,
        idempotency_reference="t-capture",
        source_name="Aurora",
    )
    services.hold_release(hold=second_hold, amount=Decimal("7.645"))
    assert selectors.ledger_verify() == []
    return this_month


EXPECTED_THIS_MONTH = [
    ("available", "top_up", Decimal("500.00")),
    ("available", "hold", Decimal("-40.00")),
    ("held", "hold", Decimal("40.00")),
    ("held", "charge", Decimal("-12.345678")),
    ("held", "release", Decimal("-7.645")),
    ("available", "release", Decimal("7.645")),
]
EXACT = {
    "available": {
        "opening": Decimal("900.00"),
        "top_up": Decimal("500.00"),
        "hold": Decimal("-40.00"),
        "release": Decimal("7.645"),
        "closing": Decimal("1367.645"),
    },
    "held": {
        "opening": Decimal("100.00"),
        "hold": Decimal("40.00"),
        "charge": Decimal("-12.345678"),
        "release": Decimal("-7.645"),
        "closing": Decimal("120.009322"),
    },
    "earnings": {"opening": Decimal("0"), "closing": Decimal("0")},
}


def statement_figures(page: Node) -> dict[str, dict[str, tuple[str, Decimal]]]:
    """Per account, per data-field: the shown text and the exact amount in its title."""
    figures: dict[str, dict[str, tuple[str, Decimal]]] = {}
    for table in page.by_id("statement-summary").find_all("table"):
        figures[table.attrs["data-account"]] = {
            cell.attrs["data-field"]: (cell.text(), Decimal(cell.find("span").attrs["title"]))
            for cell in table.find_all("td")
            if "data-field" in cell.attrs
        }
    return figures


def test_the_statement_csv_has_every_entry_and_adds_up_to_the_closing_balances(
    client, team, month_of_money
):
    client.force_login(team.admin)
    year, month = month_of_money.year, month_of_money.month

    page_response = client.get(statement_url(team.organization, year, month))
    csv_response = client.get(statement_url(team.organization, year, month), {"format": "csv"})

    assert csv_response.status_code == 200
    assert csv_response["Content-Type"] == "text/csv; charset=utf-8"
    assert csv_response["Content-Disposition"] == (
        f'attachment; filename="computeshare-quantum-lab-{year:04d}-{month:02d}.csv"'
    )
    rows = list(csv.DictReader(io.StringIO(csv_response.content.decode())))
    assert len(rows) == len(EXPECTED_THIS_MONTH)
    assert sorted((r["account"], r["kind"], Decimal(r["amount"])) for r in rows) == sorted(
        EXPECTED_THIS_MONTH
    )
    assert all(r["currency"] == "USD" for r in rows)
    created = [datetime.datetime.fromisoformat(r["created_at"]) for r in rows]
    assert created == sorted(created)
    assert all(month_of_money <= moment < timezone.now() for moment in created)
    capture = next(r for r in rows if r["kind"] == "charge")
    assert capture["amount"] == "-12.345678"
    assert capture["reference_kind"] == "job"
    assert capture["memo"] == ""

    figures = statement_figures(html(page_response))
    for account in ("available", "held", "earnings"):
        mine = [r for r in rows if r["account"] == account]
        opening, closing = figures[account]["opening"][1], figures[account]["closing"][1]
        assert opening == EXACT[account]["opening"], account
        assert closing == EXACT[account]["closing"], account
        # Opening plus the month's CSV amounts is the closing balance, to the millionth, and
        # each row's balance_after is the running balance.
        running = opening
        for row in mine:
            running += Decimal(row["amount"])
            assert Decimal(row["balance_after"]) == running, (account, row)
        assert opening + sum((Decimal(r["amount"]) for r in mine), Decimal(0)) == closing
    assert selectors.wallet_get(team.organization).available == EXACT["available"]["closing"]
    assert selectors.wallet_get(team.organization).held == EXACT["held"]["closing"]


def test_the_statement_page_rounds_the_exact_figures_to_the_cent(client, team, month_of_money):
    client.force_login(team.admin)
    year, month = month_of_money.year, month_of_money.month

    response = client.get(statement_url(team.organization, year, month))

    assert response.status_code == 200
    page = html(response)
    assert page.find("h1").text() == f"Statement for {month_of_money:%B %Y}"
    figures = statement_figures(page)
    assert set(figures) == {"available", "held", "earnings"}
    for account, fields in EXACT.items():
        assert set(figures[account]) == set(fields), account
        for name, exact in fields.items():
            shown, title = figures[account][name]
            assert title == exact, (account, name)
            assert shown == cents(exact), (account, name, shown)
    # Half a cent rounds up, as money does, not to the even cent.
    assert figures["available"]["closing"][0] == "1,367.65"
    assert figures["available"]["release"][0] == "7.65"
    assert figures["held"]["release"][0] == "-7.65"
    assert figures["held"]["closing"][0] == "120.01"
    entries = page.by_id("statement-entries").find("tbody").find_all("tr")
    assert len(entries) == len(EXPECTED_THIS_MONTH)
    shown_amounts = sorted(
        Decimal(row.find_all("td")[-1].find("span").attrs["title"]) for row in entries
    )
    assert shown_amounts == sorted(amount for _, _, amount in EXPECTED_THIS_MONTH)
    assert page.by_id("statement-csv").attrs["href"] == (
        statement_url(team.organization, year, month) + "?format=csv"
    )


def test_last_and_next_month_statements_chain_their_balances(client, team, month_of_money):
    client.force_login(team.admin)
    last = month_of_money - datetime.timedelta(days=1)
    following = month_of_money + datetime.timedelta(days=32)

    last_page = html(client.get(statement_url(team.organization, last.year, last.month)))
    next_response = client.get(statement_url(team.organization, following.year, following.month))
    last_csv = client.get(
        statement_url(team.organization, last.year, last.month), {"format": "csv"}
    )

    earlier = statement_figures(last_page)
    assert earlier["available"]["opening"][1] == 0
    assert earlier["available"]["closing"][1] == EXACT["available"]["opening"]
    assert earlier["held"]["closing"][1] == EXACT["held"]["opening"]
    assert len(list(csv.DictReader(io.StringIO(last_csv.content.decode())))) == 3
    assert next_response.status_code == 200
    later = statement_figures(html(next_response))
    for account in ("available", "held", "earnings"):
        assert later[account]["opening"][1] == EXACT[account]["closing"]
        assert later[account]["closing"][1] == EXACT[account]["closing"]
    assert "No money moved this month." in html(next_response).text()


def test_the_money_page_links_the_months_with_entries(client, team, month_of_money):
    client.force_login(team.admin)
    last = month_of_money - datetime.timedelta(days=1)

    page = html(client.get(money_url(team.organization)))

    links = [a.attrs["href"] for a in page.find_all("a") if "/statements/" in a.attrs["href"]]
    assert links == [
        statement_url(team.organization, month_of_money.year, month_of_money.month),
        statement_url(team.organization, last.year, last.month),
    ]


def test_a_member_gets_403_on_the_statement_and_an_outsider_404(client, team):
    now = timezone.localtime()
    url = statement_url(team.organization, now.year, now.month)

    client.force_login(team.member)
    member_page = client.get(url)
    member_csv = client.get(url, {"format": "csv"})
    client.force_login(team.outsider)
    outsider_page = client.get(url)

    assert member_page.status_code == 403
    assert member_csv.status_code == 403
    assert b"created_at" not in member_csv.content
    assert outsider_page.status_code == 404


@pytest.mark.parametrize(
    ("name", "disposition"),
    [
        ('Lab "Zero"; x=1', 'attachment; filename="computeshare-lab-zero-x1-{period}.csv"'),
        ("Lab\nTwo", 'attachment; filename="computeshare-lab-two-{period}.csv"'),
        (
            "Ünïcode Lab",
            "attachment; filename*=utf-8''computeshare-%C3%BCn%C3%AFcode-lab-{period}.csv",
        ),
        ("!!!", 'attachment; filename="computeshare-organization-{period}.csv"'),
    ],
)
def test_the_csv_file_name_is_safe_whatever_the_organization_is_called(client, name, disposition):
    organization = OrganizationFactory(name=name)
    admin = MembershipFactory(organization=organization, role=Membership.Role.ADMIN).user
    client.force_login(admin)
    now = timezone.localtime()

    response = client.get(statement_url(organization, now.year, now.month), {"format": "csv"})

    assert response.status_code == 200
    assert response["Content-Disposition"] == disposition.format(period=f"{now:%Y-%m}")
    assert response.content.decode().splitlines() == [
        "created_at,transaction,account,kind,amount,balance_after,currency,reference_kind,"
        "reference,memo"
    ]


@pytest.mark.parametrize(("year", "month"), [(2025, 13), (2025, 0), (1999, 12), (2999, 1)])
def test_a_month_that_does_not_exist_is_404(client, team, year, month):
    client.force_login(team.admin)

    response = client.get(statement_url(team.organization, year, month))

    assert response.status_code == 404


# --- Earnings ----------------------------------------------------------------------------


def test_the_owner_sees_gross_fee_and_net_of_a_capture_paid_to_it(
    client, team, owner, month_of_money
):
    payee, payee_admin = owner
    client.force_login(payee_admin)

    page = html(client.get(money_url(payee)))

    rows = page.by_id("earnings").find("tbody").find_all("tr")
    assert len(rows) == 1
    cells = rows[0].find_all("td")
    assert [cell.text() for cell in cells] == [
        f"{month_of_money:%b %Y}",
        "Aurora",
        "12.35",
        "1.23",
        "11.11",
    ]
    assert [Decimal(cell.find("span").attrs["title"]) for cell in cells[2:]] == [
        Decimal("12.345678"),
        Decimal("1.234568"),
        Decimal("11.111110"),
    ]
    assert selectors.wallet_get(payee).earnings == Decimal("11.111110")
    # The payer earned nothing: no earnings table on its page.
    client.force_login(team.admin)
    assert html(client.get(money_url(team.organization))).by_id("earnings") is None


def test_a_jobs_charges_are_one_statement_line_with_its_entries_behind_it(client, team):
    # An array of three tasks, each charged as it ended, as the settlement does.
    allocation = allocation_bought(team.organization, quantity=10, price="2.00")
    job = uuid.uuid4()
    for task, amount in enumerate(("0.000049", "0.000049", "0.000050")):
        services.hold_capture(
            hold=allocation.hold,
            amount=amount,
            payee=allocation.cluster.organization,
            idempotency_reference=f"test-job-{job}-{task}",
            reference=job,
            memo=f"task {task}",
        )
    today = timezone.now()
    client.force_login(team.admin)

    page = html(client.get(statement_url(team.organization, today.year, today.month)))

    lines = page.by_id("statement-entries").find("tbody").find_all("tr")
    charged = [line for line in lines if line.attrs.get("data-job") == str(job)]
    assert len(charged) == 1
    cells = charged[0].find_all("td")
    assert [cell.text() for cell in cells[1:3]] == ["Held", "Charge"]
    assert cells[3].text() == f"Job {str(job)[:8]}"
    assert cells[3].find("a").attrs["href"] == reverse("job-detail", args=[job])
    assert cells[-1].find("span").attrs["title"] == "-0.000148"
    details = charged[0].find(data_field="line-entries")
    assert details.find("summary").text().startswith("3 entries")
    assert len(details.find_all("li")) == 3
    # The totals say what the entries are in words.
    held = page.find(data_account="held")
    assert "Charge" in [row.find("td").text() for row in held.find_all("tr") if row.find("td")]


def test_the_money_pages_latest_entries_show_a_jobs_charges_as_one_line(client, team):
    allocation = allocation_bought(team.organization, quantity=10, price="2.00")
    job = uuid.uuid4()
    for task in range(40):  # more tasks than the table has lines
        services.hold_capture(
            hold=allocation.hold,
            amount="0.000049",
            payee=allocation.cluster.organization,
            idempotency_reference=f"test-job-{job}-{task}",
            reference=job,
            memo=f"Job sweep (123_{task} on hpc1)",
        )
    client.force_login(team.admin)

    page = html(client.get(money_url(team.organization)))

    rows = page.by_id("ledger").find("tbody").find_all("tr")
    charged = [row for row in rows if row.attrs.get("data-job") == str(job)]
    assert len(charged) == 1
    cells = charged[0].find_all("td")
    assert cells[2].text() == "Charge"
    assert cells[3].find("span").attrs["title"] == "-0.00196"
    assert cells[5].find(data_field="line-entries").find("summary").text() == (
        "Job sweep (123_39 on hpc1): 40 entries (an array's tasks, each charged as it ended)"
    )
    # The hold placed at the purchase and the funding are lines of their own below it.
    assert [row.find_all("td")[2].text() for row in rows] == [
        "Charge",
        "Hold",
        "Hold",
        "Adjustment",
    ]


def test_the_top_ups_table_shows_each_status_in_words(client, team):
    """Issue 30: "Pending" and "Expired", the labels of the model's choices, never the values."""
    for status in (TopUp.Status.EXPIRED, TopUp.Status.PENDING):
        TopUp.objects.create(
            organization=team.organization,
            created_by=team.admin,
            amount=Decimal("25.00"),
            currency="USD",
            status=status,
        )
    client.force_login(team.admin)

    page = html(client.get(money_url(team.organization)))

    rows = page.by_id("top-ups").find("tbody").find_all("tr")
    assert [row.find("span", css_class="badge").text() for row in rows] == ["Pending", "Expired"]
