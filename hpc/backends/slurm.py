"""The Slurm backend: a cluster's login node over one SSH connection (commands and SFTP).

Everything done for a team runs as its tenant (the pool account it leases), through sudo: its
job directories are in the tenant's home, written by the submission script that runs its
sbatch calls as the tenant (input files are staged, and outputs read, over an SFTP session
started as the tenant), and its scancel runs as the tenant. The service user itself only reads
the queue and accounting, for every tenant at once.

Each call is a fixed, small number of remote commands whatever the number of jobs: a batch of
one tenant's submissions is one shell script writing the files and running every sbatch (plus
one SFTP session when there are input files to stage), a poll is one squeue for all the
tenants, accounting is one sacct per chunk of ids."""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import BinaryIO

import paramiko

from hpc import job_folder
from hpc.batches import batched
from hpc.errors import (
    JobFileUnsafe,
    RemoteCommandFailed,
    SchedulerUnavailable,
    SubmissionUnclear,
    UnexpectedOutput,
)
from hpc.slurm import reservations
from hpc.slurm.accounting import (
    NAME_CHUNK,
    SACCT_CHUNK,
    parse_sacct_by_name,
    parse_sacct_runs,
    parse_squeue,
    parse_squeue_by_name,
    sacct_by_name_arguments,
    sacct_runs_arguments,
    sacct_users_arguments,
    squeue_arguments,
    squeue_by_name_arguments,
    valid_job_ids,
)
from hpc.slurm.jobs import (
    Submission,
    SubmissionOutcome,
    is_transient_message,
    job_directory_problem,
    only_ended_jobs_refused,
    parse_submission_output,
    parse_test_only,
    reader_arguments,
    reader_source,
    refusal_reason,
    result_listing,
    sbatch_arguments,
    scancel_arguments,
    spec_problem,
    stream_folders,
    submission_script,
    test_only_arguments,
)
from hpc.slurm.parsers import parse_sbatch_parsable
from hpc.ssh import CommandResult, RemoteOutput, SSHConnection
from hpc.types import (
    InputFile,
    JobSpec,
    QueueEntry,
    Reservation,
    ReservationSpec,
    ResultFile,
    RunRecord,
    Stream,
    SubmitResult,
    Tenant,
    output_file_name,
)

# The submission script gets this much more time per sbatch it runs (about 15 ms each on an
# idle controller), on top of the command timeout.
_SECONDS_PER_SUBMISSION = 0.25
# A job's results: at most this many files (one more than the platform keeps, so that the
# caller can tell there were more), this many folders deep, are listed.
MAX_RESULT_FILES = 10001
MAX_RESULT_DEPTH = 16
# SFTP reads in flight per file (32 KiB each, 8 MiB in all): enough to fill the pipe, bounded.
_PREFETCH_REQUESTS = 256
_COPY_CHUNK = 1024 * 1024


class SlurmBackend:
    """`Backend` for a Slurm cluster reached over `connection` as the service user, acting as
    each team's tenant through sudo. Every remote command runs under `command_timeout`
    seconds."""

    def __init__(
        self,
        connection: SSHConnection,
        *,
        command_timeout: float = 60.0,
        record_grace: timedelta = timedelta(seconds=60),
        submit_lanes: int = 2,
    ) -> None:
        self.connection = connection
        self.command_timeout = command_timeout
        # How many sbatch calls of a tenant's batch run at once on the login node (see
        # `submission_script`).
        self.submit_lanes = submit_lanes
        # How long after its end a run without a batch step is taken as whole (see
        # `parse_sacct_runs`).
        self.record_grace = record_grace

    # --- Submission -----------------------------------------------------------------------------

    def submit(self, specs: Sequence[JobSpec]) -> list[SubmitResult]:
        """Submits every spec as its tenant: one tenant's specs share one remote command (their
        scripts and environments written, and all their sbatch calls), and one SFTP session
        before it when some have input files to stage. A spec
        Slurm refuses gets its reason (transient when the controller did not answer) without
        touching the others. When the outcome of a tenant's batch is unclear (the command
        failed, the connection dropped, the output is unreadable), this raises a transient
        error: the caller must `find` the names before submitting them again. Callers that
        want one tenant's trouble not to hold up another's call this once per tenant."""
        results: list[SubmitResult | None] = [None] * len(specs)
        by_tenant: dict[Tenant, list[int]] = {}
        for index, spec in enumerate(specs):
            problem = spec_problem(spec)
            if problem is None and spec.tenant is None:
                problem = "a job on a Slurm cluster runs as a tenant account: none was given"
            if problem is not None:
                results[index] = SubmitResult(spec.name, None, error=problem)
            else:
                assert spec.tenant is not None
                by_tenant.setdefault(spec.tenant, []).append(index)
        for tenant, indices in by_tenant.items():
            for index, result in zip(
                indices, self._submit_as(tenant, [specs[i] for i in indices]), strict=True
            ):
                results[index] = result
        finished = [result for result in results if result is not None]
        assert len(finished) == len(specs), "every spec has a result"
        return finished

    def _submit_as(self, tenant: Tenant, specs: list[JobSpec]) -> list[SubmitResult]:
        """One remote command as the tenant writes the batch's scripts and variables and runs
        its sbatch calls (`submission_script`); an SFTP session is opened before it only when
        some spec has input files to stage."""
        results: list[SubmitResult | None] = [None] * len(specs)
        if any(spec.input_files for spec in specs):
            self._stage_inputs(tenant, specs, results)
        submissions: list[tuple[int, Submission]] = []
        for index, spec in enumerate(specs):
            if results[index] is not None:
                continue
            directory = posixpath.join(tenant.home, spec.directory)
            submissions.append(
                (
                    index,
                    Submission(
                        directory=directory,
                        arguments=sbatch_arguments(spec, directory),
                        script=spec.script,
                        environment=spec.environment,
                        folders=tuple(
                            posixpath.join(directory, folder) for folder in stream_folders(spec)
                        ),
                    ),
                )
            )
        if submissions:
            outcomes = self._run_sbatches(tenant, [submission for _, submission in submissions])
            for (index, _), outcome in zip(submissions, outcomes, strict=True):
                results[index] = outcome_result(specs[index].name, outcome)
        return [result for result in results if result is not None]

    def _stage_inputs(
        self, tenant: Tenant, specs: list[JobSpec], results: list[SubmitResult | None]
    ) -> None:
        """Copies the specs' input files into their job directories over one SFTP session as
        the tenant; a spec whose files cannot be written gets its refusal in `results`."""
        with self.connection.sftp(self.command_timeout, as_user=tenant.user) as sftp:
            created: set[str] = {tenant.home}
            for index, spec in enumerate(specs):
                if not spec.input_files:
                    continue
                directory = posixpath.join(tenant.home, spec.directory)
                try:
                    _make_directories(sftp, directory, created)
                    for input_file in spec.input_files:
                        _stage_input(sftp, directory, input_file, created)
                except OSError as error:
                    channel = sftp.get_channel()
                    if (
                        isinstance(error, TimeoutError)
                        or channel is None
                        or channel.closed
                        or not self.connection.is_open
                    ):
                        raise  # no answer of the server's: the SFTP session reports it
                    results[index] = SubmitResult(
                        spec.name, None, error=f"cannot write the job files in {directory}: {error}"
                    )

    def _run_sbatches(
        self, tenant: Tenant, submissions: list[Submission]
    ) -> list[SubmissionOutcome]:
        token = f"@@computeshare-{uuid.uuid4().hex}@@"
        script = submission_script(submissions, token, lanes=self.submit_lanes)
        timeout = self.command_timeout + _SECONDS_PER_SUBMISSION * len(submissions)
        try:
            result = self.connection.run(
                ["/bin/sh", "-s"], stdin=script.encode(), timeout=timeout, as_user=tenant.user
            )
            return parse_submission_output(result.stdout, token, len(submissions))
        except (RemoteCommandFailed, UnexpectedOutput) as error:
            raise SubmissionUnclear(
                f"the submission of {len(submissions)} jobs as {tenant.user} is unclear: {error}"
            ) from error

    # --- Following ------------------------------------------------------------------------------

    def find(self, names: Sequence[str], users: Sequence[str]) -> dict[str, str]:
        """The job id (for an array, the array's id) of every name that squeue or the last 7
        days of accounting know among the jobs of `users`. Names that could never have been
        submitted are not looked up."""
        wanted = list(dict.fromkeys(name for name in names if name and "," not in name))
        if not wanted or not users:
            return {}
        found: dict[str, str] = {}
        for chunk in batched(wanted, NAME_CHUNK):
            queued = parse_squeue_by_name(
                self._slurm(squeue_by_name_arguments(users, chunk)).stdout
            )
            accounted = parse_sacct_by_name(
                self._slurm(sacct_by_name_arguments(users, chunk)).stdout
            )
            for source in (accounted, queued):
                for name, job_id in source.items():
                    if name in chunk and (name not in found or int(job_id) > int(found[name])):
                        found[name] = job_id
        return found

    def queue(self, users: Sequence[str]) -> list[QueueEntry]:
        if not users:
            return []
        return parse_squeue(self._slurm(squeue_arguments(users)).stdout)

    def runs(self, job_ids: Sequence[str]) -> list[RunRecord]:
        records: list[RunRecord] = []
        for chunk in batched(valid_job_ids(job_ids), SACCT_CHUNK):
            output = self._slurm(sacct_runs_arguments(chunk)).stdout
            records += parse_sacct_runs(
                output, with_steps=True, now=datetime.now(UTC), step_grace=self.record_grace
            )
        return records

    def runs_of_users(
        self, users: Sequence[str], start: datetime, end: datetime
    ) -> list[RunRecord]:
        if not users:
            return []
        output = self._slurm(sacct_users_arguments(users, start, end)).stdout
        return parse_sacct_runs(output)

    def cancel(self, tenant: Tenant | None, job_ids: Sequence[str]) -> None:
        """One scancel, as the tenant, for every id: a tenant can only ever cancel its own jobs.
        Slurm versions differ on ids that have ended: 22.05 exits 0 in silence, others print
        "Invalid job id specified" and exit 1; both are success."""
        if not job_ids:
            return
        # Without a tenant: a job submitted before jobs ran as tenants, the service user's own.
        arguments = scancel_arguments(valid_job_ids(job_ids))
        result = self.connection.run(
            arguments,
            timeout=self.command_timeout,
            check=False,
            as_user=tenant.user if tenant is not None else None,
        )
        if result.exit_status != 0 and not only_ended_jobs_refused(result.stderr):
            raise _command_error(result)

    def output_tail(
        self,
        tenant: Tenant | None,
        directory: str,
        stream: Stream,
        array_task_id: int | None,
        tail_bytes: int,
        name: str | None = None,
    ) -> bytes:
        """Read by the job-folder reader as the tenant, without following a link: raises
        `JobFileUnsafe` when the job replaced the file by a link or anything but a regular
        file."""
        if tail_bytes <= 0:
            _directory_check(directory)
            return b""
        name = name or output_file_name(stream, array_task_id)
        with self._reader(tenant, directory, ["tail", _hex(name), str(tail_bytes)]) as output:
            return output.read(tail_bytes)

    # --- Files ----------------------------------------------------------------------------------

    def result_files(self, tenant: Tenant | None, directory: str) -> list[ResultFile]:
        """Walks the job's directory as the tenant with the job-folder reader: each folder
        entered from its parent's descriptor without following a link (a link could point at
        another job's files or the tenant's home, a FIFO would hold the read forever); what is
        not read is listed with its `problem`."""
        files: list[tuple[str, int, float]] = []
        skipped: list[tuple[str, str]] = []
        arguments = ["list", str(MAX_RESULT_FILES), str(MAX_RESULT_DEPTH)]
        with self._reader(tenant, directory, arguments) as output:
            while line := output.readline():
                kind, name, *values = line.decode().split()
                if kind == "F":
                    files.append((_unhex(name), int(values[0]), float(values[1])))
                else:
                    skipped.append((_unhex(name), bytes.fromhex(values[0]).decode()))
        return result_listing(files, skipped)

    def result_fetch(
        self,
        tenant: Tenant | None,
        directory: str,
        names: Sequence[str],
        save: Callable[[str, BinaryIO], None],
    ) -> dict[str, str]:
        """One run of the job-folder reader as the tenant streams every named file, each opened
        from the job folder's descriptor without following a link; `save` reads each in chunks
        as it arrives. A name that is gone, or is no longer a regular file since the listing (a
        folder on its way swapped for a link included), comes back with the reason."""
        if not names:
            _directory_check(directory)
            return {}
        refused: dict[str, str] = {}
        request = "".join(f"{_hex(name)}\n" for name in names).encode()
        with self._reader(tenant, directory, ["read"], request) as output:
            answered: set[str] = set()
            while line := output.readline():
                text = line.decode().rstrip("\n")
                hex_name, _, reason = text[1:].partition(" ")
                name = _unhex(hex_name)
                answered.add(name)
                if text.startswith("-"):
                    refused[name] = bytes.fromhex(reason).decode()
                    continue
                frames = _Frames(output)
                save(name, frames)  # type: ignore[arg-type]
                frames.skip_rest()
            for name in names:
                if name not in answered:
                    refused[name] = "it is no longer in the job's folder"
        return refused

    def expected_start(self, spec: JobSpec) -> datetime | None:
        """`sbatch --test-only` as the tenant, the script on stdin: Slurm's own estimate of
        when the job would start, nothing submitted."""
        if spec.tenant is None:
            return None
        result = self.connection.run(
            test_only_arguments(spec),
            stdin=spec.script.encode(),
            timeout=self.command_timeout,
            check=False,
            as_user=spec.tenant.user,
        )
        if result.exit_status != 0:
            raise _command_error(result)
        return parse_test_only(result.stderr + "\n" + result.stdout)

    # --- Reservations (the service user, a Slurm operator) ----------------------------------

    def reservation_create(self, spec: ReservationSpec) -> Reservation:
        return reservations.reservation_create(self.connection, spec, timeout=self.command_timeout)

    def reservation_update(self, spec: ReservationSpec) -> Reservation:
        return reservations.reservation_update(self.connection, spec, timeout=self.command_timeout)

    def reservation_delete(self, name: str) -> None:
        reservations.reservation_delete(self.connection, name, timeout=self.command_timeout)

    def reservations(self) -> list[Reservation]:
        return reservations.reservations_list(self.connection, timeout=self.command_timeout)

    @contextmanager
    def _reader(
        self,
        tenant: Tenant | None,
        directory: str,
        arguments: list[str],
        request: bytes = b"",
    ) -> Iterator[RemoteOutput]:
        """Runs the job-folder reader (`hpc.job_folder`, sent on stdin) on the login node as
        the tenant, in the job's directory of its home, and hands over its output as it comes.
        Without a tenant: a job submitted before jobs ran as tenants, in the service user's
        home. A refusal of the reader raises `JobFileUnsafe`."""
        _directory_check(directory)
        home = tenant.home if tenant is not None else self.connection.home
        try:
            with self.connection.stream(
                reader_arguments(home, directory, arguments),
                stdin=reader_source() + request,
                timeout=self.command_timeout,
                as_user=tenant.user if tenant is not None else None,
            ) as output:
                yield output
        except RemoteCommandFailed as error:
            if error.exit_status == job_folder.EXIT_REFUSED:
                raise JobFileUnsafe(error.stderr.strip().removeprefix("refused: ")) from None
            raise

    def close(self) -> None:
        """Closes the connection. A pooled connection opens again on its next use."""
        self.connection.close()

    def _slurm(self, arguments: list[str]) -> CommandResult:
        """Runs a Slurm command whose non-zero exit is an error: transient when the controller
        or the database did not answer, final otherwise."""
        result = self.connection.run(arguments, timeout=self.command_timeout, check=False)
        if result.exit_status != 0:
            raise _command_error(result)
        return result


def _directory_check(directory: str) -> None:
    problem = job_directory_problem(directory)
    if problem is not None:
        raise ValueError(problem)


def _hex(name: str) -> str:
    return os.fsencode(name).hex()


def _unhex(text: str) -> str:
    return os.fsdecode(bytes.fromhex(text))


class _Frames:
    """One file of the reader's `read` answer, as a file object `save` reads: its frames (a
    4-byte length, then that many bytes) until the empty one."""

    def __init__(self, output: RemoteOutput) -> None:
        self.output = output
        self.left = 0
        self.ended = False

    def read(self, size: int = -1) -> bytes:
        chunks = []
        wanted = size if size >= 0 else 1 << 62
        while wanted > 0 and not self.ended:
            if self.left == 0:
                header = self.output.read_exactly(job_folder.FRAME_HEADER_BYTES)
                self.left = int.from_bytes(header, "big")
                if self.left == 0:
                    self.ended = True
                    break
            chunk = self.output.read_exactly(min(self.left, wanted, _COPY_CHUNK))
            self.left -= len(chunk)
            wanted -= len(chunk)
            chunks.append(chunk)
        return b"".join(chunks)

    def skip_rest(self) -> None:
        while not self.ended:
            self.read(_COPY_CHUNK)


def _command_error(result: CommandResult) -> RemoteCommandFailed:
    error_class = (
        SchedulerUnavailable
        if is_transient_message(result.stderr + "\n" + result.stdout)
        else RemoteCommandFailed
    )
    return error_class(result.command, result.exit_status, result.stdout, result.stderr)


def outcome_result(name: str, outcome: SubmissionOutcome) -> SubmitResult:
    if outcome.exit_status != 0:
        reason = refusal_reason(outcome)
        return SubmitResult(name, None, error=reason, is_transient=is_transient_message(reason))
    try:
        return SubmitResult(name, parse_sbatch_parsable(outcome.stdout).job_id)
    except UnexpectedOutput as error:
        # sbatch said yes but no id can be read: the job may exist, so this is no refusal.
        raise SubmissionUnclear(f"sbatch accepted {name} without a readable id: {error}") from error


def _make_directories(sftp: paramiko.SFTPClient, directory: str, created: set[str]) -> None:
    """`mkdir -p -m 0700` over SFTP, trying the deepest directory first: the parents usually
    exist, so a new job directory costs one request."""
    if directory in created:
        return
    try:
        sftp.mkdir(directory, 0o700)
    except FileNotFoundError:
        _make_directories(sftp, posixpath.dirname(directory), created)
        sftp.mkdir(directory, 0o700)
    except OSError:
        # OpenSSH answers a generic failure when the directory exists.
        attributes = sftp.stat(directory)
        if not stat.S_ISDIR(attributes.st_mode or 0):
            raise NotADirectoryError(f"{directory} exists and is not a directory") from None
        sftp.chmod(directory, 0o700)
    created.add(directory)


def _write_file(sftp: paramiko.SFTPClient, path: str, content: bytes, mode: int) -> None:
    with sftp.open(path, "wb") as handle:
        # The mode is set before the content arrives, so the content is never readable by others.
        handle.chmod(mode)
        handle.set_pipelined(True)
        handle.write(content)


def _stage_input(
    sftp: paramiko.SFTPClient, directory: str, input_file: InputFile, created: set[str]
) -> None:
    """Copies one input file into the job's directory (its folders made as needed), the
    tenant's alone, streamed in chunks from platform storage. A copy left by an earlier attempt
    is overwritten."""
    path = posixpath.join(directory, input_file.name)
    _make_directories(sftp, posixpath.dirname(path), created)
    with input_file.open() as source, sftp.open(path, "wb") as handle:
        handle.chmod(0o600)
        handle.set_pipelined(True)
        shutil.copyfileobj(source, handle, _COPY_CHUNK)
