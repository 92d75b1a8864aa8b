"""Form helpers shared by the web pages."""

from typing import Any

from django import forms


class StyledFormMixin:
    """Gives every widget Bootstrap's classes and marks fields with errors as invalid, so that
    templates can render `{{ field }}` and show each error beside its field."""

    fields: dict[str, forms.Field]
    errors: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        for field in self.fields.values():
            widget = field.widget
            css = "form-select" if isinstance(widget, forms.Select) else "form-control"
            if isinstance(widget, forms.CheckboxInput):
                css = "form-check-input"
            widget.attrs["class"] = f"{widget.attrs.get('class', '')} {css}".strip()

    def full_clean(self) -> None:
        super().full_clean()  # type: ignore[misc]
        for name in self.errors:
            if name in self.fields:
                widget = self.fields[name].widget
                widget.attrs["class"] = f"{widget.attrs.get('class', '')} is-invalid".strip()
                widget.attrs["aria-invalid"] = "true"
