"""Staff see wallets, holds, transactions, top-ups, refunds, disputes, debts, payouts and
Stripe events, all read-only: money changes only through services. The writes are "Post an
adjustment", a new balanced transaction with a memo (`services.wallet_adjust`), never an edit,
and "Refund" on a top-up (`services.top_up_refund`), which asks Stripe; the wallet is debited
when Stripe's `charge.refunded` arrives."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from billing import selectors, services
from billing.models import (
    Account,
    Budget,
    BudgetAlert,
    ConnectedAccount,
    Debt,
    Dispute,
    Entry,
    Hold,
    Payout,
    StripeEvent,
    TopUp,
    TopUpRefund,
    Transaction,
)
from computeshare.authentication import request_user
from computeshare.errors import ApplicationError
from computeshare.numbers import MICRO_PLACES
from organizations.models import Organization


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class AdjustmentForm(forms.Form):
    # The organization itself, not its wallet account: accounts open on the first money
    # movement, so a new organization has none until then and could not be chosen.
    organization = forms.ModelChoiceField(
        queryset=Organization.objects.order_by("name"), label="Organization"
    )
    amount = forms.DecimalField(
        max_digits=20,
        decimal_places=MICRO_PLACES,
        help_text="Positive credits the wallet's available balance; negative takes money back.",
    )
    memo = forms.CharField(max_length=255, help_text="Why. It shows on the statement.")


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "kind", "balance", "currency", "updated_at")
    list_filter = ("kind",)
    search_fields = ("organization__name", "uuid")
    list_select_related = ("organization",)


class EntryInline(admin.TabularInline):
    model = Entry
    extra = 0
    can_delete = False
    fields = ("account", "kind", "amount", "balance_after", "created_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Transaction)
class TransactionAdmin(ReadOnlyAdmin):
    list_display = ("uuid", "kind", "organization", "reference_kind", "memo", "created_at")
    list_filter = ("kind", "reference_kind")
    search_fields = ("uuid", "organization__name", "idempotency_reference", "reference", "memo")
    list_select_related = ("organization",)
    inlines = [EntryInline]
    change_list_template = "admin/billing/transaction/change_list.html"

    def get_urls(self) -> list[URLPattern]:
        adjustment = path(
            "adjustment/",
            self.admin_site.admin_view(self.adjustment_view),
            name="billing_transaction_adjustment",
        )
        return [adjustment, *super().get_urls()]

    def adjustment_view(self, request: HttpRequest) -> HttpResponse:
        if not request.user.has_perm("billing.add_transaction"):
            messages.error(request, "Posting adjustments needs the billing.add_transaction right.")
            return HttpResponseRedirect(reverse("admin:billing_transaction_changelist"))
        form = AdjustmentForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                posted = services.wallet_adjust(
                    organization=form.cleaned_data["organization"],
                    amount=form.cleaned_data["amount"],
                    memo=form.cleaned_data["memo"],
                    actor=request_user(request),
                )
            except ApplicationError as error:
                form.add_error(None, error.detail)
            else:
                messages.success(request, f"Adjustment {posted.uuid} posted.")
                return HttpResponseRedirect(
                    reverse("admin:billing_transaction_change", args=[posted.pk])
                )
        context = {
            **self.admin_site.each_context(request),
            "title": "Post an adjustment",
            "form": form,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/billing/adjustment.html", context)


@admin.register(Hold)
class HoldAdmin(ReadOnlyAdmin):
    list_display = ("uuid", "organization", "status", "amount", "placed", "captured", "released")
    list_filter = ("status", "reference_kind")
    search_fields = ("uuid", "organization__name", "reference")
    list_select_related = ("organization",)


class RefundForm(forms.Form):
    amount = forms.DecimalField(
        max_digits=14,
        decimal_places=2,
        required=False,
        help_text="Leave empty to refund everything not refunded yet.",
    )
    reason = forms.CharField(max_length=255, help_text="Why. The team sees it on its statement.")


@admin.register(TopUp)
class TopUpAdmin(ReadOnlyAdmin):
    list_display = (
        "uuid",
        "organization",
        "amount",
        "amount_refunded",
        "currency",
        "status",
        "created_at",
    )
    list_filter = ("status",)
    search_fields = ("uuid", "organization__name", "payment_intent")
    list_select_related = ("organization",)
    exclude = ("client_secret",)
    change_form_template = "admin/billing/topup/change_form.html"

    def get_urls(self) -> list[URLPattern]:
        refund = path(
            "<int:top_up_id>/refund/",
            self.admin_site.admin_view(self.refund_view),
            name="billing_topup_refund",
        )
        return [refund, *super().get_urls()]

    def refund_view(self, request: HttpRequest, top_up_id: int) -> HttpResponse:
        top_up = TopUp.objects.select_related("organization").filter(pk=top_up_id).first()
        if top_up is None:
            raise Http404("No such top-up.")
        back = reverse("admin:billing_topup_change", args=[top_up.pk])
        if not request.user.has_perm("billing.add_topuprefund"):
            messages.error(request, "Refunding needs the billing.add_topuprefund right.")
            return HttpResponseRedirect(back)
        form = RefundForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                refund = services.top_up_refund(
                    top_up=top_up,
                    actor=request_user(request),
                    amount=form.cleaned_data["amount"],
                    reason=form.cleaned_data["reason"],
                )
            except ApplicationError as error:
                form.add_error(None, f"{error.detail} ({error.code})")
            else:
                messages.success(
                    request,
                    f"Stripe refunded {refund.amount} {top_up.currency} ({refund.stripe_refund}); "
                    "the wallet is debited when Stripe's charge.refunded arrives.",
                )
                return HttpResponseRedirect(back)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Refund top-up {top_up.uuid}",
            "form": form,
            "top_up": top_up,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/billing/refund.html", context)


@admin.register(TopUpRefund)
class TopUpRefundAdmin(ReadOnlyAdmin):
    list_display = ("uuid", "top_up", "amount", "status", "stripe_refund", "created_by")
    list_filter = ("status",)
    search_fields = ("uuid", "stripe_refund", "top_up__organization__name")
    list_select_related = ("top_up__organization", "created_by")


@admin.register(Dispute)
class DisputeAdmin(ReadOnlyAdmin):
    list_display = ("stripe_dispute", "top_up", "amount", "status", "is_withdrawn", "created_at")
    list_filter = ("status",)
    search_fields = ("stripe_dispute", "top_up__organization__name")
    list_select_related = ("top_up__organization",)


@admin.register(Debt)
class DebtAdmin(ReadOnlyAdmin):
    """Organizations that owe the platform (a refund or lost dispute their wallet could not
    cover). A top-up repays it; so does a positive adjustment, to forgive it."""

    list_display = ("organization", "owed", "currency", "updated_at")
    search_fields = ("organization__name",)

    @admin.display(description="Owed")
    def owed(self, debt: Debt) -> Any:
        return -debt.balance

    def get_queryset(self, request: HttpRequest) -> QuerySet[Debt]:
        return selectors.debt_list()


@admin.register(ConnectedAccount)
class ConnectedAccountAdmin(ReadOnlyAdmin):
    list_display = ("organization", "stripe_account", "status", "payouts_enabled", "updated_at")
    list_filter = ("status",)
    search_fields = ("organization__name", "stripe_account")
    list_select_related = ("organization",)


@admin.register(Payout)
class PayoutAdmin(ReadOnlyAdmin):
    list_display = ("uuid", "organization", "amount", "currency", "status", "stripe_transfer")
    list_filter = ("status",)
    search_fields = ("uuid", "organization__name", "stripe_transfer")
    list_select_related = ("organization",)


@admin.register(StripeEvent)
class StripeEventAdmin(ReadOnlyAdmin):
    list_display = ("event_id", "type", "deliveries", "outcome", "received_at", "processed_at")
    list_filter = ("type",)
    search_fields = ("event_id",)


@admin.register(Budget)
class BudgetAdmin(ReadOnlyAdmin):
    list_display = ("organization", "monthly_limit", "alert_thresholds", "updated_at")
    search_fields = ("organization__name",)


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyAdmin):
    list_display = ("organization", "period", "threshold", "notified_at", "dismissed_at")
    list_filter = ("threshold",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[BudgetAlert]:
        return super().get_queryset(request).select_related("organization")
