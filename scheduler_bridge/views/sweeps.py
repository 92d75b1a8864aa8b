"""The sweep pages: the form on an allocation, the list of the user's organizations' sweeps,
and a sweep's page: a grid of its rows' states, its jobs, "retry failed", and the results
table with its CSV download. The grid and the table are one fragment that htmx fetches again
every few seconds while the sweep runs; an ended sweep's fragment carries no trigger."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.translation import ngettext
from django.views import View
from django.views.decorators.cache import never_cache

from computeshare.authentication import request_user
from computeshare.errors import ApplicationError
from marketplace.models import Allocation
from organizations import selectors as organization_selectors
from scheduler_bridge import errors, services
from scheduler_bridge.api.sweeps import sweep_results_csv, table_from_upload
from scheduler_bridge.forms.sweeps import SweepSubmitForm
from scheduler_bridge.models import Sweep, SweepRow
from scheduler_bridge.selectors import jobs as selectors
from scheduler_bridge.views.job_submit import (
    active_allocation,
    refusal_text,
    submission_refused,
)

# Refusals of the table: shown beside it.
TABLE_ERRORS = (
    errors.SweepTableEmpty,
    errors.SweepHeaderInvalid,
    errors.SweepRowRagged,
    errors.SweepTooManyRows,
    errors.SweepValueInvalid,
    errors.SweepTableTooLarge,
)


class SweepSubmitView(LoginRequiredMixin, View):
    template_name = "sweeps/submit.html"

    def _render(
        self,
        request: HttpRequest,
        allocation: Allocation,
        form: SweepSubmitForm,
        *,
        refusal: str = "",
        status: int = 200,
    ) -> HttpResponse:
        context = {
            "allocation": allocation,
            "organization": allocation.organization,
            "form": form,
            "refusal": refusal,
            "max_rows": settings.SWEEP_MAX_ROWS,
            "currency": settings.PLATFORM_CURRENCY,
        }
        return render(request, self.template_name, context, status=status)

    def get(self, request: HttpRequest, allocation_id: str) -> HttpResponse:
        allocation, _ = active_allocation(request, allocation_id)
        return self._render(request, allocation, SweepSubmitForm())

    def post(self, request: HttpRequest, allocation_id: str) -> HttpResponse:
        allocation, actor = active_allocation(request, allocation_id)
        form = SweepSubmitForm(request.POST, request.FILES)
        if not form.is_valid():
            return self._render(request, allocation, form, status=400)
        upload = form.cleaned_data.get("table_file")
        try:
            table = table_from_upload(upload) if upload else form.cleaned_data["table"]
            sweep = services.sweep_submit(
                actor=actor, allocation=allocation, request=form.sweep_request(table)
            )
        except ApplicationError as error:
            table_field = "table_file" if upload else "table"
            refusal = submission_refused(form, error, beside={table_field: TABLE_ERRORS})
            if refusal is not None:
                allocation, _ = active_allocation(request, allocation_id)
            return self._render(
                request, allocation, form, refusal=refusal or "", status=error.status_code
            )
        job = sweep.sweep_jobs.get().job
        queued = ngettext(
            "%(count)d row queued as one array job",
            "%(count)d rows queued as one array job",
            job.task_count,
        ) % {"count": job.task_count}
        messages.success(
            request,
            f"{sweep.name}: {queued}, at most {sweep.concurrency} at once; it reserves "
            f"{job.reserved_units.normalize():f} units of the allocation until it ends.",
        )
        return HttpResponseRedirect(reverse("sweep-detail", args=[sweep.uuid]))


class SweepListView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest) -> HttpResponse:
        page = Paginator(selectors.sweep_list_for_user(request_user(request)), 50).get_page(
            request.GET.get("page")
        )
        return render(request, "sweeps/list.html", {"page": page})


def sweep_context(request: HttpRequest, sweep_id: Any) -> dict[str, Any]:
    sweep = selectors.sweep_get_for_user(request_user(request), sweep_id)
    rows = list(selectors.sweep_rows(sweep))
    states: dict[str, int] = {}
    results: dict[str, int] = {}
    for row in rows:
        states[row.task.get_state_display()] = states.get(row.task.get_state_display(), 0) + 1
        results[row.result_state] = results.get(row.result_state, 0) + 1
    jobs = [sweep_job.job for sweep_job in sweep.sweep_jobs.all()]
    return {
        "sweep": sweep,
        "rows": [(row, list(zip(sweep.columns, row.values, strict=True))) for row in rows],
        "jobs": jobs,
        "state_counts": sorted(states.items()),
        "failed_count": results.get(SweepRow.ResultState.FAILED, 0),
        "result_counts": results,
        "is_running": sweep.state == Sweep.State.RUNNING,
        "currency": settings.PLATFORM_CURRENCY,
    }


class SweepDetailView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest, sweep_id: str) -> HttpResponse:
        return render(request, "sweeps/detail.html", sweep_context(request, sweep_id))


@method_decorator(never_cache, name="dispatch")
class SweepStatusView(LoginRequiredMixin, View):
    """The sweep's live part (grid, jobs, results), fetched every few seconds while it runs."""

    def get(self, request: HttpRequest, sweep_id: str) -> HttpResponse:
        return render(request, "sweeps/_status.html", sweep_context(request, sweep_id))


class SweepRetryFailedView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, sweep_id: str) -> HttpResponse:
        sweep = selectors.sweep_get_for_user(request_user(request), sweep_id)
        actor = organization_selectors.membership_in(request_user(request), sweep.organization_id)
        assert actor is not None
        try:
            sweep_job = services.sweep_retry_failed(actor=actor, sweep=sweep)
        except ApplicationError as error:
            messages.error(request, refusal_text(error))
        else:
            retried = ngettext(
                "The %(count)d failed row runs again as a new array job",
                "The %(count)d failed rows run again as a new array job",
                sweep_job.job.task_count,
            ) % {"count": sweep_job.job.task_count}
            messages.success(
                request,
                f"{retried}; it reserves {sweep_job.job.reserved_units.normalize():f} units.",
            )
        return HttpResponseRedirect(reverse("sweep-detail", args=[sweep.uuid]))


class SweepResultsCsvView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest, sweep_id: str) -> HttpResponse:
        sweep = selectors.sweep_get_for_user(request_user(request), sweep_id)
        return sweep_results_csv(sweep, list(selectors.sweep_rows(sweep)))
