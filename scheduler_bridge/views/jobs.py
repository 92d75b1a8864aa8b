"""The job pages: submitting a job on an allocation (with a live estimate of what it can cost
at most), the list of the user's organizations' jobs, and a job's page with its state history,
usage, cost and output.

Like the API, they find every object through a selector scoped to the user (what the user may
not see is a 404) and let the services decide; a refusal is shown beside the field it concerns
(the #SBATCH lines beside the script) or on top of the form with the figures that explain it.
The parts that change while a job runs are fragments that htmx fetches again every few
seconds; a fragment of an ended job carries no trigger, so the polling stops by itself."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Page, Paginator
from django.http import (
    FileResponse,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
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
from computeshare.numbers import whole_number
from hpc.arrays import parse_array
from marketplace import selectors as market_selectors
from marketplace.models import Allocation, Resource
from organizations import selectors as organization_selectors
from organizations.models import Membership
from scheduler_bridge import errors, services, sizing
from scheduler_bridge.forms.jobs import JobFilterForm, JobSizesForm, JobSubmitForm, MonthForm
from scheduler_bridge.job_files import (
    InputUpload,
    input_uploads_check,
    job_files_storage,
    tar_gz_stream,
)
from scheduler_bridge.job_requests import DirectiveReport, JobPlan
from scheduler_bridge.job_templates import JobTemplate, job_template_get, job_templates_for
from scheduler_bridge.models import Job, JobFile, JobState, RunState
from scheduler_bridge.selectors import jobs as selectors
from scheduler_bridge.serializers.jobs import month_start_of
from scheduler_bridge.sizing import SizingAdvice

PAGE_SIZE = 50
OUTPUT_TAIL_BYTES = 64 * 1024
OUTPUT_DOWNLOAD_BYTES = 8 * 1024 * 1024
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
    values: dict[str, Any] = {
        "name": job.name,
        "time_limit_minutes": job.time_limit_minutes,
        "cpus_per_task": job.cpus_per_task,
        "ntasks": job.ntasks,
        "nodes": job.nodes,
        "gpus": job.gpus,
        "mem_per_cpu": job.mem_per_cpu,
        "array": job.array,
    }
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
        except INPUT_FILE_ERRORS as error:
            form.add_error("input_files", error.detail)
            return self._render(request, allocation, form, status=error.status_code)
        except errors.ScriptRefused as error:
            form.add_error("script", error.detail)
            return self._render(request, allocation, form, status=error.status_code)
        except ValidationFailed as error:
            form_add_service_error(form, error)
            return self._render(request, allocation, form, status=error.status_code)
        except SHOWN_ON_FORM as error:
            # Refusals of the allocation, not of a field: the allocation's figures have
            # changed, so the page is drawn again from a fresh read.
            allocation, _ = active_allocation(request, allocation_id)
            return self._render(
                request, allocation, form, refusal=refusal_text(error), status=error.status_code
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


# --- The list of jobs --------------------------------------------------------------------------


def job_page_of_list(request: HttpRequest) -> tuple[JobFilterForm, Page[Any], bool, int]:
    """The filters, the page of jobs they select (newest first), whether any of them has not
    ended (the rows are then fetched again), and the status to answer with."""
    form = JobFilterForm(
        request.GET,
        organizations=organization_selectors.organization_list_for_user(request_user(request)),
    )
    jobs: Any = Job.objects.none()
    status = 400
    if form.is_valid():
        data = form.cleaned_data
        jobs = selectors.job_list_filtered(
            request_user(request),
            states=[data["state"]] if data["state"] else None,
            allocation=data["allocation"],
            organization=data["organization"],
        )
        status = 200
    page: Page[Any] = Paginator(jobs, PAGE_SIZE).get_page(request.GET.get("page"))
    is_live = any(not job.is_ended for job in page)
    return form, page, is_live, status


def list_query(request: HttpRequest, *, without_page: bool = False) -> str:
    query = request.GET.copy()
    if without_page:
        query.pop("page", None)
    return query.urlencode()


class JobListView(LoginRequiredMixin, View):
    template_name = "jobs/list.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        form, page, is_live, status = job_page_of_list(request)
        context = {
            "form": form,
            "page": page,
            "is_live": is_live,
            "query": list_query(request),
            "pager_query": list_query(request, without_page=True),
            "currency": settings.PLATFORM_CURRENCY,
        }
        return render(request, self.template_name, context, status=status)


@method_decorator(never_cache, name="dispatch")
class JobRowsView(LoginRequiredMixin, View):
    """The list's rows alone, which the list fetches every few seconds while a job runs."""

    def get(self, request: HttpRequest) -> HttpResponse:
        _, page, is_live, status = job_page_of_list(request)
        context = {
            "page": page,
            "is_live": is_live,
            "query": list_query(request),
            "currency": settings.PLATFORM_CURRENCY,
        }
        return render(request, "jobs/_rows.html", context, status=status)


# --- One job -----------------------------------------------------------------------------------


def job_context(job: Job) -> dict[str, Any]:
    runs = list(selectors.job_run_list(job))
    tasks = list(job.tasks.all()) if job.is_array else []
    return {
        "job": job,
        "directives": DirectiveReport.from_json(job.directives),
        "advice": sizing.job_sizing_advice(job, runs, str(settings.PLATFORM_CURRENCY)),
        "tasks": tasks,
        "tasks_done": sum(1 for task in tasks if task.is_ended),
        "events": list(job.events.all()),
        # Shown when a task ran more than once (the job requeued or resized itself, or the
        # owner's jobs preempted it): the page says which runs were charged.
        "runs": runs if len({run.task_id for run in runs}) < len(runs) else [],
        "preemptions": sum(1 for run in runs if run.state == RunState.PREEMPTED),
        "currency": settings.PLATFORM_CURRENCY,
    }


# States in which a job's result files may still change: the files card asks again.
_RESULTS_UNSETTLED = (Job.ResultsState.WAITING, Job.ResultsState.COLLECTING)
_RESULTS_SHOWN = 200


def job_files_context(job: Job) -> dict[str, Any]:
    results = selectors.job_result_files(job)
    return {
        "job": job,
        "input_files": list(job.files.filter(kind=JobFile.Kind.INPUT).order_by("name")),
        "result_files": list(results[:_RESULTS_SHOWN]),
        "result_count": results.count(),
        "results_unsettled": job.results_state in _RESULTS_UNSETTLED,
    }


@method_decorator(never_cache, name="dispatch")
class JobFilesView(LoginRequiredMixin, View):
    """The job's files card: its inputs and, once fetched, its results with download links;
    fetched again every few seconds until the results are settled."""

    def get(self, request: HttpRequest, job_id: str) -> HttpResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        return render(request, "jobs/_files.html", job_files_context(job))


class JobFileDownloadView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest, job_id: str, name: str) -> FileResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        row = selectors.job_result_file(job, name)
        return FileResponse(
            job_files_storage().open(row.stored, "rb"),
            as_attachment=True,
            filename=row.name.rsplit("/", 1)[-1],
            content_type="application/octet-stream",
        )


class JobFilesArchiveView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest, job_id: str) -> StreamingHttpResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        rows = list(selectors.job_result_files(job))
        response = StreamingHttpResponse(
            tar_gz_stream(job_files_storage(), rows), content_type="application/gzip"
        )
        response["Content-Disposition"] = f'attachment; filename="job-{job.uuid}-results.tar.gz"'
        return response


class JobDetailView(LoginRequiredMixin, View):
    """The job's page. `?stream=stderr&task=<index>` opens its output on that stream of that
    task of the array (a sweep's failed row links there); anything else opens stdout of the
    first task."""

    def get(self, request: HttpRequest, job_id: str) -> HttpResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        context = {**job_context(job), **job_files_context(job)}
        return render(request, "jobs/detail.html", {**context, **output_opened(request, context)})


def output_opened(request: HttpRequest, context: dict[str, Any]) -> dict[str, Any]:
    """The stream and the array's task the page's output opens on: the query's, when it names
    a stream and one of the array's tasks (`job_context`'s)."""
    stream = "stderr" if request.GET.get("stream") == "stderr" else "stdout"
    task_id = whole_number(request.GET.get("task", ""))
    if task_id not in {task.array_task_id for task in context["tasks"]}:
        task_id = None
    return {"output_stream": stream, "output_task": task_id}


@method_decorator(never_cache, name="dispatch")
class JobStatusView(LoginRequiredMixin, View):
    """The job's live part (state, times, usage, cost, history, tasks), fetched every few
    seconds while the job has not ended."""

    def get(self, request: HttpRequest, job_id: str) -> HttpResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        return render(request, "jobs/_status.html", job_context(job))


# Submitted to the cluster and not started there: its output files do not exist yet.
WAITING_ON_CLUSTER = (JobState.SUBMITTED, JobState.PENDING)


class TaskNotWhole(Exception):
    """`task` is not a whole number."""


TASK_NOT_WHOLE = "The task is a whole number, such as 0."


def output_choice(request: HttpRequest, job: Job) -> tuple[str, list[int], int | None]:
    """The stream, the array's task indexes and the task asked for (the first by default);
    `TaskNotWhole` when `task` is not a whole number."""
    stream = "stderr" if request.GET.get("stream") == "stderr" else "stdout"
    tasks = (
        [task.array_task_id for task in job.tasks.all() if task.array_task_id is not None]
        if job.is_array
        else []
    )
    task = request.GET.get("task", "")
    if not task:
        return stream, tasks, tasks[0] if tasks else None
    task_id = whole_number(task)
    if task_id is None:
        raise TaskNotWhole()
    return stream, tasks, task_id


@method_decorator(never_cache, name="dispatch")
class JobOutputView(LoginRequiredMixin, View):
    """The last 64 KiB of stdout or stderr (of one task of an array), read from the cluster.
    A cluster that cannot be reached is said in the fragment, which tries again later."""

    def get(self, request: HttpRequest, job_id: str) -> HttpResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        try:
            stream, tasks, task_id = output_choice(request, job)
        except TaskNotWhole:
            return HttpResponse(
                TASK_NOT_WHOLE, status=400, content_type="text/plain; charset=utf-8"
            )
        text = ""
        problem = ""
        try:
            output = services.job_output(
                job=job, stream=stream, tail_bytes=OUTPUT_TAIL_BYTES, array_task_id=task_id
            )
        except errors.OutputNotKept:
            # A job the team's jobs submitted themselves: the sentence the job's page shows in
            # place of the output, which polls nothing.
            return render(request, "jobs/_output_not_kept.html", {"job": job})
        except errors.OutputUnavailable:
            problem = (
                "The cluster cannot be reached just now, so the output cannot be read. "
                "This part tries again by itself."
            )
        except ValidationFailed as error:
            problem = " ".join(
                message for messages_ in error.extra["fields"].values() for message in messages_
            )
        else:
            # The tail may start in the middle of a character: replace what cannot be read.
            text = output.decode("utf-8", errors="replace")
        context = {
            "job": job,
            "stream": stream,
            "tasks": tasks,
            "task_id": task_id,
            "text": text,
            "problem": problem,
            "is_truncated": len(text.encode()) >= OUTPUT_TAIL_BYTES,
            "tail_kib": OUTPUT_TAIL_BYTES // 1024,
            "download_mib": OUTPUT_DOWNLOAD_BYTES // (1024 * 1024),
            # Said as the job is now: the fragment is fetched again while the job runs, so that
            # "not reached the cluster" does not stay once it has.
            "not_submitted": job.state == JobState.QUEUED or not job.scheduler_job_id,
            "not_started": job.started_at is None and job.state in WAITING_ON_CLUSTER,
            # Where the script sent its output, when it named the files itself.
            "stream_files": services.job_stream_files(job),
        }
        return render(request, "jobs/_output.html", context)


class JobOutputDownloadView(LoginRequiredMixin, View):
    """The job's stdout or stderr (of one task of an array) as a file: all of it up to 8 MiB,
    else its last 8 MiB, read from the cluster like the tail the page shows."""

    def get(self, request: HttpRequest, job_id: str) -> HttpResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        try:
            stream, _, task_id = output_choice(request, job)
        except TaskNotWhole:
            return HttpResponse(
                TASK_NOT_WHOLE, status=400, content_type="text/plain; charset=utf-8"
            )
        try:
            output = services.job_output(
                job=job, stream=stream, tail_bytes=OUTPUT_DOWNLOAD_BYTES, array_task_id=task_id
            )
        except errors.OutputNotKept as error:
            return HttpResponse(error.detail, status=409, content_type="text/plain; charset=utf-8")
        except errors.OutputUnavailable:
            return HttpResponse(
                "The cluster cannot be reached just now, so the output cannot be read. "
                "Try again in a moment.",
                status=503,
                content_type="text/plain; charset=utf-8",
            )
        except ValidationFailed as error:
            text = " ".join(
                message for messages_ in error.extra["fields"].values() for message in messages_
            )
            return HttpResponse(text, status=400, content_type="text/plain; charset=utf-8")
        suffix = f"-task{task_id}" if task_id is not None else ""
        response = HttpResponse(output, content_type="text/plain; charset=utf-8")
        response["Content-Disposition"] = (
            f'attachment; filename="job-{job.uuid}{suffix}.{stream}.txt"'
        )
        return response


class JobCancelView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, job_id: str) -> HttpResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        actor = organization_selectors.membership_in(request_user(request), job.organization_id)
        assert actor is not None  # a job is visible only to its organization's members
        try:
            job = services.job_cancel(actor=actor, job=job)
        except Conflict as error:
            messages.error(request, error.detail)
        else:
            if job.state == JobState.CANCELLED:
                messages.success(
                    request,
                    f"{job.name} is cancelled before it reached the cluster; its reservation "
                    "is back on the allocation.",
                )
            else:
                messages.success(
                    request,
                    f"Cancelling {job.name}: the cluster is asked to stop it, and what it used "
                    "until then is charged.",
                )
        return HttpResponseRedirect(reverse("job-detail", args=[job.uuid]))


class JobResubmitView(LoginRequiredMixin, View):
    """The "Resubmit a copy" button: the submit form filled with the job's script and sizes,
    on its own allocation while that is active, else on the team's active allocation of the
    same partition that ends last; a message on the job's page when the team has none."""

    def get(self, request: HttpRequest, job_id: str) -> HttpResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        allocation = market_selectors.allocation_resubmit_target(
            request_user(request), job.allocation, organization_id=job.organization_id
        )
        if allocation is None or job.is_from_tenant:
            messages.error(
                request,
                "No active allocation of this partition to run a copy on: buy or win one, "
                "then resubmit.",
            )
            return HttpResponseRedirect(reverse("job-detail", args=[job.uuid]))
        query = f"?from={job.uuid}"
        if request.GET.get("sized") == "1":
            query += "&sized=1"
        return HttpResponseRedirect(reverse("job-submit", args=[allocation.uuid]) + query)


class EfficiencyReportView(LoginRequiredMixin, View):
    """A team's monthly efficiency report: core-hours and money spent on idle cores, and what
    its jobs reserved without using, with the jobs that wasted most (the API's figures)."""

    def get(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_for_user(
            request_user(request), organization_id
        )
        form = MonthForm(request.GET)
        status = 200
        if form.is_valid() and form.cleaned_data["month"] is not None:
            month_start = form.cleaned_data["month"]
        else:
            status = 400 if form.errors else 200
            month_start = month_start_of(timezone.now())
        report = selectors.organization_efficiency_report(membership.organization, month_start)
        previous = (month_start - timedelta(days=1)).replace(day=1)
        following = (month_start + timedelta(days=32)).replace(day=1)
        context = {
            "organization": membership.organization,
            "report": report,
            "form": form,
            "previous_month": f"{previous:%Y-%m}",
            "next_month": f"{following:%Y-%m}" if following <= timezone.now() else "",
        }
        return render(request, "jobs/efficiency.html", context, status=status)
