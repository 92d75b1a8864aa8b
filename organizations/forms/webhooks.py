"""The form of an organization's webhook endpoint on its pages."""

from django import forms

from computeshare.forms import StyledFormMixin
from webhooks.models import EventType


class WebhookEndpointForm(StyledFormMixin, forms.Form):
    url = forms.CharField(
        label="URL",
        max_length=2000,
        help_text="Where the events are posted: an https:// address on the public internet.",
    )
    description = forms.CharField(max_length=500, required=False)
    events = forms.MultipleChoiceField(
        choices=EventType.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text="The events sent to this address.",
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        # Checkboxes are laid out by Bootstrap's form-check, not styled as one control.
        self.fields["events"].widget.attrs["class"] = "form-check-input"
