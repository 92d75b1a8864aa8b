"""Submitting a job from the pages: the form on an allocation (started blank, from a template
or from a past job, with the sizes its use suggests), the live estimate of what it can cost at
most, the script's #SBATCH lines read as they are typed, the quote, and "New job", which finds
the allocation to submit on.

Like the API, they find every object through a selector scoped to the user (what the user may
not see is a 404) and let the services decide; a refusal is shown beside the field it concerns
(the #SBATCH lines beside the script) or on top of the form with the figures that explain it
(`submission_refused`, which the sweep form shares)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
)
from django.shortcuts import render
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters

from computeshare.authentication import request_user
from computeshare.errors import (
    ApplicationError,
    Conflict,
    NotFound,
    PaymentRequired,
    ValidationFailed,
)
from computeshare.forms import form_add_service_error
from hpc.arrays import parse_array
from marketplace import selectors as market_selectors
from marketplace.models import Allocation, Resource
from organizations import selectors as organization_selectors
from organizations.models import Membership
from scheduler_bridge import errors, services
from scheduler_bridge.forms.jobs import JobSizesForm, JobSubmitForm
from scheduler_bridge.job_files import (
    InputUpload,
    input_uploads_check,
)
from scheduler_bridge.job_requests import JobPlan
from scheduler_bridge.job_templates import JobTemplate, job_template_get, job_templates_for
from scheduler_bridge.models import Job
from scheduler_bridge.selectors import jobs as selectors
from scheduler_bridge.sizing import SizingAdvice

# Refusals of a submission that concern the whole form: shown on top of it, with their status.
SHOWN_ON_FORM = (PaymentRequired, Conflict)
# Refusals of the input files: shown beside their field.
INPUT_FILE_ERRORS = (
    errors.InputFileNameInvalid,
    errors.TooManyInputFiles,
    errors.InputFilesTooLarge,
)


# --- Figures --------------------------------------------------------------------------------------


def has_gpus(allocation: Allocation) -> bool:
    return allocation.resource == Resource.GPU or allocation.partition.gpus > 0


# --- Submitting a job --------------------------------------------------------------------------


# What the estimate reads when the page sends no script: a script without directives.
_NO_DIRECTIVES = "#!/bin/sh\n"


def job_reading(
    allocation: Allocation, sizes: JobSizesForm, script: str = ""
) -> tuple[JobPlan | None, int, str]:
    """The job the form describes so far: its sizes read with its script's #SBATCH lines, the
    number of its tasks; or, while it cannot be read, why (the first problem)."""
    if not sizes.is_valid():
        field, problems = next(iter(sizes.errors.items()))
        label = sizes.fields[field].label if field in sizes.fields else ""
        return None, 0, f"{label}: {problems[0]}" if label else str(problems[0])
    request = sizes.job_request(script=script.replace("\r\n", "\n") or _NO_DIRECTIVES)
    try:
        plan = services.job_plan(allocation, request)
    except errors.ScriptRefused as error:
        return None, 0, f"Script: {error.detail}"
    except ValidationFailed as error:
        fields = error.extra.get("fields") or {}
        name, messages_ = next(iter(fields.items()), ("", [error.detail]))
        label = sizes.fields[name].label if name in sizes.fields else name
        return None, 0, f"{label}: {messages_[0]}" if label else messages_[0]
    task_count = len(parse_array(plan.array).indices) if plan.array else 1
    return plan, task_count, ""


def job_estimate(
    allocation: Allocation, sizes: JobSizesForm, script: str = ""
) -> selectors.Estimate:
    """The estimate of the job typed so far; while it cannot be read, why there is no figure."""
    plan, task_count, problem = job_reading(allocation, sizes, script)
    if plan is None:
        return selectors.job_estimate(allocation=allocation, problem=problem)
    return selectors.job_estimate(allocation=allocation, size=plan.size, task_count=task_count)


def active_allocation(request: HttpRequest, allocation_id: Any) -> tuple[Allocation, Membership]:
    """The allocation with the user's membership of its organization; a 404 to outsiders and
    for an allocation whose window is not open (no job can run on it)."""
    allocation = market_selectors.allocation_get_for_user(request_user(request), allocation_id)
    if allocation.status != Allocation.Status.ACTIVE:
        raise NotFound("No such active allocation.")
    actor = organization_selectors.membership_in(request_user(request), allocation.organization_id)
    assert actor is not None  # an allocation is visible only to its members
    return allocation, actor


def script_of(form: JobSubmitForm) -> str:
    """The script the form shows now (the typed one, or the initial one)."""
    if form.is_bound:
        return str(form.data.get("script") or "")
    return str(form.get_initial_for_field(form.fields["script"], "script") or "")


def sizes_of(allocation: Allocation, form: JobSubmitForm) -> JobSizesForm:
    """The sizes the form shows now (the typed ones, or the initial ones), for the estimate."""
    if form.is_bound:
        data: Any = form.data
    else:
        data = {
            name: form.get_initial_for_field(field, name) for name, field in form.fields.items()
        }
    return JobSizesForm(data, has_gpus=has_gpus(allocation))


def refusal_text(error: ApplicationError) -> str:
    """The service's sentence, with the dates that explain a closed window."""
    if isinstance(error, errors.AllocationNotActive):
        start, end = error.extra.get("window_start"), error.extra.get("window_end")
        if isinstance(start, datetime) and isinstance(end, datetime):
            return f"{error.detail} Window: {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC."
    return error.detail


def submission_refused(
    form: forms.Form,
    error: ApplicationError,
    beside: Mapping[str, tuple[type[ApplicationError], ...]],
) -> str | None:
    """Puts a refused submission where its page shows it, the job's and the sweep's alike:
    beside the page's own field (`beside`: field -> the refusals shown there, such as the input
    files' or the table's), the script's refusals beside the script, a field's refusal beside
    that field, and then returns None; a refusal of the allocation (`SHOWN_ON_FORM`) goes on
    top of the form: its sentence is returned. Any other refusal is raised again."""
    for field, kinds in beside.items():
        if isinstance(error, kinds):
            form.add_error(field, error.detail)
            return None
    if isinstance(error, errors.ScriptRefused):
        form.add_error("script", error.detail)
        return None
    if isinstance(error, ValidationFailed):
        form_add_service_error(form, error)
        return None
    if isinstance(error, SHOWN_ON_FORM):
        return refusal_text(error)
    raise error


@dataclass(frozen=True)
class FormStart:
    """Where the submit form starts from: a past job (`?from=`, "resubmit a copy"), a ready
    template (`?template=`), or the blank form; and the sizes the use of that job (or of the
    team's last run of that template) suggests, applied when `?sized=1`."""

    initial: dict[str, Any]
    source: Job | None = None
    template: JobTemplate | None = None
    advice_job: Job | None = None
    advice: SizingAdvice | None = None
    is_sized: bool = False
    problem: str = ""

    @property
    def suggested(self) -> dict[str, int]:
        return self.advice.suggested_sizes if self.advice is not None else {}


def environment_text(environment: dict[str, str]) -> str:
    """A job's variables as the form's `NAME=value` lines."""
    return "\n".join(f"{name}={value}" for name, value in environment.items())


def form_start(request: HttpRequest, allocation: Allocation) -> FormStart:
    initial: dict[str, Any] = {"gpus": 1} if allocation.resource == Resource.GPU else {}
    source: Job | None = None
    template: JobTemplate | None = None
    if source_id := request.GET.get("from"):
        source = selectors.job_get_for_user(request_user(request), source_id)
        if source.organization_id != allocation.organization_id or source.is_from_tenant:
            raise NotFound("No such job to copy.")
        initial = {
            "script": source.script,
            **requested_fields(source),
            "environment": environment_text(source.environment),
            "template": source.template,
        }
        template = job_template_get(source.template) if source.template else None
        advice_job: Job | None = source
    elif slug := request.GET.get("template"):
        template = job_template_get(slug)
        if template is None:
            raise NotFound("No such template.")
        if template.needs_gpus and not has_gpus(allocation):
            return FormStart(
                initial=initial,
                problem=f"The template {template.title} needs GPUs, and "
                f"{allocation.partition.name} has none: it is offered on allocations of "
                "partitions with GPUs.",
            )
        # Its sizes are its script's #SBATCH lines, which fill the fields as any script does.
        initial = {
            "script": template.script,
            "environment": environment_text(template.environment),
            "template": template.slug,
        }
        advice_job = selectors.job_latest_sized(allocation.organization_id, template=template.slug)
    else:
        return FormStart(initial=initial)
    advice = selectors.job_sizing_advice(advice_job) if advice_job is not None else None
    is_sized = request.GET.get("sized") == "1" and advice is not None
    if is_sized and advice is not None:
        initial.update(advice.suggested_sizes)
    return FormStart(
        initial=initial,
        source=source,
        template=template,
        advice_job=advice_job if advice is not None else None,
        advice=advice,
        is_sized=is_sized,
    )


# The fields a copy of a job takes from it when its request gave them (the script gives the
# others again), as the form names them.
_REQUESTED_FIELDS = ("name", "time_limit_minutes", "cpus_per_task", "ntasks", "nodes", "gpus")


def requested_fields(job: Job) -> dict[str, Any]:
    """The sizes a job's request gave (not its script, not the defaults): what a copy's form
    starts with beside the same script. A job from before scripts were read gave them all."""
    report = job.directives or {}
    sources = {each["field"]: each["source"] for each in report.get("effective", [])}
    values: dict[str, Any] = {"name": job.name, **job.size.columns(), "array": job.array}
    if not sources:
        return values
    fields = {name for name in _REQUESTED_FIELDS if sources.get(name) == "request"}
    if sources.get("memory") == "request":
        fields.add("mem_per_cpu")
    if sources.get("array") == "request":
        fields.add("array")
    return {name: value for name, value in values.items() if name in fields}


@method_decorator(sensitive_post_parameters("secret_environment"), name="post")
class JobSubmitView(LoginRequiredMixin, View):
    template_name = "jobs/submit.html"

    def _render(
        self,
        request: HttpRequest,
        allocation: Allocation,
        form: JobSubmitForm,
        *,
        refusal: str = "",
        status: int = 200,
        start: FormStart | None = None,
    ) -> HttpResponse:
        context = {
            "allocation": allocation,
            "organization": allocation.organization,
            "form": form,
            "estimate": job_estimate(allocation, sizes_of(allocation, form), script_of(form)),
            "refusal": refusal or (start.problem if start else ""),
            "currency": settings.PLATFORM_CURRENCY,
            "start": start,
            "job_templates": job_templates_for(has_gpus=has_gpus(allocation)),
            "partition_has_gpus": has_gpus(allocation),
        }
        return render(request, self.template_name, context, status=status)

    def _form(
        self,
        allocation: Allocation,
        data: Any = None,
        files: Any = None,
        initial: dict[str, Any] | None = None,
    ) -> JobSubmitForm:
        if initial is None:
            initial = {"gpus": 1} if allocation.resource == Resource.GPU else {}
        return JobSubmitForm(data, files, has_gpus=has_gpus(allocation), initial=initial)

    def get(self, request: HttpRequest, allocation_id: str) -> HttpResponse:
        allocation, _ = active_allocation(request, allocation_id)
        start = form_start(request, allocation)
        form = self._form(allocation, initial=start.initial)
        return self._render(request, allocation, form, start=start)

    def post(self, request: HttpRequest, allocation_id: str) -> HttpResponse:
        allocation, actor = active_allocation(request, allocation_id)
        form = self._form(allocation, request.POST, request.FILES)
        if not form.is_valid():
            return self._render(request, allocation, form, status=400)
        uploads = [
            InputUpload(name=upload.name or "", upload=upload)
            for upload in form.cleaned_data.get("input_files") or []
        ]
        try:
            input_uploads_check(uploads)
            job = services.job_submit(
                actor=actor, allocation=allocation, request=form.job_request(), input_files=uploads
            )
        except ApplicationError as error:
            refusal = submission_refused(form, error, beside={"input_files": INPUT_FILE_ERRORS})
            if refusal is not None:
                # Refusals of the allocation, not of a field: the allocation's figures have
                # changed, so the page is drawn again from a fresh read.
                allocation, _ = active_allocation(request, allocation_id)
            return self._render(
                request, allocation, form, refusal=refusal or "", status=error.status_code
            )
        # Said once, without the state: the page's state card follows the job from here, and a
        # message saying "queued" stayed on top of it after the job had ended.
        messages.success(
            request,
            f"{job.name} is submitted: it reserves {job.reserved_units.normalize():f} units of "
            "the allocation until it ends.",
        )
        return HttpResponseRedirect(reverse("job-detail", args=[job.uuid]))


@method_decorator(never_cache, name="dispatch")
@method_decorator(sensitive_post_parameters("secret_environment"), name="post")
class JobDirectivesView(LoginRequiredMixin, View):
    """The script's #SBATCH lines as the platform reads them, beside the form, fetched again
    as the script or a size is typed: what is honoured, what is overridden and why, the
    values the script gives (the page fills the fields not typed in with them), and the
    estimate of the whole job (swapped in beside it)."""

    def post(self, request: HttpRequest, allocation_id: str) -> HttpResponse:
        allocation, _ = active_allocation(request, allocation_id)
        sizes = JobSizesForm(request.POST, has_gpus=has_gpus(allocation))
        script = str(request.POST.get("script") or "")
        plan, task_count, problem = job_reading(allocation, sizes, script)
        estimate = (
            selectors.job_estimate(allocation=allocation, size=plan.size, task_count=task_count)
            if plan is not None
            else selectors.job_estimate(allocation=allocation, problem=problem)
        )
        context = {
            "allocation": allocation,
            "plan": plan,
            "problem": problem,
            "report": plan.report if plan is not None else None,
            "script_values": script_values(plan) if plan is not None else {},
            "estimate": estimate,
            "currency": settings.PLATFORM_CURRENCY,
        }
        return render(request, "jobs/_directives.html", context)


def script_values(plan: JobPlan) -> dict[str, str]:
    """The form's fields the script's directives give, as the page fills them in."""
    values = {}
    for effective in plan.report.effective:
        if effective.source != "script":
            continue
        if effective.field in ("name", "time_limit_minutes", "ntasks", "nodes", "array"):
            values[effective.field] = effective.value
        elif effective.field == "cpus_per_task":
            values["cpus_per_task"] = str(plan.size.cpus_per_task)
        elif effective.field == "gpus":
            values["gpus"] = str(plan.size.gpus)
        elif effective.field == "memory" and plan.size.mem_per_cpu is not None:
            values["mem_per_cpu"] = str(plan.size.mem_per_cpu)
    return values


@method_decorator(never_cache, name="dispatch")
class JobEstimateView(LoginRequiredMixin, View):
    """The estimate beside the form, fetched again by htmx as the user types the sizes."""

    def get(self, request: HttpRequest, allocation_id: str) -> HttpResponse:
        allocation, _ = active_allocation(request, allocation_id)
        sizes = JobSizesForm(request.GET, has_gpus=has_gpus(allocation))
        context = {
            "allocation": allocation,
            "estimate": job_estimate(allocation, sizes),
            "currency": settings.PLATFORM_CURRENCY,
        }
        return render(request, "jobs/_estimate.html", context)


@method_decorator(sensitive_post_parameters("secret_environment"), name="post")
class JobQuoteView(LoginRequiredMixin, View):
    """The quote beside the form, asked for with a button (it runs `sbatch --test-only` on the
    cluster, too slow to follow every key): the reservation and cost, what the allocation and
    the budget keep, and when Slurm expects the job would start."""

    def post(self, request: HttpRequest, allocation_id: str) -> HttpResponse:
        allocation, actor = active_allocation(request, allocation_id)
        form = JobSubmitForm(request.POST, has_gpus=has_gpus(allocation))
        context: dict[str, Any] = {"currency": settings.PLATFORM_CURRENCY}
        if not form.is_valid():
            field, problems = next(iter(form.errors.items()))
            label = form.fields[field].label if field in form.fields else ""
            context["problem"] = f"{label}: {problems[0]}" if label else str(problems[0])
        else:
            try:
                context["quote"] = services.job_quote(
                    actor=actor, allocation=allocation, request=form.job_request()
                )
            except ValidationFailed as error:
                fields = error.extra.get("fields") or {}
                context["problem"] = next(
                    (f"{name}: {messages[0]}" for name, messages in fields.items() if messages),
                    error.detail,
                )
            except ApplicationError as error:
                context["problem"] = refusal_text(error)
        return render(request, "jobs/_quote.html", context)


class JobNewView(LoginRequiredMixin, View):
    """Where "New job" leads from the jobs list, the allocations and the dashboard: the
    submission form of the user's one active allocation, or the choice between several (of one
    organization with `?organization=`), or a page that says where to get one."""

    def get(self, request: HttpRequest) -> HttpResponse:
        allocations = market_selectors.allocations_with_status(
            market_selectors.allocation_list_for_user(request_user(request)),
            Allocation.Status.ACTIVE,
        ).order_by("organization__name", "cluster__name", "partition__name", "window_end")
        organization = None
        organization_id = request.GET.get("organization", "")
        if organization_id:
            organization = organization_selectors.membership_get_for_user(
                request_user(request), organization_id
            ).organization
            allocations = allocations.filter(organization=organization)
        choices = list(allocations)
        if len(choices) == 1:
            return HttpResponseRedirect(reverse("job-submit", args=[choices[0].uuid]))
        context = {
            "allocations": choices,
            "organization": organization,
            "currency": settings.PLATFORM_CURRENCY,
        }
        return render(request, "jobs/new.html", context)
