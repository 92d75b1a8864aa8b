"""The web pages of an organization's money: wallet, top-up with Stripe.js, budget and alerts,
ledger, monthly statements (page and CSV) and an owner's earnings. They call billing's
services and selectors after the membership checks, like the API."""

import datetime
import uuid
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import content_disposition_header
from django.utils.text import slugify
from django.views import View

from billing import selectors as billing_selectors
from billing import services as billing_services
from billing.forms import BudgetForm
from billing.stripe_requirements import requirements_in_words
from computeshare.authentication import request_user
from computeshare.csv_export import csv_writer
from computeshare.errors import ApplicationError, ValidationFailed
from computeshare.figures import amount_text
from computeshare.forms import form_add_service_error
from organizations import selectors as organization_selectors
from organizations.models import Membership

RECENT_ENTRIES = 25


class MoneyView(LoginRequiredMixin, View):
    """Wallet, budget, alerts and top-ups for every member; ledger, statements and earnings,
    and the forms that change money, for admins."""

    template_name = "billing/money.html"

    def _render(
        self,
        request: HttpRequest,
        membership: Membership,
        form: BudgetForm | None = None,
        status: int = 200,
    ) -> HttpResponse:
        """The page; with the budget form bound to `form`, or showing the saved budget."""
        organization = membership.organization
        wallet = billing_selectors.wallet_get(organization)
        budget = billing_selectors.budget_status(organization, wallet)
        if form is None:
            form = BudgetForm(
                initial={
                    "monthly_limit": budget.monthly_limit,
                    "alert_thresholds": ", ".join(str(t) for t in budget.alert_thresholds),
                }
            )
        context: dict[str, Any] = {
            "membership": membership,
            "organization": organization,
            "wallet": wallet,
            "budget": budget,
            "alerts": billing_selectors.budget_alert_list_open(organization),
            "budget_form": form,
            "stripe_js_url": settings.STRIPE_JS_URL,
            "stripe_publishable_key": settings.STRIPE_PUBLISHABLE_KEY,
            "top_up_minimum": settings.TOP_UP_MINIMUM,
            "top_up_maximum": settings.TOP_UP_MAXIMUM,
        }
        if membership.is_admin:
            context["top_ups"] = billing_selectors.top_up_list(organization)[:10]
            # A job's entries of one account and kind are one line, as on statements: read
            # enough entries that an array's tasks do not fill the table on their own.
            entries = billing_selectors.ledger_entry_list(organization)[: RECENT_ENTRIES * 20]
            context["lines"] = billing_selectors.statement_lines(list(entries))[:RECENT_ENTRIES]
            context["months"] = billing_selectors.statement_months(organization)
            context["earnings"] = billing_selectors.earnings_list(organization)
        return render(request, self.template_name, context, status=status)

    def get(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_for_user(
            request_user(request), organization_id
        )
        return self._render(request, membership)

    def post(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        organization = membership.organization
        if "dismiss_alert" in request.POST:
            try:
                alert_uuid = uuid.UUID(request.POST["dismiss_alert"])
            except ValueError as error:
                # Not an alert's id at all: the lookup would fail with a 500.
                raise Http404("No such alert.") from error
            billing_services.budget_alert_dismiss(organization=organization, alert_uuid=alert_uuid)
            return HttpResponseRedirect(request.path)
        form = BudgetForm(request.POST)
        if form.is_valid():
            try:
                billing_services.budget_set(
                    organization=organization,
                    monthly_limit=form.cleaned_data["monthly_limit"],
                    alert_thresholds=form.cleaned_data["alert_thresholds"],
                )
            except ValidationFailed as error:
                form_add_service_error(form, error)
            else:
                messages.success(request, "The budget is saved.")
                return HttpResponseRedirect(request.path)
        return self._render(request, membership, form, status=400)


class StatementView(LoginRequiredMixin, View):
    """A month's statement for admins: per account the opening balance, the totals per kind,
    the closing balance and every entry; `?format=csv` downloads the entries with exact
    amounts."""

    template_name = "billing/statement.html"

    def get(
        self, request: HttpRequest, organization_id: str, year: int, month: int
    ) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        if not (1 <= month <= 12 and 2000 <= year <= timezone.now().year + 1):
            raise Http404("No such month.")
        statement = billing_selectors.statement_build(membership.organization, year, month)
        if request.GET.get("format") == "csv":
            return _statement_csv(statement)
        period = datetime.date(year, month, 1)
        context = {
            "membership": membership,
            "organization": membership.organization,
            "statement": statement,
            "period": period,
            "csv_url": f"{request.path}?format=csv",
            "money_url": reverse("organization-money", args=[membership.organization.uuid]),
        }
        return render(request, self.template_name, context)


def _statement_csv(statement: billing_selectors.Statement) -> HttpResponse:
    # The organization's name is free text: a quote, a semicolon or a newline in it must not
    # reach the header (a newline made Django refuse the header with a 500).
    name = slugify(statement.organization.name, allow_unicode=True) or "organization"
    filename = f"computeshare-{name}-{statement.period_start:%Y-%m}.csv"
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(True, filename)
    writer = csv_writer(response)
    writer.writerow(
        [
            "created_at",
            "transaction",
            "account",
            "kind",
            "amount",
            "balance_after",
            "currency",
            "reference_kind",
            "reference",
            "memo",
        ]
    )
    for entry in statement.entries:
        writer.writerow(
            [
                entry.created_at.isoformat(),
                entry.transaction.uuid,
                entry.account.kind,
                entry.kind,
                entry.amount,
                entry.balance_after,
                entry.account.currency,
                entry.transaction.reference_kind,
                entry.transaction.reference or "",
                entry.transaction.memo,
            ]
        )
    return response


class PayoutsView(LoginRequiredMixin, View):
    """An owner's payouts, for admins: the Stripe account (connect, its status), earnings held
    and payable, the pay-out form and the history. Connecting sends the admin to Stripe's
    onboarding page; Stripe sends them back here."""

    template_name = "billing/payouts.html"
    NOTICES = {
        "returned": (
            "info",
            "Back from Stripe. The account becomes active when Stripe confirms it to us; "
            "this page updates by itself.",
        ),
        "expired": ("warning", "That Stripe link expired or was used already: connect again."),
    }

    def _render(
        self, request: HttpRequest, membership: Membership, error: str = "", status: int = 200
    ) -> HttpResponse:
        organization = membership.organization
        account = billing_selectors.connected_account_get(organization)
        context = {
            "membership": membership,
            "organization": organization,
            "account": account,
            "requirements": requirements_in_words(account.requirements_due if account else []),
            "balance": billing_selectors.payout_balance(organization),
            "payouts": billing_selectors.payout_list(organization)[:50],
            "notice": self.NOTICES.get(request.GET.get("onboarding", "")),
            "awaiting_stripe": request.GET.get("onboarding") == "returned"
            and (account is None or not account.is_active),
            "error": error,
            # A fresh key per page: a form sent twice (a double click, a reload) pays once.
            "payout_key": uuid.uuid4(),
        }
        return render(request, self.template_name, context, status=status)

    def get(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        return self._render(request, membership)

    def post(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        organization = membership.organization
        page = request.build_absolute_uri(reverse("organization-payouts", args=[organization.uuid]))
        try:
            if "connect" in request.POST:
                link = billing_services.connected_account_onboard(
                    organization=organization,
                    actor=request_user(request),
                    return_url=f"{page}?onboarding=returned",
                    refresh_url=f"{page}?onboarding=expired",
                )
                return HttpResponseRedirect(link.url)
            try:
                payout_key = uuid.UUID(request.POST.get("payout_key", ""))
            except ValueError:
                raise ValidationFailed(
                    "This form is out of date: reload the page and pay out again."
                ) from None
            payout = billing_services.payout_create(
                organization=organization,
                actor=request_user(request),
                amount=request.POST.get("amount") or None,
                idempotency_key=f"payouts-page-{payout_key}",
            )
        except ApplicationError as error:
            fields = error.extra.get("fields") or {}
            said = " ".join(message for messages in fields.values() for message in messages)
            return self._render(
                request,
                membership,
                error=f"{error.detail} {said}".strip(),
                status=error.status_code,
            )
        if payout.status == payout.Status.PAID:
            messages.success(
                request, f"{amount_text(payout.amount, payout.currency)} sent to Stripe."
            )
        elif payout.status == payout.Status.PENDING:
            messages.warning(request, "Stripe did not answer; the payout is sent again shortly.")
        else:
            messages.error(request, payout.failure_reason)
        return HttpResponseRedirect(request.path)
