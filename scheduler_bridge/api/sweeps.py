"""The parameter sweep endpoints: a script and a table become one array job, its rows' states,
a retry of the failed rows, and the results gathered into one table (JSON and CSV). Checks go
in the house order: visible (404), allowed (403), state (409), input (400), then the service."""

from __future__ import annotations

import io
from typing import Any

from django.http import HttpResponse, QueryDict
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.parsers import MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare.api import ErrorSerializer, idempotent, paginated, paginated_response, validated
from computeshare.authentication import request_user
from computeshare.csv_export import csv_writer
from computeshare.errors import ValidationFailed
from computeshare.openapi import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from computeshare.parsers import JSONParser
from organizations import selectors as organization_selectors
from scheduler_bridge import errors, services
from scheduler_bridge.api.jobs import CSVRenderer, allocation_open_for_submission
from scheduler_bridge.models import Sweep
from scheduler_bridge.selectors import jobs as selectors
from scheduler_bridge.serializers.sweeps import (
    SweepCreateSerializer,
    SweepDetailSerializer,
    SweepMultipartSchema,
    SweepResultsSerializer,
    SweepRowSerializer,
    SweepSerializer,
    sweep_results_csv_header,
    sweep_results_csv_row,
)
from scheduler_bridge.services.sweep_tables import MAX_TABLE_BYTES

# 415: a body that is neither JSON nor multipart, or a multipart body whose type is lost.
SWEEP_ERRORS = {**ERRORS, 402: ErrorSerializer, 415: ErrorSerializer}
TABLE_FILE_FIELD = "table_file"


def _sweep_body(request: Request) -> dict[str, Any]:
    """The sweep's fields from a JSON body, or from a form whose table may be a CSV file."""
    data = request.data
    if not isinstance(data, QueryDict):  # a JSON body; a form's is a QueryDict
        return data if isinstance(data, dict) else {}
    body: dict[str, Any] = {key: data.get(key) for key in data if key != TABLE_FILE_FIELD}
    upload = request.FILES.get(TABLE_FILE_FIELD)
    if upload is not None:
        if body.get("table"):
            raise ValidationFailed(fields={"table": ["Give the table or a table file, not both."]})
        body["table"] = table_from_upload(upload)
    return body


def table_from_upload(upload: Any) -> str:
    """A CSV file's text: UTF-8 (a byte order mark allowed), at most MAX_TABLE_BYTES."""
    if (upload.size or 0) > MAX_TABLE_BYTES:
        raise errors.SweepTableTooLarge(extra={"limit_bytes": MAX_TABLE_BYTES})
    try:
        return str(upload.read().decode("utf-8"))
    except UnicodeDecodeError as error:
        raise errors.SweepValueInvalid("The table file is not UTF-8 text.") from error


def sweep_request_of(data: dict[str, Any]) -> services.SweepRequest:
    data = dict(data)
    data.pop("allocation", None)
    return services.SweepRequest(**{"table": "", **data})


def _detail(request: Request, sweep_id: Any) -> Response:
    sweep = selectors.sweep_get_for_user(request_user(request), sweep_id)
    rows = list(selectors.sweep_rows(sweep))
    return Response(SweepDetailSerializer(sweep, context={"rows": rows}).data)


class SweepListCreateApi(APIView):
    parser_classes = [JSONParser, MultiPartParser]

    @extend_schema(
        operation_id="sweeps_list",
        parameters=PAGE_PARAMETERS,
        responses={200: paginated(SweepSerializer), **LIST_ERRORS},
    )
    def get(self, request: Request) -> Response:
        return paginated_response(
            request, self, selectors.sweep_list_for_user(request_user(request)), SweepSerializer
        )

    @extend_schema(
        operation_id="sweeps_create",
        request={
            "application/json": SweepCreateSerializer,
            "multipart/form-data": SweepMultipartSchema,
        },
        responses={201: SweepDetailSerializer, **SWEEP_ERRORS},
        parameters=[IDEMPOTENCY_KEY],
        description="Runs the script once per row of the table, as one Slurm array job "
        "(`jobs[0]`) of at most `concurrency` tasks at once: each task gets its row as "
        "environment variables named after the columns and as arguments, and runs in its "
        "row's folder. It reserves `cpus_per_task x time_limit_minutes` for every row, as any "
        "array does (402 `allocation_exhausted`), and is charged per task as it runs. When "
        "every task has ended the results are gathered: GET .../results/ and .../results.csv.",
    )
    def post(self, request: Request) -> Response:
        def create() -> Response:
            allocation, actor = allocation_open_for_submission(request)
            data = validated(SweepCreateSerializer, _sweep_body(request))
            sweep = services.sweep_submit(
                actor=actor, allocation=allocation, request=sweep_request_of(data)
            )
            response = _detail(request, sweep.uuid)
            response.status_code = status.HTTP_201_CREATED
            return response

        return idempotent(request, create)


class SweepDetailApi(APIView):
    @extend_schema(
        operation_id="sweeps_retrieve",
        responses={200: SweepDetailSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
        description="The sweep, its jobs and every row with its last task's state (the grid).",
    )
    def get(self, request: Request, sweep_id: str) -> Response:
        return _detail(request, sweep_id)


class SweepRetryFailedApi(APIView):
    @extend_schema(
        operation_id="sweeps_retry_failed",
        request=None,
        responses={201: SweepDetailSerializer, **SWEEP_ERRORS},
        description="Submits the rows whose task did not complete as one new array job, "
        "which reserves and is charged for those rows only. 409 `sweep_still_running` before "
        "the sweep has ended, 409 `sweep_nothing_to_retry` when no row failed, 402 "
        "`allocation_exhausted`, 409 `allocation_not_active`.",
    )
    def post(self, request: Request, sweep_id: str) -> Response:
        sweep = selectors.sweep_get_for_user(request_user(request), sweep_id)
        actor = organization_selectors.membership_in(request_user(request), sweep.organization_id)
        assert actor is not None
        services.sweep_retry_failed(actor=actor, sweep=sweep)
        response = _detail(request, sweep_id)
        response.status_code = status.HTTP_201_CREATED
        return response


class SweepResultsApi(APIView):
    @extend_schema(
        operation_id="sweeps_results",
        responses={200: SweepResultsSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
        description="Every row joined with its result, in table order (not paginated: a "
        "sweep has at most SWEEP_MAX_ROWS rows). A row's `result_state` is `pending` until "
        "its job's files are fetched; a missing or failed result is marked, never left out.",
    )
    def get(self, request: Request, sweep_id: str) -> Response:
        sweep = selectors.sweep_get_for_user(request_user(request), sweep_id)
        rows = list(selectors.sweep_rows(sweep))
        return Response(
            {
                "sweep": str(sweep.uuid),
                "state": sweep.state,
                "columns": sweep.columns,
                "count": len(rows),
                "rows": SweepRowSerializer(
                    rows, many=True, context={"columns": sweep.columns}
                ).data,
            }
        )


def sweep_results_csv(sweep: Sweep, rows: list[Any]) -> HttpResponse:
    buffer = io.StringIO()
    writer = csv_writer(buffer)
    writer.writerow(sweep_results_csv_header(sweep.columns))
    for row in rows:
        writer.writerow(sweep_results_csv_row(row))
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="sweep-{sweep.uuid}-results.csv"'
    return response


class SweepResultsCsvApi(APIView):
    renderer_classes = [JSONRenderer, CSVRenderer]

    @extend_schema(
        operation_id="sweeps_results_csv",
        responses={
            (200, "text/csv"): OpenApiResponse(
                str,
                description="Columns: row, the table's columns, result, result_state, "
                "task_state, exit_code, detail; one line per row, in table order.",
            ),
            401: ErrorSerializer,
            404: ErrorSerializer,
        },
    )
    def get(self, request: Request, sweep_id: str) -> HttpResponse:
        sweep = selectors.sweep_get_for_user(request_user(request), sweep_id)
        return sweep_results_csv(sweep, list(selectors.sweep_rows(sweep)))
