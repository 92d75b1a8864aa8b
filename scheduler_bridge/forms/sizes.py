"""The pages' fields for a job's sizes, built from their one declaration (`hpc.sizes.LIMITS`),
so that a page refuses what the API refuses."""

from __future__ import annotations

from typing import Any

from django import forms

from computeshare.numbers import WholeNumberFormField
from hpc.sizes import SizeLimit


def size_field(
    limit: SizeLimit, label: str, *, placeholder: str | None = None, **options: Any
) -> forms.IntegerField:
    """A whole number within `limit`; optional, with `placeholder` saying what an empty field
    means (the script's line, else the default), unless `placeholder` is None."""
    attributes = {"min": str(limit.minimum), "step": "1"}
    if placeholder is not None:
        attributes["placeholder"] = placeholder
        options.setdefault("required", False)
    return WholeNumberFormField(
        label=label,
        min_value=limit.minimum,
        max_value=limit.maximum,
        widget=forms.NumberInput(attrs=attributes),
        **options,
    )
