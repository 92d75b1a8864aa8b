"""REST endpoints of a partition's capacity calendar and idle time, and a cluster's track
record (docs/api.md). The calendar and the track record are public to anyone signed
in; idle time is the owners'."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare.api import ErrorSerializer, validated
from computeshare.openapi import ERRORS
from marketplace import capacity, selectors
from marketplace.api.access import owner_membership
from marketplace.serializers.capacity import (
    TRACK_RECORD_HOW,
    CalendarFilterSerializer,
    CalendarSerializer,
    IdleFilterSerializer,
    IdleTimeSerializer,
    TrackRecordSerializer,
)


class PartitionCalendarApi(APIView):
    @extend_schema(
        operation_id="clusters_partitions_calendar",
        parameters=[
            OpenApiParameter("resource", str, enum=["cpu", "gpu"], required=False),
            OpenApiParameter(
                "start", str, description="ISO 8601; the hour it falls in comes first. Now."
            ),
            OpenApiParameter("hours", int, description="How many hours, 1 to 840; 168."),
        ],
        responses={
            200: CalendarSerializer,
            400: ErrorSerializer,
            401: ErrorSerializer,
            404: ErrorSerializer,
        },
        description=(
            "The partition's capacity calendar: for each hour, the units (core-hours, or "
            "GPU-hours with `resource=gpu`) that its offers take, open or sold, and what is "
            "free of the `capacity_per_hour` its verified CPUs or GPUs give. An offer's units "
            "are spread evenly over its window from the hour it was listed; a cleared offer "
            "counts what it sold, a cancelled one nothing. Listing or extending an offer that "
            "would take any hour past its capacity is refused with 409 "
            "`partition_capacity_exceeded` and those hours. Public, as the offers are."
        ),
    )
    def get(self, request: Request, cluster_id: str, partition: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        found = selectors.partition_get(cluster, partition)
        data = validated(CalendarFilterSerializer, request.query_params)
        start = capacity.hour_floor(data.get("start") or timezone.now())
        hours = selectors.partition_calendar(
            found, data["resource"], start, start + data["hours"] * capacity.HOUR
        )
        return Response(
            CalendarSerializer(
                {
                    "cluster": cluster.uuid,
                    "partition": found.name,
                    "resource": data["resource"],
                    "capacity_per_hour": selectors.partition_capacity(found, data["resource"]),
                    "hours": [
                        {
                            "start": hour.start,
                            "sold": capacity.units_text(hour.sold),
                            "free": capacity.units_text(hour.free),
                        }
                        for hour in hours
                    ],
                }
            ).data
        )


class TrackRecordApi(APIView):
    @extend_schema(
        operation_id="clusters_track_record",
        responses={200: TrackRecordSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
        description="The owners' track record on this cluster, public. " + TRACK_RECORD_HOW,
    )
    def get(self, request: Request, cluster_id: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        record = selectors.track_record(cluster)
        return Response(
            TrackRecordSerializer(
                {
                    "cluster": cluster.uuid,
                    "days": record.days,
                    "since": record.since,
                    "runs_ended_by_owner": record.runs_ended_by_owner,
                    "run_ends": record.run_ends,
                    "outages": record.outages,
                    "unreachable_seconds": record.unreachable_seconds,
                    "unreachable_while_sold_seconds": record.unreachable_while_sold_seconds,
                    "hardware_changes": record.hardware_changes,
                    "how_computed": TRACK_RECORD_HOW,
                }
            ).data
        )


class PartitionIdleApi(APIView):
    @extend_schema(
        operation_id="clusters_partitions_idle",
        parameters=[OpenApiParameter("resource", str, enum=["cpu", "gpu"], required=False)],
        responses={200: IdleTimeSerializer, **ERRORS},
        description=(
            "The owners (members of the cluster's organization; 403 for anyone else): when the "
            "partition has been idle over the last four weeks, by weekday and hour (UTC), from "
            "one sinfo of the cluster per `IDLE_SAMPLE_SECONDS` with the poll; and `suggestion`, "
            "an offer for its next idle window (null when none comes in the coming week): the "
            "units idle and unsold in its leanest hour, in each hour, at the median clearing "
            "price of the partition's last auctions (else of the market's). List it with "
            "POST /offers/."
        ),
    )
    def get(self, request: Request, cluster_id: str, partition: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        found = selectors.partition_get(cluster, partition)
        owner_membership(request, cluster)
        resource = validated(IdleFilterSerializer, request.query_params)["resource"]
        grid = selectors.idle_pattern(found, resource)
        suggestion = selectors.offer_suggestion(found, resource)
        return Response(
            IdleTimeSerializer(
                {
                    "cluster": cluster.uuid,
                    "partition": found.name,
                    "resource": resource,
                    "days": selectors.IDLE_PATTERN_DAYS,
                    "hours": [
                        {
                            "weekday": cell.weekday,
                            "hour": cell.hour,
                            "samples": cell.samples,
                            "mean_idle": f"{cell.mean_idle:.2f}",
                            "share": f"{cell.share:.4f}",
                        }
                        for row in grid
                        for cell in row
                        if cell is not None
                    ],
                    "suggestion": None
                    if suggestion is None
                    else {
                        "window_start": suggestion.window_start,
                        "window_end": suggestion.window_end,
                        "per_hour": suggestion.per_hour,
                        "quantity": suggestion.quantity,
                        "auction_closes_at": suggestion.auction_closes_at,
                        "reserve_price": None
                        if suggestion.reserve_price is None
                        else f"{suggestion.reserve_price:.6f}",
                        "price_basis": suggestion.price_basis,
                    },
                }
            ).data
        )
