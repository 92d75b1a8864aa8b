"""A job's folder on the `local` backend, attacked by the job itself (issue 29): links to files
and folders, hard links, FIFOs, a folder swapped for a link between the listing of the results
and their fetch, and array tasks that plant links where the next task's output goes. The jobs
run in bubblewrap as the test settings require; the platform reads and writes their folders
outside it, as the demo's platform user, through `hpc.job_folder`. The same tricks on the Slurm
test cluster are in test_job_folder_links_slurm.py."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from hpc import job_folder
from hpc.backends.local import LocalBackend
from hpc.errors import JobFileUnsafe
from tests.hpc.test_local_backend import (
    job_spec,
    make_backend,
    submit_one,
    wait_for_end,
    wait_until,
)

SECRET = b"every password hash and every session key\n"


@pytest.fixture
def machine(tmp_path: Path) -> Path:
    """A stand-in for the demo's `var/`: the local cluster's root, and beside it the SQLite
    database, which the job cannot see from its sandbox but can name in a link."""
    var = tmp_path / "var"
    (var / "local-cluster").mkdir(parents=True)
    (var / "db.sqlite3").write_bytes(SECRET)
    (var / "outside").mkdir()
    (var / "outside" / "a.txt").write_bytes(SECRET)
    return var


@pytest.fixture
def backend(machine: Path) -> Iterator[LocalBackend]:
    backend = make_backend(machine / "local-cluster")
    yield backend
    backend.cancel(None, sorted({entry.array_job_id for entry in backend.queue([])}))
    wait_until(lambda: backend.queue([]) == [], timeout=10)
    assert list(backend.state.jobs.glob("*/supervisor.log")) == []


def run(backend: LocalBackend, name: str, script: str, **changes: object) -> Path:
    job_id = submit_one(backend, job_spec(name, "#!/bin/bash\n" + script, **changes))
    runs = wait_for_end(backend, job_id)
    assert {run.state for run in runs} == {"completed"}, runs
    return backend.root / "jobs" / name


def collect(backend: LocalBackend, name: str) -> tuple[dict[str, str | None], dict[str, bytes]]:
    """The listing (name -> problem) and what a fetch of every listed name reads."""
    listed = backend.result_files(None, f"jobs/{name}")
    fetched: dict[str, bytes] = {}

    def save(file_name: str, handle: BinaryIO) -> None:
        fetched[file_name] = handle.read()

    names = [result.name for result in listed if result.problem is None]
    assert backend.result_fetch(None, f"jobs/{name}", names, save) == {}
    return {result.name: result.problem for result in listed}, fetched


def test_a_job_that_links_its_stdout_to_the_database_gets_a_refusal_not_the_database(
    backend: LocalBackend, machine: Path
):
    database = machine / "db.sqlite3"
    run(backend, "cs-link-stdout", f"echo hello\nrm stdout.txt\nln -s {database} stdout.txt\n")

    with pytest.raises(JobFileUnsafe, match=r"stdout\.txt: a symbolic link"):
        backend.output_tail(None, "jobs/cs-link-stdout", "stdout", None, 1 << 20)
    listed, fetched = collect(backend, "cs-link-stdout")
    assert listed == {
        "stderr.txt": None,
        "stdout.txt": "a symbolic link: links are not followed",
    }
    assert fetched == {"stderr.txt": b""}
    assert SECRET not in b"".join(fetched.values())


def test_a_link_to_a_folder_on_the_way_is_not_followed_to_list_or_to_read(
    backend: LocalBackend, machine: Path
):
    outside = machine / "outside"
    run(backend, "cs-link-folder", f"ln -s {outside} results\necho ok\n")

    listed, fetched = collect(backend, "cs-link-folder")
    assert listed == {
        "results": "a symbolic link: links are not followed",
        "stderr.txt": None,
        "stdout.txt": None,
    }
    assert fetched == {"stderr.txt": b"", "stdout.txt": b"ok\n"}
    # A name through the link, as a stale listing would give it, is refused too.
    refused = backend.result_fetch(None, "jobs/cs-link-folder", ["results/a.txt"], _never)
    assert refused == {
        "results/a.txt": "a symbolic link (a folder on the way): links are not followed"
    }


def _never(name: str, handle: BinaryIO) -> None:
    raise AssertionError(f"{name} was read")


def test_fifos_and_hard_links_are_listed_as_not_read_and_never_block_the_collection(
    backend: LocalBackend,
):
    folder = run(
        backend,
        "cs-fifo",
        "mkfifo pipe\nmkdir out\necho kept > out/a.txt\nln out/a.txt out/b.txt\n"
        # Outside its folder the sandbox shows the system read-only, on other mounts: the
        # kernel refuses a hard link to any of it.
        "if ln /etc/hostname stolen 2>/dev/null; then echo linked; else echo refused; fi\n",
    )

    started = time.monotonic()
    listed, fetched = collect(backend, "cs-fifo")
    assert time.monotonic() - started < 5
    assert listed == {
        "out/a.txt": "a file with other hard links",
        "out/b.txt": "a file with other hard links",
        "pipe": "not a regular file (a FIFO, a socket or a device)",
        "stderr.txt": None,
        "stdout.txt": None,
    }
    assert fetched == {"stderr.txt": b"", "stdout.txt": b"refused\n"}
    # The tail of a FIFO put in place of stdout is refused at once, without waiting for a writer.
    os.unlink(folder / "stdout.txt")
    os.mkfifo(folder / "stdout.txt")
    with pytest.raises(JobFileUnsafe, match="not a regular file"):
        backend.output_tail(None, "jobs/cs-fifo", "stdout", None, 100)


def test_a_folder_swapped_for_a_link_between_the_listing_and_the_fetch_is_not_followed(
    backend: LocalBackend, machine: Path
):
    folder = run(backend, "cs-swap", "mkdir out\necho one > out/a.txt\necho two > out/b.txt\n")
    listed = [result.name for result in backend.result_files(None, "jobs/cs-swap")]
    assert listed == ["out/a.txt", "out/b.txt", "stderr.txt", "stdout.txt"]
    fetched: dict[str, bytes] = {}

    def save_then_swap(name: str, handle: BinaryIO) -> None:
        # Given the job swaps `out` for a link to a folder outside while the fetch is under way
        fetched[name] = handle.read()
        if name == "out/a.txt":
            (folder / "out").rename(folder / "gone")
            (folder / "out").symlink_to(machine / "outside")
            (machine / "outside" / "b.txt").write_bytes(SECRET)

    refused = backend.result_fetch(None, "jobs/cs-swap", listed, save_then_swap)

    assert fetched == {"out/a.txt": b"one\n", "stderr.txt": b"", "stdout.txt": b""}
    assert refused == {"out/b.txt": "a symbolic link (a folder on the way): links are not followed"}


def test_an_array_task_cannot_make_the_supervisor_write_the_next_tasks_output_elsewhere(
    backend: LocalBackend, machine: Path
):
    database = machine / "db.sqlite3"
    victim = machine / "outside" / "a.txt"
    # Task 0 runs alone (%1) and leaves, where task 1's output goes, a link to the database and
    # a hard link to a file of its own, and makes task 2's stdout a folder.
    script = (
        'if [ "$SLURM_ARRAY_TASK_ID" = 0 ]; then\n'
        f"  ln -s {database} stdout-1.txt\n"
        "  echo mine > mine.txt && ln mine.txt stderr-1.txt\n"
        "  mkdir stdout-2.txt\n"
        "fi\n"
        'echo "task $SLURM_ARRAY_TASK_ID"\n'
    )
    job_id = submit_one(backend, job_spec("cs-array-race", "#!/bin/bash\n" + script, array="0-2%1"))
    runs = wait_for_end(backend, job_id)

    states = {run.array_task_id: (run.state, run.reason) for run in runs}
    assert states[0] == ("completed", "") and states[1] == ("completed", "")
    assert states[2][0] == "failed" and "a folder holds the name" in states[2][1]
    folder = backend.root / "jobs" / "cs-array-race"
    assert database.read_bytes() == SECRET and victim.read_bytes() == SECRET
    assert not (folder / "stdout-1.txt").is_symlink()
    assert (folder / "stdout-1.txt").read_bytes() == b"task 1\n"
    assert (folder / "mine.txt").read_bytes() == b"mine\n"
    assert (folder / "stderr-1.txt").stat().st_nlink == 1


def test_many_tasks_racing_to_plant_links_never_get_a_write_or_a_read_through_one(
    backend: LocalBackend, machine: Path
):
    # Every task keeps replacing every other task's output by a link to the database while
    # the supervisor starts them two at a time.
    database = machine / "db.sqlite3"
    script = (
        "for round in $(seq 200); do\n"
        "  for task in $(seq 0 7); do\n"
        f'    [ "$task" = "$SLURM_ARRAY_TASK_ID" ] || ln -sf {database} stdout-$task.txt\n'
        "  done\n"
        "done 2>/dev/null\n"
        'echo "task $SLURM_ARRAY_TASK_ID"\n'
    )
    job_id = submit_one(backend, job_spec("cs-array-many", "#!/bin/bash\n" + script, array="0-7"))
    wait_for_end(backend, job_id, timeout=60)

    assert database.read_bytes() == SECRET
    listed, fetched = collect(backend, "cs-array-many")
    assert SECRET not in b"".join(fetched.values())
    for task in range(8):
        problem = listed[f"stdout-{task}.txt"]
        assert problem in (None, "a symbolic link: links are not followed")


def test_a_link_swapped_in_while_the_tail_is_read_does_not_change_what_is_read(tmp_path: Path):
    folder = tmp_path / "jobs" / "job"
    folder.mkdir(parents=True)
    (folder / "stdout.txt").write_bytes(b"x" * 4096)
    (tmp_path / "db").write_bytes(SECRET)
    swapped = threading.Event()

    def swap() -> None:
        os.unlink(folder / "stdout.txt")
        os.symlink(tmp_path / "db", folder / "stdout.txt")
        swapped.set()

    descriptor = job_folder.open_folder(tmp_path, "jobs/job")
    try:
        file, _ = job_folder.open_for_reading(descriptor, "stdout.txt")
    finally:
        os.close(descriptor)
    swap()
    with os.fdopen(file, "rb") as handle:
        assert handle.read() == b"x" * 4096  # the file opened, never the link's target
    assert swapped.is_set()
    with pytest.raises(job_folder.JobFileRefused):
        job_folder.read_tail(tmp_path, "jobs/job", "stdout.txt", 100)


@pytest.mark.parametrize(
    ("relative", "parts"),
    [("a/./b//c", ["a", "b", "c"]), ("out/%j.log", ["out", "%j.log"]), ("x", ["x"])],
)
def test_any_relative_path_inside_the_folder_is_taken(relative: str, parts: list[str]):
    assert job_folder.path_parts(relative) == parts


@pytest.mark.parametrize("relative", ["", ".", "/etc/passwd", "../x", "a/../../x", "a\0b"])
def test_paths_that_leave_the_folder_are_refused(relative: str):
    with pytest.raises(job_folder.JobFileRefused):
        job_folder.path_parts(relative)


def test_a_write_replaces_a_link_or_a_hard_link_and_never_writes_through_it(tmp_path: Path):
    (tmp_path / "job").mkdir()
    (tmp_path / "victim").write_bytes(SECRET)
    os.symlink(tmp_path / "victim", tmp_path / "job" / "stdout.txt")
    os.link(tmp_path / "victim", tmp_path / "job" / "stderr.txt")
    os.symlink(tmp_path, tmp_path / "job" / "up")
    folder = job_folder.open_folder(tmp_path, "job")
    try:
        for name in ("stdout.txt", "stderr.txt"):
            with os.fdopen(job_folder.open_for_writing(folder, name), "wb") as handle:
                handle.write(b"new")
        with pytest.raises(job_folder.JobFileRefused, match="symbolic link"):
            job_folder.open_for_writing(folder, "up/victim")
    finally:
        os.close(folder)
    assert (tmp_path / "victim").read_bytes() == SECRET
    assert (tmp_path / "job" / "stdout.txt").read_bytes() == b"new"
    assert not (tmp_path / "job" / "stdout.txt").is_symlink()
    assert (tmp_path / "job" / "stderr.txt").stat().st_nlink == 1
