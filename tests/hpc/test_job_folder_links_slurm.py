"""A job's folder on the real Slurm test cluster, attacked by the job itself (issue 29): real
sbatch jobs, as their tenant, replace their stdout by a link, link folders out, leave FIFOs and
hard links, and array tasks plant links where the next task's output goes. The platform reads
the folder with the job-folder reader run as the tenant (`hpc.job_folder` through
`python3 -I -S`), which never follows a link and never waits on a FIFO. The same tricks on the
local backend are in test_job_folder_links.py."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from typing import BinaryIO

import pytest

from hpc.backends.slurm import SlurmBackend
from hpc.errors import JobFileUnsafe
from hpc.slurm.tenants import sftp_probe
from hpc.ssh import SSHConnection
from hpc.types import JobSpec, Tenant
from tests.hpc.test_slurm_backend_integration import wait_for_ended_runs

pytestmark = pytest.mark.slurm

# The tenant's own file outside the job's folder (its home), and a file every user may read.
HOME_SECRET = b"the tenant's own key\n"


@pytest.fixture(scope="module")
def unique() -> str:
    return uuid.uuid4().hex[:12]


@pytest.fixture(scope="module")
def tenant(testcluster) -> Tenant:
    """The first tenant of the fixed pool, as in test_slurm_backend_integration.py."""
    account = testcluster.fixed_pool.tenants[0]
    return Tenant(account.user, account.home)


@pytest.fixture(scope="module")
def backend(testcluster, unique, tenant) -> Iterator[SlurmBackend]:
    connection = SSHConnection(testcluster.ssh_settings())
    backend = SlurmBackend(connection, command_timeout=30)
    root = f"computeshare-tests/{unique}"
    connection.run(
        f"mkdir -p {root}/outside && printf '%s' {HOME_SECRET.decode()!r} > {root}/outside/a.txt",
        as_user=tenant.user,
    )
    yield backend
    connection.run(["rm", "-rf", f"{tenant.home}/{root}"], as_user=tenant.user)
    backend.close()


def run(backend: SlurmBackend, testcluster, unique: str, label: str, script: str, **changes):
    """Runs one job as the tenant to its end; its directory (beside `outside`, the tenant's
    own folder that the jobs link to)."""
    account = testcluster.fixed_pool.tenants[0]
    directory = f"computeshare-tests/{unique}/{label}"
    values = {
        "name": f"cs-links-{label}-{unique}",
        "script": "#!/bin/bash\n" + script,
        "directory": directory,
        "partition": testcluster.partition,
        "account": testcluster.fixed_pool.account,
        "time_limit_minutes": 1,
        "tenant": Tenant(account.user, account.home),
    }
    spec = JobSpec(**{**values, **changes})
    [result] = backend.submit([spec])
    assert result.error is None, result.error
    runs = wait_for_ended_runs(backend, [result.scheduler_job_id], len(_indices(spec)))
    assert {run.state for run in runs} == {"completed"}, runs
    return directory


def _indices(spec: JobSpec) -> list[int | None]:
    if spec.array is None:
        return [None]
    first, last = spec.array.split("%")[0].split("-")
    return list(range(int(first), int(last) + 1))


def collect(backend: SlurmBackend, tenant: Tenant, directory: str):
    listed = backend.result_files(tenant, directory)
    fetched: dict[str, bytes] = {}

    def save(name: str, handle: BinaryIO) -> None:
        fetched[name] = handle.read()

    names = [result.name for result in listed if result.problem is None]
    assert backend.result_fetch(tenant, directory, names, save) == {}
    return {result.name: result.problem for result in listed}, fetched


def test_links_fifos_and_hard_links_a_job_leaves_are_never_followed_or_waited_on(
    backend, testcluster, unique, tenant
):
    outside = f"{tenant.home}/computeshare-tests/{unique}/outside"
    directory = run(
        backend,
        testcluster,
        unique,
        "tricks",
        "echo hello\n"
        # Its stdout becomes a link to a file the tenant may read (slurmstepd keeps writing to
        # the file it opened), a folder links out, a FIFO and a hard link wait in the folder.
        "rm stdout.txt && ln -s /etc/passwd stdout.txt\n"
        f"ln -s {outside} results\n"
        "mkfifo pipe\n"
        "echo kept > kept.txt && ln kept.txt again.txt\n"
        "printf 'y' > \"$(printf 'bad\\377name')\"\n",
    )

    with pytest.raises(JobFileUnsafe, match=r"stdout\.txt: a symbolic link"):
        backend.output_tail(tenant, directory, "stdout", None, 1 << 20)
    started = time.monotonic()
    listed, fetched = collect(backend, tenant, directory)
    assert time.monotonic() - started < 10  # the FIFO held nothing up
    assert listed == {
        "again.txt": "a file with other hard links",
        "bad\udcffname": None,
        "kept.txt": "a file with other hard links",
        "pipe": "not a regular file (a FIFO, a socket or a device)",
        "results": "a symbolic link: links are not followed",
        "stderr.txt": None,
        "stdout.txt": "a symbolic link: links are not followed",
    }
    assert fetched == {"bad\udcffname": b"y", "stderr.txt": b""}
    # Names through the links, as a stale listing could give them, are refused.
    refused = backend.result_fetch(
        tenant, directory, ["results/a.txt", "stdout.txt", "pipe"], _never
    )
    assert refused == {
        "results/a.txt": "a symbolic link (a folder on the way): links are not followed",
        "stdout.txt": "a symbolic link (the file or a folder on its way): links are not followed",
        "pipe": "not a regular file (a FIFO, a device or a folder)",
    }


def _never(name: str, handle: BinaryIO) -> None:
    raise AssertionError(f"{name} was read")


def test_a_folder_swapped_for_a_link_between_the_listing_and_the_fetch_is_not_followed(
    backend, testcluster, unique, tenant
):
    directory = run(
        backend,
        testcluster,
        unique,
        "swap",
        "mkdir out\necho one > out/a.txt\necho two > out/b.txt\n",
    )
    listed = [result.name for result in backend.result_files(tenant, directory)]
    assert listed == ["out/a.txt", "out/b.txt", "stderr.txt", "stdout.txt"]
    outside = f"{tenant.home}/computeshare-tests/{unique}/outside"
    # Given the team's other job swaps `out` for a link once the listing is made
    backend.connection.run(
        f"cd {directory} && mv out gone && ln -s {outside} out", as_user=tenant.user
    )
    fetched: dict[str, bytes] = {}

    def save(name: str, handle: BinaryIO) -> None:
        fetched[name] = handle.read()

    refused = backend.result_fetch(tenant, directory, listed, save)

    assert fetched == {"stderr.txt": b"", "stdout.txt": b""}
    folder_link = "a symbolic link (a folder on the way): links are not followed"
    assert refused == {"out/a.txt": folder_link, "out/b.txt": folder_link}


def test_array_tasks_that_link_each_others_output_get_nothing_read_through_the_links(
    backend, testcluster, unique, tenant
):
    # Task 0 runs first (%1) and makes task 1's stdout a link to the tenant's own file outside
    # the folder; Slurm then writes task 1's output there, as the tenant.
    outside = f"{tenant.home}/computeshare-tests/{unique}/outside"
    directory = run(
        backend,
        testcluster,
        unique,
        "array",
        f'[ "$SLURM_ARRAY_TASK_ID" = 0 ] && ln -s {outside}/a.txt stdout-1.txt\n'
        'echo "task $SLURM_ARRAY_TASK_ID"\n',
        array="0-1%1",
    )

    assert backend.output_tail(tenant, directory, "stdout", 0, 100) == b"task 0\n"
    with pytest.raises(JobFileUnsafe, match=r"stdout-1\.txt: a symbolic link"):
        backend.output_tail(tenant, directory, "stdout", 1, 100)
    listed, fetched = collect(backend, tenant, directory)
    assert listed["stdout-1.txt"] == "a symbolic link: links are not followed"
    assert fetched["stdout-0.txt"] == b"task 0\n" and "stdout-1.txt" not in fetched


def test_a_large_result_streams_through_the_reader_byte_for_byte(
    backend, testcluster, unique, tenant
):
    directory = run(
        backend,
        testcluster,
        unique,
        "large",
        "head -c 9437201 /dev/urandom > big.bin\nsha256sum big.bin | cut -c1-64 > big.sum\n",
    )
    fetched: dict[str, bytes] = {}

    def save(name: str, handle: BinaryIO) -> None:
        chunks = []
        while chunk := handle.read(65536):
            chunks.append(chunk)
        fetched[name] = b"".join(chunks)

    assert backend.result_fetch(tenant, directory, ["big.bin", "big.sum"], save) == {}
    assert len(fetched["big.bin"]) == 9437201
    assert hashlib.sha256(fetched["big.bin"]).hexdigest().encode() + b"\n" == fetched["big.sum"]


def test_verification_reads_a_file_back_with_the_job_folder_reader(backend, tenant):
    sftp_probe(backend.connection, tenant.user, timeout=30)
