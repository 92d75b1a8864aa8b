"""A job's result files: `computeshare jobs files` lists them, `jobs download` streams them to
disk (by name, or all of them as one archive unpacked as it arrives) once they are collected."""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import httpx
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from computeshare_cli.client import ApiClient
from computeshare_cli.context import State, pass_state
from computeshare_cli.errors import CliError, ExitCode
from computeshare_cli.jobs.following import ENDED
from computeshare_cli.output import json_print, size_text, stderr, table_print
from computeshare_cli.parsing import ArgumentError, download_target


@click.command("files")
@click.argument("job_id")
@pass_state
def jobs_files(state: State, job_id: str) -> None:
    """The files the job left in its folder, with their sizes."""
    client = state.client()
    job_id = state.resolve("job", job_id)
    first = client.get(f"/jobs/{job_id}/files/", {"page_size": 1})
    rows = list(client.paginate(f"/jobs/{job_id}/files/"))
    if state.as_json:
        json_print(
            {key: first.get(key) for key in ("state", "truncated", "detail")} | {"results": rows}
        )
        return
    if first.get("state") not in (None, "ready"):
        stderr.print(f"Result files: {first['state']}. {first.get('detail') or ''}".rstrip())
    if first.get("truncated"):
        stderr.print(
            "The job wrote more than the platform keeps: the files past the limit are missing."
        )
    table_print(
        ({**row, "size_text": size_text(row.get("size"))} for row in rows),
        [("name", "name"), ("size", "size_text"), ("bytes", "size"), ("modified", "modified_at")],
        empty="No result files (yet).",
    )


@click.command("download")
@click.argument("job_id")
@click.argument("names", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every result file (one archive).")
@click.option(
    "-o",
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
)
@click.option(
    "--archive",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --all: keep the .tar.gz as this file instead of unpacking it.",
)
@click.option(
    "--results-timeout",
    type=click.FloatRange(min=0),
    default=300,
    show_default=True,
    help="Seconds to wait for the files of a job that just ended to be collected.",
)
@pass_state
def jobs_download(
    state: State,
    job_id: str,
    names: tuple[str, ...],
    everything: bool,
    output_dir: Path,
    archive: Path | None,
    results_timeout: float,
) -> None:
    """Download result files by NAME, or --all of them, streamed to disk."""
    if everything == bool(names):
        raise ArgumentError("Name the files to download, or give --all (not both).")
    if archive and not everything:
        raise ArgumentError("--archive goes with --all.")
    client = state.client()
    job_id = state.resolve("job", job_id)
    _results_ready(client, job_id, timeout=results_timeout)
    written: list[Path] = []
    if everything:
        if archive:
            _download_to(client, f"/jobs/{job_id}/files.tar.gz", archive, quiet=state.as_json)
            written.append(archive)
        else:
            written.extend(_download_all(client, job_id, output_dir, quiet=state.as_json))
    else:
        for name in names:
            target = download_target(output_dir, name)
            _download_to(client, f"/jobs/{job_id}/files/{name}", target, quiet=state.as_json)
            written.append(target)
    if state.as_json:
        json_print([str(path) for path in written])
    else:
        stderr.print(f"{len(written)} file(s) written under {output_dir}.")


def _results_ready(client: ApiClient, job_id: str, *, timeout: float) -> None:
    """Returns once the job's result files can be downloaded: at once when they are `ready`,
    after waiting while they are collected; else a conflict naming their state."""
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(f"/jobs/{job_id}/")
        results = job.get("results_state", "ready")
        if results == "ready":
            return
        is_coming = results == "collecting" or (results == "waiting" and job["state"] in ENDED)
        if is_coming and time.monotonic() < deadline:
            time.sleep(1.0)
            continue
        detail = {
            "waiting": "The job has not ended: its files come once it has "
            "(`computeshare jobs wait`).",
            "collecting": "The job's files are still being collected; try again shortly.",
            "failed": "Collecting the job's files failed.",
            "expired": "The job's files were removed after the retention period.",
            "not_kept": "The platform keeps no files of a job its own jobs submitted.",
        }.get(results, f"The job's files are {results}.")
        raise CliError(detail, code=f"results_{results}", exit_code=ExitCode.CONFLICT, status=None)


def _bar(quiet: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=stderr,
        disable=quiet,
        transient=True,
    )


def _download_to(client: ApiClient, path: str, target: Path, *, quiet: bool) -> None:
    """Streams the answer to `target` through a temporary file beside it, renamed once the
    whole body has come: an interrupted download never leaves a file that looks complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with client.stream(path) as answer, _bar(quiet) as progress:
        length = answer.headers.get("Content-Length")
        task = progress.add_task(target.name, total=int(length) if length else None)
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 (renamed or removed below)
            dir=target.parent, prefix=f".{target.name}.", suffix=".part", delete=False
        )
        try:
            with handle:
                for chunk in answer.iter_bytes():
                    handle.write(chunk)
                    progress.advance(task, len(chunk))
            if length is not None and Path(handle.name).stat().st_size != int(length):
                raise CliError(
                    f"The download of {target.name} ended early.",
                    code="download_incomplete",
                    exit_code=ExitCode.UNAVAILABLE,
                )
            Path(handle.name).replace(target)
        except BaseException:
            Path(handle.name).unlink(missing_ok=True)
            raise


def _download_all(client: ApiClient, job_id: str, folder: Path, *, quiet: bool) -> list[Path]:
    """Unpacks the job's files.tar.gz into `folder` as it arrives (tarfile's stream mode reads
    it once, front to back), keeping only regular files whose names stay inside `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with client.stream(f"/jobs/{job_id}/files.tar.gz") as answer, _bar(quiet) as progress:
        task = progress.add_task("files.tar.gz", total=None)
        reader = _ChunkReader(answer.iter_bytes(), lambda n: progress.advance(task, n))
        with tarfile.open(fileobj=reader, mode="r|gz") as archive:
            for member in archive:
                if not member.isfile():
                    continue
                target = download_target(folder, member.name)
                source = archive.extractfile(member)
                if source is None:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with source, target.open("wb") as handle:
                    shutil.copyfileobj(source, handle, 1 << 20)
                written.append(target)
    return written


class _ChunkReader(io.RawIOBase):
    """The chunks of a streamed answer as a file that tarfile can read front to back."""

    def __init__(self, chunks: Iterator[bytes], on_read: Callable[[int], object]) -> None:
        self.chunks = chunks
        self.buffer = memoryview(b"")  # a view, so that taking its front copies nothing
        self.on_read = on_read

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self.buffer:
            try:
                self.buffer = memoryview(next(self.chunks))
            except StopIteration:
                return 0
            except httpx.TransportError as error:
                raise CliError(
                    f"The download was cut off: {error}",
                    code="download_incomplete",
                    exit_code=ExitCode.UNAVAILABLE,
                ) from error
            self.on_read(len(self.buffer))
        size = min(len(target), len(self.buffer))
        target[:size] = self.buffer[:size]
        self.buffer = self.buffer[size:]
        return size
