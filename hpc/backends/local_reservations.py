"""Reservations on the `local` scheduler: the block of a reserved allocation in the demo.

This machine has no owner's users to keep out, so a reservation here holds nothing back from
anyone; what it keeps is the bookkeeping Slurm keeps, with Slurm's refusals: the machine's CPUs
are never reserved twice over in any moment, a job may run in a reservation that exists, and
the platform can list and delete what it made. One JSON file a reservation under the
scheduler's state directory, written whole, changed under one lock.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from hpc.backends.local_state import StateDirectory, write_atomically
from hpc.errors import ReservationRefused
from hpc.types import PLATFORM_PREFIX, Reservation, ReservationSpec

PARTITION = "local"


class LocalReservations:
    """The reservations of the local scheduler whose state is `state`, on a machine of `cpus`."""

    def __init__(self, state: StateDirectory, cpus: int) -> None:
        self.directory = state.path / "reservations"
        self.directory.mkdir(mode=0o700, exist_ok=True)
        self.lock = state.path / "reservations.lock"
        self.state = state
        self.cpus = cpus

    def create(self, spec: ReservationSpec) -> Reservation:
        """Records `spec`; refused as Slurm refuses it: another partition, more than the one
        node, a window that ends before it starts, a name taken, or more CPUs than are left in
        some moment of the window."""
        return self._write(spec, replacing=False)

    def update(self, spec: ReservationSpec) -> Reservation:
        """Replaces the reservation `spec.name` with `spec`, under the same checks."""
        return self._write(spec, replacing=True)

    def _write(self, spec: ReservationSpec, *, replacing: bool) -> Reservation:
        problem = self._problem(spec)
        if problem:
            raise ReservationRefused(f"Error creating the reservation: {problem}")
        with self.state.locked(self.lock):
            if self._path(spec.name).exists() != replacing:
                raise ReservationRefused(
                    "Requested reservation is invalid"
                    if replacing
                    else "Error creating the reservation: Duplicate reservation name"
                )
            overlapping = [
                held
                for held in self.list()
                if held.name != spec.name and held.start < spec.end and spec.start < held.end
            ]
            free = self.cpus - sum(held.cpus for held in overlapping)
            cpus = self.cpus if spec.nodes else spec.cpus
            if cpus > free:
                raise ReservationRefused(
                    "Error creating the reservation: Requested nodes are busy "
                    f"({cpus} CPUs asked, {max(free, 0)} of {self.cpus} not reserved)"
                )
            reservation = Reservation(
                name=spec.name,
                partition=PARTITION,
                start=spec.start,
                end=spec.end,
                users=spec.users,
                cpus=cpus,
                node_count=1,
                nodes="localhost",
            )
            write_atomically(self._path(spec.name), _encode(reservation), durable=True)
        return reservation

    def _problem(self, spec: ReservationSpec) -> str:
        if spec.partition != PARTITION:
            return f"invalid partition {spec.partition!r}: the local cluster has 'local'"
        if spec.nodes > 1:
            return f"{spec.nodes} nodes asked: the local cluster has one"
        if spec.cpus < 1 and spec.nodes < 1:
            return "a reservation holds at least one CPU"
        if spec.end <= spec.start:
            return "the reservation must end after it starts"
        if not spec.name.startswith(PLATFORM_PREFIX) or "/" in spec.name:
            return f"invalid reservation name {spec.name!r}"
        return ""

    def delete(self, name: str) -> None:
        with self.state.locked(self.lock):
            self._path(name).unlink(missing_ok=True)

    def list(self) -> list[Reservation]:
        """Every reservation whose window has not ended (Slurm forgets them at their end)."""
        now = datetime.now().astimezone()
        found = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                reservation = _decode(path.read_bytes())
            except FileNotFoundError:  # deleted while listed
                continue
            if reservation.end > now:
                found.append(_with_state(reservation, now))
        return found

    def exists(self, name: str) -> bool:
        return any(reservation.name == name for reservation in self.list())

    def _path(self, name: str) -> Path:
        return self.directory / f"{name}.json"


def _with_state(reservation: Reservation, now: datetime) -> Reservation:
    state = "ACTIVE" if reservation.start <= now else "INACTIVE"
    return Reservation(**{**reservation.__dict__, "state": state})


def _encode(reservation: Reservation) -> bytes:
    return json.dumps(
        {
            "name": reservation.name,
            "partition": reservation.partition,
            "start": reservation.start.isoformat(),
            "end": reservation.end.isoformat(),
            "users": list(reservation.users),
            "cpus": reservation.cpus,
        }
    ).encode()


def _decode(content: bytes) -> Reservation:
    data = json.loads(content)
    return Reservation(
        name=data["name"],
        partition=data["partition"],
        start=datetime.fromisoformat(data["start"]),
        end=datetime.fromisoformat(data["end"]),
        users=tuple(data["users"]),
        cpus=int(data["cpus"]),
        node_count=1,
        nodes="localhost",
    )
