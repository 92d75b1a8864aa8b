from django import forms

from computeshare.forms import StyledFormMixin


class BudgetForm(StyledFormMixin, forms.Form):
    monthly_limit = forms.DecimalField(
        max_digits=14,
        decimal_places=2,
        min_value=0,
        required=False,
        label="Monthly limit",
        help_text="Empty for no limit. New bids and purchases past it are refused.",
    )
    alert_thresholds = forms.CharField(
        max_length=60,
        required=False,
        label="Alert thresholds (per cent)",
        help_text="Comma-separated, for example 50, 80, 100. Admins are mailed once a month each.",
    )

    def clean_alert_thresholds(self) -> list[int]:
        raw = self.cleaned_data["alert_thresholds"]
        try:
            return [int(part) for part in raw.replace(" ", "").split(",") if part]
        except ValueError as error:
            raise forms.ValidationError("Whole numbers from 1 to 100, comma-separated.") from error
