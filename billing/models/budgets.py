"""An organization's monthly budget and the alerts of the thresholds it crossed (the rules are
`billing/services/budgets.py`'s)."""

from django.db import models
from django.db.models import Q

from billing.models.ledger import money_field
from computeshare.models import BaseModel


class Budget(BaseModel):
    """An organization's monthly spending limit (none: no limit) and alert thresholds."""

    organization = models.OneToOneField(
        "organizations.Organization", on_delete=models.CASCADE, related_name="budget"
    )
    monthly_limit = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    alert_thresholds = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(monthly_limit__isnull=True) | Q(monthly_limit__gte=0),
                name="budget_limit_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"Budget of {self.organization}"


DEFAULT_ALERT_THRESHOLDS = [50, 80, 100]


class BudgetAlert(BaseModel):
    """A threshold crossed in a month: at most one per organization, month and threshold, which
    is what makes the admins' mail go once. Shown on the organization's money page until an
    admin dismisses it."""

    organization = models.ForeignKey(
        "organizations.Organization", on_delete=models.CASCADE, related_name="budget_alerts"
    )
    period = models.DateField(help_text="The first day of the month.")
    threshold = models.PositiveSmallIntegerField()
    monthly_limit = models.DecimalField(max_digits=14, decimal_places=2)
    committed_and_spent = money_field()
    notified_at = models.DateTimeField(null=True, blank=True)
    dismissed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-period", "-threshold"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "period", "threshold"],
                name="budget_alert_once_per_month",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.organization}: {self.threshold}% of {self.period:%Y-%m}"
