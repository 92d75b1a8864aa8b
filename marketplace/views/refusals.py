"""A service's refusal as the pages show it: beside the field it concerns, or on top of
the form with the figures that explain it (a 402 names the balance or the budget it
ran into). A refusal by role (403) is left to the error page."""

from django import forms

from computeshare.errors import ApplicationError, Conflict, PaymentRequired, ValidationFailed
from computeshare.figures import amount_text
from computeshare.forms import form_add_service_error
from marketplace import errors

# Refusals that are not input errors but concern one field all the same.
FIELD_OF_REFUSAL = {
    "insufficient_quantity": "quantity",
    "max_per_buyer_exceeded": "quantity",
    "cluster_not_online": "cluster",
}
# What a page catches and shows on the form; any other refusal (by role: 403) reaches the
# error page through the middleware.
SHOWN_ON_FORM = (ValidationFailed, Conflict, PaymentRequired, errors.ClusterUnreachable)


def refusal_text(error: ApplicationError) -> str:
    """The service's sentence, with the figures from `extra` that let the user act on it."""
    extra = error.extra
    try:
        if error.code == "insufficient_funds":
            currency = extra["currency"]
            return (
                f"{error.detail} Available: {amount_text(extra['available'])} {currency}; "
                f"this needs {amount_text(extra['required'])} {currency}."
            )
        if error.code == "budget_exceeded":
            currency = extra["currency"]
            return (
                f"{error.detail} Monthly limit: {amount_text(extra['monthly_limit'])} {currency}; "
                f"committed and spent: {amount_text(extra['committed_and_spent'])} {currency}; "
                f"this needs {amount_text(extra['requested'])} {currency}."
            )
        if error.code == "insufficient_quantity":
            return f"Only {extra['remaining']} units are left for sale."
        if error.code in ("reservation_refused", "cluster_unreachable"):
            return f"{error.detail} The cluster said: {extra['reason']}"
        if error.code == "tenant_accounts_exhausted":
            return (
                f"{error.detail} This cluster serves up to {extra['tenant_accounts']} teams at "
                f"once and {extra['free']} accounts are free now: try again when one frees."
            )
        if error.code == "partition_capacity_exceeded":
            shown = [
                f"{hour['start'][:13].replace('T', ' ')}:00 ({hour['sold']} of "
                f"{hour['capacity']} sold, this asks {hour['asked']})"
                for hour in extra["hours"][:6]
            ]
            more = extra["hour_count"] - len(shown)
            return f"{error.detail} Hours that clash (UTC): {'; '.join(shown)}" + (
                f"; and {more} more." if more > 0 else "."
            )
        if error.code == "max_per_buyer_exceeded":
            return (
                f"{error.detail} The cap is {extra['max_per_buyer']} units; your organization "
                f"has {extra['already']} already."
            )
    except KeyError:
        pass
    return error.detail


def form_add_refusal(form: forms.Form, error: ApplicationError) -> None:
    if isinstance(error, ValidationFailed):
        form_add_service_error(form, error)
        return
    field = FIELD_OF_REFUSAL.get(error.code)
    form.add_error(field if field in form.fields else None, refusal_text(error))
