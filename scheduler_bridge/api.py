"""The job endpoints (API.md, Jobs) and the organization's usage report. Checks go in the
house order: visible (404), allowed (403), state (409), input (400), then the service."""

from __future__ import annotations

import io
from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare.api import (
    ErrorSerializer,
    idempotent,
    paginated,
    paginated_response,
    validated,
)
from computeshare.csv_export import csv_writer
from computeshare.errors import NotFound, ValidationFailed
from marketplace import selectors as market_selectors
from marketplace.api.common import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from marketplace.api.money import RANGE_PARAMETERS, time_range
from marketplace.models import Allocation
from scheduler_bridge import selectors, services
from scheduler_bridge.models import JobState
from scheduler_bridge.serializers import (
    USAGE_CSV_COLUMNS,
    JobCreateSerializer,
    JobDetailSerializer,
    JobFilterSerializer,
    JobOutputQuerySerializer,
    JobSerializer,
    UsageRowSerializer,
    usage_csv_row,
)


class PlainTextRenderer(BaseRenderer):
    """Lets a client ask for `text/plain` (the output tail); the views answer the text itself,
    and an error's JSON is sent as text."""

    media_type = "text/plain"
    format = "txt"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        return data if isinstance(data, bytes) else str(data).encode()


class CSVRenderer(PlainTextRenderer):
    """Makes `?format=csv` a format DRF knows (it would answer 404 otherwise)."""

    media_type = "text/csv"
    format = "csv"


def _allocation_named_in_body(request: Request) -> Allocation:
    body = request.data if isinstance(request.data, dict) else {}
    try:
        return market_selectors.allocation_get_for_user(request.user, body.get("allocation"))
    except NotFound as error:
        raise ValidationFailed(fields={"allocation": ["No such allocation."]}) from error


JOB_ERRORS = {**ERRORS, 402: ErrorSerializer}


class JobListCreateApi(APIView):
    @extend_schema(
        operation_id="jobs_list",
        responses={200: paginated(JobSerializer), **LIST_ERRORS},
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter(
                "state", str, enum=JobState.values, many=True, explode=True, required=False
            ),
            OpenApiParameter("allocation", str, required=False, description="An allocation id."),
            OpenApiParameter(
                "organization", str, required=False, description="An organization id."
            ),
        ],
    )
    def get(self, request: Request) -> Response:
        query = {
            "state": request.query_params.getlist("state"),
            **{
                key: request.query_params[key]
                for key in ("allocation", "organization")
                if key in request.query_params
            },
        }
        if not query["state"]:
            query.pop("state")
        filters = validated(JobFilterSerializer, query)
        jobs = selectors.job_list_filtered(
            request.user,
            states=filters.get("state"),
            allocation=filters.get("allocation"),
            organization=filters.get("organization"),
        )
        return paginated_response(request, self, jobs, JobSerializer)

    @extend_schema(
        operation_id="jobs_create",
        request=JobCreateSerializer,
        responses={201: JobDetailSerializer, **JOB_ERRORS},
        parameters=[IDEMPOTENCY_KEY],
        description="Accepts a job on an allocation: it reserves cores (or GPUs) x time limit x "
        "tasks units and is queued; a worker submits it to the cluster.",
    )
    def post(self, request: Request) -> Response:
        def create() -> Response:
            allocation = _allocation_named_in_body(request)
            actor = market_selectors.membership_in(request.user, allocation.organization_id)
            assert actor is not None  # the allocation is visible only to its members
            services.allocation_check_open(allocation)
            data = validated(JobCreateSerializer, request.data)
            data.pop("allocation")
            job = services.job_submit(
                actor=actor, allocation=allocation, request=services.JobRequest(**data)
            )
            return Response(
                JobDetailSerializer(selectors.job_get_for_user(request.user, job.uuid)).data,
                status=status.HTTP_201_CREATED,
            )

        return idempotent(request, create)


class JobDetailApi(APIView):
    @extend_schema(
        operation_id="jobs_retrieve",
        responses={200: JobDetailSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, job_id: str) -> Response:
        return Response(JobDetailSerializer(selectors.job_get_for_user(request.user, job_id)).data)


class JobCancelApi(APIView):
    @extend_schema(
        operation_id="jobs_cancel",
        request=None,
        responses={202: JobDetailSerializer, **ERRORS},
        description="A job not yet on the cluster is cancelled at once; one on the cluster is "
        "cancelled with scancel, and the poll then settles what it used. 409 "
        "`job_already_ended` once it has ended.",
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = selectors.job_get_for_user(request.user, job_id)
        actor = market_selectors.membership_in(request.user, job.organization_id)
        assert actor is not None
        services.job_cancel(actor=actor, job=job)
        return Response(
            JobDetailSerializer(selectors.job_get_for_user(request.user, job_id)).data,
            status=status.HTTP_202_ACCEPTED,
        )


class JobOutputApi(APIView):
    renderer_classes = [JSONRenderer, PlainTextRenderer]

    @extend_schema(
        operation_id="jobs_output",
        parameters=[
            OpenApiParameter("stream", str, enum=["stdout", "stderr"], required=False),
            OpenApiParameter(
                "tail_bytes", int, required=False, description="65536 when not given."
            ),
            OpenApiParameter("task", int, required=False, description="The array task's index."),
        ],
        responses={
            (200, "text/plain"): OpenApiResponse(str, description="The tail of the stream."),
            400: ErrorSerializer,
            401: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
            502: ErrorSerializer,
        },
        description="The tail of the job's stdout or stderr, read from the cluster (empty "
        "before the job runs). 409 `output_not_kept` for a job of `origin` `tenant`: one of "
        "the team's jobs submitted it on the cluster, and its output went where that job sent "
        "it, not to a folder the platform keeps. 502 `cluster_unreachable` when the cluster "
        "cannot be read.",
    )
    def get(self, request: Request, job_id: str) -> HttpResponse:
        job = selectors.job_get_for_user(request.user, job_id)
        services.job_output_check_kept(job)
        query = validated(JobOutputQuerySerializer, request.query_params)
        text = services.job_output(
            job=job,
            stream=query["stream"],
            tail_bytes=query["tail_bytes"],
            array_task_id=query.get("task"),
        )
        return HttpResponse(text, content_type="text/plain; charset=utf-8")


class UsageApi(APIView):
    renderer_classes = [JSONRenderer, CSVRenderer]

    @extend_schema(
        operation_id="organization_usage_list",
        parameters=[
            *PAGE_PARAMETERS,
            *RANGE_PARAMETERS,
            OpenApiParameter("format", str, enum=["json", "csv"], required=False),
        ],
        responses={200: paginated(UsageRowSerializer), **LIST_ERRORS},
        description="Usage per job: units, cost and times. Jobs that the team's own jobs "
        "submitted on the cluster are listed too, as `origin` `tenant` with their Slurm id "
        "(`scheduler_job_id`): they are charged to the team's allocation like any other. "
        "`format=csv` downloads every row, with the same columns.",
    )
    def get(self, request: Request, organization_id: str) -> Any:
        membership = market_selectors.membership_get_for_user(request.user, organization_id)
        query = request.query_params.copy()
        wants_csv = query.pop("format", ["json"])[-1] == "csv"
        filters = time_range(request)
        jobs = selectors.job_usage_list(
            membership.organization, since=filters.get("since"), until=filters.get("until")
        )
        if not wants_csv:
            return paginated_response(request, self, jobs, UsageRowSerializer)
        buffer = io.StringIO()
        writer = csv_writer(buffer)
        writer.writerow(USAGE_CSV_COLUMNS)
        for job in jobs.iterator(chunk_size=500):
            writer.writerow(usage_csv_row(job))
        response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = (
            f'attachment; filename="usage-{membership.organization.uuid}.csv"'
        )
        return response
