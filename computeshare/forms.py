"""Form helpers shared by the web pages."""

from typing import Any

from django import forms

from computeshare.errors import ApplicationError, ValidationFailed


class StyledFormMixin:
    """Gives every widget Bootstrap's classes and marks fields with errors as invalid, so that
    templates can render `{{ field }}` and show each error beside its field."""

    fields: dict[str, forms.Field]
    errors: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            widget = field.widget
            css = "form-select" if isinstance(widget, forms.Select) else "form-control"
            if isinstance(widget, forms.CheckboxInput):
                css = "form-check-input"
            widget.attrs["class"] = f"{widget.attrs.get('class', '')} {css}".strip()

    def add_error(self, field: str | None, error: Any) -> None:
        # Every error passes here, from the form's own cleaning and from services' refusals.
        super().add_error(field, error)  # type: ignore[misc]
        for name in self.errors:
            widget = self.fields[name].widget if name in self.fields else None
            if widget is not None and "is-invalid" not in widget.attrs.get("class", ""):
                widget.attrs["class"] = f"{widget.attrs.get('class', '')} is-invalid".strip()


def form_add_service_error(form: forms.Form, error: ApplicationError) -> None:
    """Puts a service's refusal beside the fields it names, or on top of the form."""
    fields = error.extra.get("fields", {}) if isinstance(error, ValidationFailed) else {}
    placed = False
    for name, field_messages in fields.items():
        target = name if name in form.fields else None
        for message in field_messages:
            form.add_error(target, message)
            placed = True
    if not placed:
        form.add_error(None, error.detail)
