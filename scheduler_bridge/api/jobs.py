"""The job endpoints (docs/api.md: jobs) and the organization's usage report. Checks go in the
house order: visible (404), allowed (403), state (409), input (400), then the service."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.http import FileResponse, HttpResponse, QueryDict, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.money import RANGE_PARAMETERS, time_range
from computeshare.api import (
    ErrorSerializer,
    idempotent,
    paginated,
    paginated_response,
    validated,
)
from computeshare.authentication import request_user
from computeshare.csv_export import csv_writer
from computeshare.errors import FieldErrors, NotFound, ValidationFailed
from computeshare.ids import ID_PREFIX_PARAMETER
from computeshare.openapi import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from computeshare.parsers import JSONParser
from marketplace import selectors as market_selectors
from marketplace.models import Allocation
from organizations import selectors as organization_selectors
from organizations.models import Membership
from scheduler_bridge import services
from scheduler_bridge.job_files import (
    INPUT_FIELD,
    JobMultiPartParser,
    input_uploads_check,
    input_uploads_of,
    result_file_response,
    results_archive_response,
)
from scheduler_bridge.job_templates import JOB_TEMPLATES
from scheduler_bridge.models import Job, JobState
from scheduler_bridge.selectors import jobs as selectors
from scheduler_bridge.serializers.jobs import (
    JobCreateSerializer,
    JobDetailSerializer,
    JobFilterSerializer,
    JobOutputQuerySerializer,
    JobQuoteSerializer,
    JobResultFileSerializer,
    JobSerializer,
    JobTemplateSerializer,
)
from scheduler_bridge.serializers.reports import (
    USAGE_CSV_COLUMNS,
    EfficiencyReportSerializer,
    MonthQuerySerializer,
    UsageRowSerializer,
    month_start_of,
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


def allocation_open_for_submission(request: Request) -> tuple[Allocation, Membership]:
    """The allocation the body names, with the requesting member of its team, refused (409)
    unless it takes jobs now: what a job, its quote and a sweep each check before the body,
    so that a state conflict is answered before an input error."""
    body = request.data if isinstance(request.data, dict) else {}
    if hasattr(body, "getlist"):  # a form: the last value, as the serializer reads it
        body = {"allocation": body.get("allocation")}
    try:
        allocation, actor = market_selectors.allocation_get_for_member(
            request_user(request), body.get("allocation")
        )
    except NotFound as error:
        raise ValidationFailed(fields={"allocation": ["No such allocation."]}) from error
    services.allocation_check_open(allocation)
    return allocation, actor


# 415: a body that is neither JSON nor multipart, or a multipart body whose type is lost.
JOB_ERRORS = {**ERRORS, 402: ErrorSerializer, 415: ErrorSerializer}
_JSON_FIELDS = ("environment", "secret_environment")


def _job_body(request: Request) -> dict[str, Any]:
    """The job's fields, from a JSON body or from a multipart form (each field a form field,
    the variables as JSON object strings, the files apart)."""
    data = request.data
    if not isinstance(data, QueryDict):  # a JSON body; a form's is a QueryDict
        return data if isinstance(data, dict) else {}
    body: dict[str, Any] = {key: data.get(key) for key in data if key != INPUT_FIELD}
    problems = FieldErrors()
    for key in _JSON_FIELDS:
        if isinstance(body.get(key), str):
            try:
                body[key] = json.loads(body[key])
            except ValueError:
                problems.add(key, "In a form, a JSON object of names to strings.")
    problems.raise_if_any()
    return body


class JobMultipartSchema(JobCreateSerializer):
    """The multipart form of POST /jobs/: the JSON body's fields plus the input files."""

    # In a form the variables are a JSON object's text: DRF lets a subclass redeclare a field
    # with another kind, which the stubs' attribute types do not know.
    environment = serializers.CharField(  # type: ignore[assignment]
        required=False, help_text="A JSON object of names to strings."
    )
    secret_environment = serializers.CharField(  # type: ignore[assignment]
        required=False, help_text="A JSON object of names to strings (write-only)."
    )
    input_files = serializers.ListField(
        child=serializers.FileField(),
        required=False,
        help_text="Zero or more files; each part's filename is its path in the job's folder "
        "(relative, `/`-separated, at most JOB_INPUT_PATH_DEPTH levels of [A-Za-z0-9._-]+).",
    )


class JobListCreateApi(APIView):
    parser_classes = [JSONParser, JobMultiPartParser]

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
            ID_PREFIX_PARAMETER,
        ],
    )
    def get(self, request: Request) -> Response:
        query = {
            "state": request.query_params.getlist("state"),
            **{
                key: request.query_params[key]
                for key in ("allocation", "organization", "id_prefix")
                if key in request.query_params
            },
        }
        if not query["state"]:
            query.pop("state")
        filters = validated(JobFilterSerializer, query)
        jobs = selectors.job_list_filtered(
            request_user(request),
            states=filters.get("state"),
            allocation=filters.get("allocation"),
            organization=filters.get("organization"),
            id_prefix=filters.get("id_prefix"),
        )
        return paginated_response(request, self, jobs, JobSerializer)

    @extend_schema(
        operation_id="jobs_create",
        request={
            "application/json": JobCreateSerializer,
            "multipart/form-data": JobMultipartSchema,
        },
        responses={201: JobDetailSerializer, 413: ErrorSerializer, **JOB_ERRORS},
        parameters=[IDEMPOTENCY_KEY],
        description="Accepts a job on an allocation: it reserves cores (or GPUs) x time limit x "
        "tasks units and is queued; a worker submits it to the cluster. As multipart/form-data "
        "it also takes input files (field `input_files`, each part's filename its path in the "
        "job's folder), staged into that folder as the team's tenant before sbatch. A refused "
        "file writes nothing: 400 `input_file_name_invalid` (extra `name`), 400 "
        "`too_many_input_files` (extra `limit`), 413 `input_files_too_large` (extra "
        "`limit_bytes`, and `name` for a file over the per-file limit).",
    )
    def post(self, request: Request) -> Response:
        def create() -> Response:
            allocation, actor = allocation_open_for_submission(request)
            data = validated(JobCreateSerializer, _job_body(request))
            data.pop("allocation")
            uploads = input_uploads_of(request.FILES) if hasattr(request.data, "getlist") else []
            input_uploads_check(uploads)
            accepted = services.job_accept(
                actor=actor,
                allocation=allocation,
                request=services.JobRequest(**data),
                input_files=uploads,
            )
            job = selectors.job_detail_of_accepted(
                accepted.job,
                tasks=accepted.tasks,
                events=accepted.events,
                input_files=accepted.input_files,
            )
            return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)

        return idempotent(request, create)


class JobQuoteApi(APIView):
    @extend_schema(
        operation_id="jobs_quote",
        request=JobCreateSerializer,
        responses={200: JobQuoteSerializer, **JOB_ERRORS},
        description="Quotes a job without submitting it or holding anything: the same body "
        "and the same refusals as POST /jobs/ (400, 402 `allocation_exhausted`, 409 "
        "`allocation_not_active`). `expected_start` is Slurm's own estimate (`sbatch "
        "--test-only` as the team's tenant, `expected_start_source` `slurm`), or null with "
        "`unavailable` and the reason in `expected_start_detail`.",
    )
    def post(self, request: Request) -> Response:
        allocation, actor = allocation_open_for_submission(request)
        data = validated(JobCreateSerializer, request.data)
        data.pop("allocation")
        quote = services.job_quote(
            actor=actor, allocation=allocation, request=services.JobRequest(**data)
        )
        return Response(JobQuoteSerializer(quote).data)


class JobDetailApi(APIView):
    @extend_schema(
        operation_id="jobs_retrieve",
        responses={200: JobDetailSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, job_id: str) -> Response:
        return Response(
            JobDetailSerializer(selectors.job_get_for_user(request_user(request), job_id)).data
        )


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
        job = selectors.job_get_for_user(request_user(request), job_id)
        actor = organization_selectors.membership_in(request_user(request), job.organization_id)
        assert actor is not None
        services.job_cancel(actor=actor, job=job)
        return Response(
            JobDetailSerializer(selectors.job_get_for_user(request_user(request), job_id)).data,
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
        job = selectors.job_get_for_user(request_user(request), job_id)
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
        description="Usage per job that ran: units, cost and times (a job shorter than "
        "accounting's whole second is a row at 0 units). Jobs that the team's own jobs "
        "submitted on the cluster are listed too, as `origin` `tenant` with their Slurm id "
        "(`scheduler_job_id`): they are charged to the team's allocation like any other. "
        "`format=csv` downloads every row, with the same columns.",
    )
    def get(self, request: Request, organization_id: str) -> Any:
        membership = organization_selectors.membership_get_for_user(
            request_user(request), organization_id
        )
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


class JobTemplateListApi(APIView):
    @extend_schema(
        operation_id="job_templates_list",
        parameters=PAGE_PARAMETERS,
        responses={200: paginated(JobTemplateSerializer), **LIST_ERRORS},
        description="Ready job templates, each with a sentence on its technique: a Python "
        "parameter sweep (a job array), a multi-threaded OpenMP run sized by `cpus_per_task`, "
        "an MPI run across nodes started with `srun`, a GPU run (`needs_gpus`). POST a "
        "template's fields to /jobs/ with your `allocation` (and `template` set to its `id`) "
        "to run it.",
    )
    def get(self, request: Request) -> Response:
        return paginated_response(request, self, list(JOB_TEMPLATES), JobTemplateSerializer)


class EfficiencyApi(APIView):
    @extend_schema(
        operation_id="organization_efficiency_retrieve",
        parameters=[
            OpenApiParameter(
                "month", str, required=False, description="YYYY-MM (UTC); this month if left out."
            )
        ],
        responses={200: EfficiencyReportSerializer, **LIST_ERRORS},
        description="The team's monthly efficiency report over the jobs that ended in the "
        "month: core-hours and money spent on idle cores (allocated cores x elapsed less the "
        "CPU time used, at what those runs cost), and what the jobs reserved of their "
        "allocations without using it, with its value at the allocations' prices; the jobs "
        "that wasted most.",
    )
    def get(self, request: Request, organization_id: str) -> Response:
        membership = organization_selectors.membership_get_for_user(
            request_user(request), organization_id
        )
        query = validated(MonthQuerySerializer, request.query_params)
        month_start = query.get("month") or month_start_of(timezone.now())
        report = selectors.organization_efficiency_report(membership.organization, month_start)
        return Response(EfficiencyReportSerializer(report).data)


class BinaryRenderer(BaseRenderer):
    """Lets a client ask for the files' own types; the views answer the bytes themselves."""

    media_type = "application/octet-stream"
    format = "bin"
    charset = None

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        return data if isinstance(data, bytes) else json.dumps(data).encode()


class GzipRenderer(BinaryRenderer):
    media_type = "application/gzip"
    format = "tar.gz"


_View = TypeVar("_View", bound=Callable[..., Any])


def download_schema(
    operation_id: str, renderer: type[BaseRenderer], content: str, description: str
) -> Callable[[_View], _View]:
    """The schema of an endpoint that answers a file's bytes in `renderer`'s type (its 401 and
    404 as the API's errors): the result file's and the results archive's."""
    return extend_schema(
        operation_id=operation_id,
        responses={
            (200, renderer.media_type): OpenApiResponse(bytes, description=content),
            401: ErrorSerializer,
            404: ErrorSerializer,
        },
        description=description,
    )


RESULTS_STATE_HELP = (
    "`waiting` (the job has not ended: the list is empty), `collecting` (being fetched from "
    "the cluster), `ready`, `failed` (see `detail`), `expired` (removed after "
    "JOB_RESULT_RETENTION_DAYS), `not_kept` (a job of `origin` `tenant`)."
)


class SkippedResultSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    reason = serializers.CharField()


class JobFilesApi(APIView):
    @extend_schema(
        operation_id="jobs_files_list",
        parameters=PAGE_PARAMETERS,
        responses={
            200: inline_serializer(
                name="PaginatedJobResultFileList",
                fields={
                    "count": serializers.IntegerField(),
                    "next": serializers.URLField(allow_null=True),
                    "previous": serializers.URLField(allow_null=True),
                    "results": JobResultFileSerializer(many=True),
                    "state": serializers.ChoiceField(
                        choices=Job.ResultsState.choices, help_text=RESULTS_STATE_HELP
                    ),
                    "truncated": serializers.BooleanField(
                        help_text="True when the job wrote more than JOB_RESULT_TOTAL_MAX_BYTES: "
                        "the files past it (by name) were not kept."
                    ),
                    "detail": serializers.CharField(),
                    "skipped": SkippedResultSerializer(
                        many=True,
                        help_text="What was in the folder but was not fetched, with the reason: "
                        "symbolic links (never followed), FIFOs and devices, files with other "
                        "hard links, files swapped since the listing, and names that cannot be "
                        "served (not UTF-8, a control character such as a line break). Names "
                        "are shown with such bytes escaped (`\\xff`, `\\n`). At most 100.",
                    ),
                },
            ),
            **LIST_ERRORS,
        },
        description="The files the job wrote in its folder (stdout and stderr among them, the "
        "platform's script and environment files left out), fetched once it has ended. Before "
        "that the list is empty and `state` says why (never a 409): a client waits for `ready`. "
        "Nothing is read through a symbolic link: what was not fetched is in `skipped`.",
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = selectors.job_get_for_user(request_user(request), job_id)
        files = selectors.job_result_files(job)
        response = paginated_response(request, self, files, JobResultFileSerializer)
        response.data["state"] = job.results_state
        response.data["truncated"] = job.results_truncated
        response.data["detail"] = job.results_detail
        response.data["skipped"] = job.results_skipped
        return response


class JobFileDownloadApi(APIView):
    renderer_classes = [JSONRenderer, BinaryRenderer]

    @download_schema(
        "jobs_files_retrieve",
        BinaryRenderer,
        "The file, streamed.",
        "One result file, streamed as an attachment. 404 `not_found` for a name that is not "
        "among the job's results.",
    )
    def get(self, request: Request, job_id: str, name: str) -> FileResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        return result_file_response(selectors.job_result_file(job, name))


class JobFilesArchiveApi(APIView):
    renderer_classes = [JSONRenderer, GzipRenderer]

    @download_schema(
        "jobs_files_archive",
        GzipRenderer,
        "Every result file as one tar.gz, streamed as it is built.",
        "Every result file of the job as one tar.gz archive, built while it is sent (no "
        "Content-Length). Empty (a valid archive of no files) before the results are `ready`.",
    )
    def get(self, request: Request, job_id: str) -> StreamingHttpResponse:
        job = selectors.job_get_for_user(request_user(request), job_id)
        return results_archive_response(job.uuid, list(selectors.job_result_files(job)))
