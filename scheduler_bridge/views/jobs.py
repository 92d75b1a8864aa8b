"""The job pages: the list of the user's organizations' jobs, and a job's page with its state
history, usage, cost, output and files; cancelling, resubmitting a copy, and the monthly
efficiency report. Submitting one is `job_submit`.

Like the API, they find every object through a selector scoped to the user (what the user may
not see is a 404) and let the services decide. The parts that change while a job runs are
fragments that htmx fetches again every few seconds; a fragment of an ended job carries no
trigger, so the polling stops by itself."""

from __future__ import annotations

from datetime import timedelta
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

from computeshare.authentication import request_user
from computeshare.errors import (
    Conflict,
    ValidationFailed,
)
from computeshare.numbers import whole_number
from marketplace import selectors as market_selectors
from organizations import selectors as organization_selectors
from scheduler_bridge import errors, services, sizing
from scheduler_bridge.forms.jobs import JobFilterForm, MonthForm
from scheduler_bridge.job_files import (
    result_file_response,
    results_archive_response,
)
from scheduler_bridge.job_requests import DirectiveReport
from scheduler_bridge.models import Job, JobFile, JobState, RunState
from scheduler_bridge.selectors import jobs as selectors
from scheduler_bridge.serializers.reports import month_start_of

PAGE_SIZE = 50
OUTPUT_TAIL_BYTES = 64 * 1024
OUTPUT_DOWNLOAD_BYTES = 8 * 1024 * 1024


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
        return result_file_response(selectors.job_result_file(job, name))


class JobFilesArchiveView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest, job_id: str) -> StreamingHttpResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        return results_archive_response(job.uuid, list(selectors.job_result_files(job)))


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
