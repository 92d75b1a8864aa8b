"""The API's fields for a job's sizes, built from their one declaration (`hpc.sizes.LIMITS`):
the bounds the reference states ("at least ...; at most ...") are the limits'."""

from __future__ import annotations

from typing import Any

from computeshare.numbers import WholeNumber
from hpc.sizes import SizeLimit


def size_field(limit: SizeLimit, help_text: str, **options: Any) -> WholeNumber:
    """A whole number within `limit`."""
    return WholeNumber(
        min_value=limit.minimum, max_value=limit.maximum, help_text=help_text, **options
    )


def optional_size(limit: SizeLimit, help_text: str) -> WholeNumber:
    """A size a request may leave out (or give as null): the script's #SBATCH line, else the
    default, gives it then."""
    return size_field(limit, help_text, required=False, allow_null=True, default=None)


def script_or_default_size(limit: SizeLimit, default: str, option: str = "") -> WholeNumber:
    """An optional size of a job's request, said the one way the reference says them all."""
    return optional_size(
        limit,
        f"Optional: left out (or null), the script's #SBATCH line gives it, else {default}. "
        f"sbatch {option or limit.option}.",
    )
