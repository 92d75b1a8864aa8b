"""The reservation commands' words and the parser of `scontrol show reservation --oneliner`,
on output recorded from the Slurm test cluster (22.05)."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hpc.slurm.reservations import parse_reservations, reservation_arguments
from hpc.types import Reservation, ReservationSpec

RECORDED = Path(__file__).parent / "recorded"
NOW = datetime(2026, 11, 27, 19, 0, tzinfo=UTC)
NAME = "cs-allocation-0d6f3c2e-59a1-4b8e-9d0c-2f8a7b6e4c10"


def test_recorded_reservations_are_read_whole() -> None:
    text = (RECORDED / "scontrol_show_reservation.txt").read_text()

    found = parse_reservations(text)

    assert found == [
        Reservation(
            name=NAME,
            partition="debug",
            start=datetime(2026, 12, 1, 10, tzinfo=UTC),
            end=datetime(2026, 12, 1, 12, tzinfo=UTC),
            users=("cs-fixed-01",),
            cpus=1,
            node_count=1,
            nodes="vm",
            state="INACTIVE",
        ),
        Reservation(
            name="cs-allocation-7b1e2d4f-0c3a-4f5e-8a9b-1c2d3e4f5a6b",
            partition="debug",
            start=datetime(2026, 11, 27, 19, 25, 26, tzinfo=UTC),
            end=datetime(2026, 11, 27, 19, 55, 26, tzinfo=UTC),
            users=("cs-tenant-02", "cs-tenant-03"),
            cpus=2,
            node_count=1,
            nodes="vm",
            state="ACTIVE",
        ),
        Reservation(
            name="owner-maintenance",
            partition="",
            start=datetime(2026, 12, 24, tzinfo=UTC),
            end=datetime(2026, 12, 25, tzinfo=UTC),
            users=("root",),
            cpus=2,
            node_count=1,
            nodes="vm",
            state="INACTIVE",
        ),
    ]


def test_no_reservations_is_an_empty_list() -> None:
    assert parse_reservations("No reservations in the system\n") == []


def test_a_line_without_times_is_not_taken_for_a_reservation() -> None:
    with pytest.raises(ValueError, match="without a name or times"):
        parse_reservations("ReservationName=cs-allocation-x Nodes=vm\n")


def test_a_future_block_of_cores_is_asked_for_with_its_window_in_utc() -> None:
    spec = ReservationSpec(
        name=NAME,
        partition="debug",
        start=datetime(2026, 12, 1, 11, tzinfo=datetime.now().astimezone().tzinfo),
        end=datetime(2026, 12, 1, 13, tzinfo=UTC),
        users=("cs-fixed-01",),
        cpus=3,
    )

    arguments = reservation_arguments(spec, now=NOW)

    start = spec.start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert arguments == [
        f"ReservationName={NAME}",
        f"StartTime={start}",
        "EndTime=2026-12-01T13:00:00",
        "Users=cs-fixed-01",
        "PartitionName=debug",
        "CoreCnt=3",
    ]


def test_a_window_that_has_begun_starts_now_and_nodes_are_counted() -> None:
    spec = ReservationSpec(
        name=NAME,
        partition="gpu",
        start=NOW - timedelta(minutes=10),
        end=NOW + timedelta(hours=1),
        users=("cs-tenant-01",),
        nodes=2,
    )

    arguments = reservation_arguments(spec, now=NOW)

    assert arguments[1] == "StartTime=now"
    assert arguments[-1] == "NodeCnt=2"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "owner-maintenance"}, "not a platform reservation name"),
        ({"name": "cs-x Users=root"}, "not a platform reservation name"),
        ({"partition": "debug Flags=MAINT"}, "not a partition name"),
        ({"users": ("root,cs-fixed-01",)}, "Unix users"),
        ({"users": ()}, "Unix users"),
        ({"cpus": 0}, "either cores or whole nodes"),
        ({"nodes": 1}, "either cores or whole nodes"),
        ({"end": NOW}, "must end in the future"),
    ],
)
def test_nothing_but_checked_words_reach_the_command_line(
    change: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = {
        "name": NAME,
        "partition": "debug",
        "start": NOW + timedelta(hours=1),
        "end": NOW + timedelta(hours=2),
        "users": ("cs-fixed-01",),
        "cpus": 1,
        **change,
    }

    with pytest.raises(ValueError, match=message):
        reservation_arguments(ReservationSpec(**fields), now=NOW)  # type: ignore[arg-type]
