"""Template filters of the job pages: units, durations and efficiencies as the pages show
them, and whether the demo's local jobs run sandboxed on this machine."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from django import template
from django.utils import timezone

from computeshare import figures
from hpc.backends.local import SandboxStatus
from marketplace.models import Cluster
from marketplace.templatetags.market import units
from scheduler_bridge.job_reasons import reason_text
from scheduler_bridge.models import Job, JobTask
from scheduler_bridge.services.backends import local_sandbox as local_sandbox_now

register = template.Library()
# The market's filter, under the same name on the job pages.
register.filter("units", units)


@register.filter
def reason_words(reason: str, exit_code: int | None = None) -> str:
    """A state's reason in words (a history row's): `NonZeroExitCode` is "Exited with code 3"."""
    return reason_text(reason or "", exit_code)


@register.filter
def duration(seconds: int | float | Decimal | None) -> str:
    """`2h 05m 09s`, `5m 09s` or `9s`."""
    total = max(0, int(seconds or 0))
    hours, rest = divmod(total, 3600)
    minutes, remainder = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {remainder:02d}s"
    if minutes:
        return f"{minutes}m {remainder:02d}s"
    return f"{remainder}s"


@register.filter
def elapsed(job: Job | JobTask) -> str:
    """What accounting metered of a job or an array's task once there is usage; while it runs
    and nothing was metered yet, how long it has run so far; `under 1s` when it ran for less
    than the whole second accounting counts. Empty before it starts."""
    if job.elapsed_seconds:
        return duration(job.elapsed_seconds)
    if job.started_at is None:
        return ""
    if not job.is_ended:
        return f"{duration((timezone.now() - job.started_at).total_seconds())} so far"
    return "under 1s"


@register.filter
def percent(fraction: Decimal | None) -> str:
    """A fraction from 0 to 1 as `50.0 %`; empty when there is none (a job not yet ended). The
    rule is computeshare/figures.py's, which the CLI's writes the same way."""
    return "" if fraction is None else figures.percent_text(fraction)


@register.filter
def on_local_backend(value: Cluster | Iterable[Job] | None) -> bool:
    """Whether a cluster, or any job of a list, runs on the local backend (the demo's)."""
    if value is None:
        return False
    if isinstance(value, Cluster):
        return value.backend == Cluster.Backend.LOCAL
    return any(job.cluster.backend == Cluster.Backend.LOCAL for job in value)


@register.simple_tag
def local_sandbox() -> SandboxStatus:
    """How local jobs run on this machine: sandboxed with bubblewrap or not, and why not."""
    return local_sandbox_now()


@register.filter
def mebibytes(size: int | None) -> str:
    """Bytes as MiB to the hundredth (`1.5`, `812.25`)."""
    if size is None:
        return ""
    mib = (Decimal(size) / (1024 * 1024)).quantize(Decimal("0.01"))
    return f"{mib.normalize():f}"
