"""Advance reservations: the blocks of reserved capacity, held in Slurm for one team's tenant.

A reserved allocation's cores (or, for GPUs, the nodes that carry them: Slurm 22.05 reserves
CPUs, nodes, licenses and burst buffers, not generic resources) are held by `scontrol create
reservation` for its window, with `Users=` the team's tenant: only that Unix user's jobs run on
them, with `--reservation`, and nobody else's. Making, changing and removing reservations takes
Slurm operator rights (`AdminLevel=Operator`), which the owner grants the service user
(`scripts/cluster-setup --reservations`).

Commands are built and output parsed by pure functions (tested on recorded output); the few
functions that take a connection run one command each. Times go as UTC: the bridge runs every
Slurm command with TZ=UTC."""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from hpc.errors import RemoteCommandFailed, ReservationRefused, SchedulerUnavailable
from hpc.slurm.jobs import is_transient_message
from hpc.ssh import SSHConnection
from hpc.types import PLATFORM_PREFIX, Reservation, ReservationSpec

SHOW_COMMAND = ("scontrol", "show", "reservation", "--oneliner")
# What scontrol prints for a reservation that does not exist (delete, show, update).
_UNKNOWN = "requested reservation is invalid"
_NONE_AT_ALL = "no reservations in the system"
_PAIR = re.compile(r"(?:^|\s)([A-Za-z]+)=(\S*)")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
_PARTITION = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
# The probe of verification: a day ahead, so that it never begins, and whatever runs or is
# reserved then (IGNORE_JOBS, OVERLAP): it asks Slurm about the right to reserve, not about room.
PROBE_PREFIX = f"{PLATFORM_PREFIX}verify-"
PROBE_LEAD = timedelta(days=1)
PROBE_LENGTH = timedelta(minutes=1)
PROBE_FLAGS = "Flags=IGNORE_JOBS,OVERLAP"


def _slurm_time(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("a reservation's times must be aware")
    return moment.astimezone(UTC).strftime(_TIME_FORMAT)


def reservation_arguments(spec: ReservationSpec, *, now: datetime) -> list[str]:
    """The `Key=Value` words that describe `spec` to scontrol. A window that has begun starts
    `now` (Slurm refuses a start in the past); the names and users are checked here, since they
    reach a command line."""
    if not _NAME.fullmatch(spec.name) or not spec.name.startswith(PLATFORM_PREFIX):
        raise ValueError(f"not a platform reservation name: {spec.name!r}")
    if not _PARTITION.fullmatch(spec.partition):
        raise ValueError(f"not a partition name: {spec.partition!r}")
    if not spec.users or not all(_USER.fullmatch(user) for user in spec.users):
        raise ValueError(f"a reservation is for one or more Unix users, not {spec.users!r}")
    if (spec.cpus > 0) == (spec.nodes > 0):
        raise ValueError("a reservation holds either cores or whole nodes")
    if spec.end <= max(spec.start, now):
        raise ValueError("a reservation must end in the future, after it starts")
    start = "now" if spec.start <= now else _slurm_time(spec.start)
    size = f"CoreCnt={spec.cpus}" if spec.cpus else f"NodeCnt={spec.nodes}"
    return [
        f"ReservationName={spec.name}",
        f"StartTime={start}",
        f"EndTime={_slurm_time(spec.end)}",
        f"Users={','.join(spec.users)}",
        f"PartitionName={spec.partition}",
        size,
    ]


def parse_reservations(text: str) -> list[Reservation]:
    """`scontrol show reservation --oneliner`: one reservation a line of `Key=Value` words (an
    empty value is `Key=`); "No reservations in the system" when there are none."""
    found = []
    for line in text.splitlines():
        if not line.strip() or _NONE_AT_ALL in line.lower():
            continue
        fields: dict[str, str] = {}
        for key, value in _PAIR.findall(line):
            fields.setdefault(key, value)  # the first of a key: the reservation's own
        found.append(_reservation(fields, line))
    return found


def _reservation(fields: dict[str, str], line: str) -> Reservation:
    try:
        name = fields["ReservationName"]
        start = datetime.strptime(fields["StartTime"], _TIME_FORMAT).replace(tzinfo=UTC)
        end = datetime.strptime(fields["EndTime"], _TIME_FORMAT).replace(tzinfo=UTC)
    except (KeyError, ValueError) as error:
        raise ValueError(
            f"scontrol printed a reservation without a name or times: {line!r}"
        ) from error
    users = tuple(user for user in fields.get("Users", "").split(",") if user and user != "(null)")
    return Reservation(
        name=name,
        partition=_null_to_empty(fields.get("PartitionName", "")),
        start=start,
        end=end,
        users=users,
        cpus=_cpus(fields),
        node_count=_number(fields.get("NodeCnt", "")),
        nodes=_null_to_empty(fields.get("Nodes", "")),
        state=fields.get("State", ""),
    )


def _cpus(fields: dict[str, str]) -> int:
    """The cores held: TRES's cpu= (every core of the nodes, for a reservation of nodes), else
    CoreCnt."""
    for part in fields.get("TRES", "").split(","):
        key, _, value = part.partition("=")
        if key == "cpu":
            return _number(value)
    return _number(fields.get("CoreCnt", ""))


def _number(text: str) -> int:
    return int(text) if text.isdigit() else 0


def _null_to_empty(text: str) -> str:
    return "" if text == "(null)" else text


def _refusal_or_error(error: RemoteCommandFailed) -> Exception:
    """A refusal of Slurm's (busy cores, an overlap, no rights) as `ReservationRefused` with its
    words; a controller that did not answer stays transient."""
    words = (error.stderr or error.stdout).strip()
    if isinstance(error, SchedulerUnavailable) or is_transient_message(words):
        return error
    return ReservationRefused(words or str(error))


def _scontrol(connection: SSHConnection, arguments: Sequence[str], timeout: float) -> str:
    result = connection.run(list(arguments), timeout=timeout, check=False)
    if result.exit_status != 0:
        words = result.stderr + "\n" + result.stdout
        error_class = SchedulerUnavailable if is_transient_message(words) else RemoteCommandFailed
        raise error_class(result.command, result.exit_status, result.stdout, result.stderr)
    return result.stdout


def reservation_create(
    connection: SSHConnection, spec: ReservationSpec, *, timeout: float, now: datetime | None = None
) -> Reservation:
    """Creates `spec`'s reservation and reads it back. `ReservationRefused` when Slurm will not
    hold it."""
    arguments = reservation_arguments(spec, now=now or datetime.now(UTC))
    try:
        _scontrol(connection, ["scontrol", "create", "reservation", *arguments], timeout)
    except RemoteCommandFailed as error:
        raise _refusal_or_error(error) from error
    return _read_back(connection, spec.name, timeout)


def reservation_update(
    connection: SSHConnection, spec: ReservationSpec, *, timeout: float, now: datetime | None = None
) -> Reservation:
    """Brings reservation `spec.name` back to `spec`'s users and end (and its start, while it
    has not begun). Its size stays: Slurm refuses to change the cores of a core-based
    reservation, so one of the wrong size is deleted and made again by the caller.
    `ReservationRefused` when Slurm will not."""
    moment = now or datetime.now(UTC)
    arguments = [
        argument
        for argument in reservation_arguments(spec, now=moment)
        if argument.startswith(("ReservationName=", "EndTime=", "Users="))
        or (argument.startswith("StartTime=") and argument != "StartTime=now")
    ]
    try:
        _scontrol(connection, ["scontrol", "update", *arguments], timeout)
    except RemoteCommandFailed as error:
        raise _refusal_or_error(error) from error
    return _read_back(connection, spec.name, timeout)


def _read_back(connection: SSHConnection, name: str, timeout: float) -> Reservation:
    for reservation in reservations_list(connection, timeout=timeout):
        if reservation.name == name:
            return reservation
    raise ReservationRefused(f"Slurm did not keep the reservation {name}")


def reservation_delete(connection: SSHConnection, name: str, *, timeout: float) -> None:
    """Deletes reservation `name`; one that is not there (ended, or removed by hand) is done
    already."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a reservation name: {name!r}")
    try:
        _scontrol(connection, ["scontrol", "delete", f"ReservationName={name}"], timeout)
    except RemoteCommandFailed as error:
        if _UNKNOWN in (error.stderr + error.stdout).lower():
            return
        raise _refusal_or_error(error) from error


def reservations_list(connection: SSHConnection, *, timeout: float) -> list[Reservation]:
    """Every reservation of the platform's (its names start with `PLATFORM_PREFIX`)."""
    output = _scontrol(connection, SHOW_COMMAND, timeout)
    return [
        reservation
        for reservation in parse_reservations(output)
        if reservation.name.startswith(PLATFORM_PREFIX)
    ]


def reservation_probe(
    connection: SSHConnection,
    *,
    partition: str,
    user: str,
    timeout: float,
    now: datetime | None = None,
) -> Reservation:
    """Creates a one-minute reservation of one core of `partition` for `user`, a day ahead, reads
    it back and deletes it: what verification asks to know that the service user may manage
    reservations. Returns the reservation as Slurm held it. `ReservationRefused` with Slurm's
    words when it will not create it (without operator rights Slurm 22.05 answers "Invalid
    user id"); a reservation that could not be deleted is a `ReservationRefused` naming it."""
    start = (now or datetime.now(UTC)).replace(microsecond=0) + PROBE_LEAD
    spec = ReservationSpec(
        name=PROBE_PREFIX + secrets.token_hex(6),
        partition=partition,
        start=start,
        end=start + PROBE_LENGTH,
        users=(user,),
        cpus=1,
    )
    arguments = [*reservation_arguments(spec, now=start - PROBE_LEAD), PROBE_FLAGS]
    try:
        _scontrol(connection, ["scontrol", "create", "reservation", *arguments], timeout)
    except RemoteCommandFailed as error:
        raise _refusal_or_error(error) from error
    try:
        return _read_back(connection, spec.name, timeout)
    finally:
        try:
            reservation_delete(connection, spec.name, timeout=timeout)
        except ReservationRefused as error:
            raise ReservationRefused(
                f"the test reservation {spec.name} was made but could not be deleted: {error}"
            ) from error
