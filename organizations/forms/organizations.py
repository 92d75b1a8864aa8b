from django import forms
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm

from computeshare import services as computeshare_services
from computeshare.forms import StyledFormMixin
from computeshare.models import User
from organizations.models import Membership


class SignUpForm(StyledFormMixin, UserCreationForm):
    email = forms.EmailField(required=True, help_text="For notices about your organizations.")

    class Meta(UserCreationForm.Meta):
        model = User
        fields = ("username", "email")


class LoginForm(StyledFormMixin, AuthenticationForm):
    pass


class OrganizationForm(StyledFormMixin, forms.Form):
    name = forms.CharField(max_length=120, label="Organization name")


class MemberAddForm(StyledFormMixin, forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.MEMBER)


class ApiTokenForm(StyledFormMixin, forms.Form):
    name = forms.CharField(
        max_length=computeshare_services.NAME_MAX_LENGTH,
        help_text="What uses it, to tell your tokens apart.",
    )
    expires_in_days = forms.TypedChoiceField(
        label="Expires",
        choices=[
            ("", "Never"),
            ("7", "In 7 days"),
            ("30", "In 30 days"),
            ("90", "In 90 days"),
            ("365", "In a year"),
        ],
        coerce=int,
        empty_value=None,
        required=False,
        initial="90",
    )
