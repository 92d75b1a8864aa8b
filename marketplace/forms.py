from django import forms
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm

from computeshare.forms import StyledFormMixin
from computeshare.models import User
from marketplace.models import Membership


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
