"""Job input and result files: how fast they go through the platform beside plain SFTP on the
same machine, in MiB/s.

    .venv/bin/python bench/files.py [--mib 100] [--keep]

It needs the test cluster (`scripts/testcluster up`), PostgreSQL and Redis. It migrates a
scratch database (BENCH_DATABASE, `computeshare_bench_files` by default), starts gunicorn on
loopback, and with one file of random bytes (100 MiB by default) measures, side by side:

upload
- the API: POST /jobs/ as multipart from a client streaming the file (the body is never whole
  in memory on either side), until the 201: the upload into platform storage;
- staging: `cluster_jobs_submit`, which copies the stored file into the job's folder over SFTP as
  the team's tenant (sftp-server under sudo) and runs sbatch;
- the two together, as a user waits for them;
- plain SFTP: paramiko's `putfo` of the same file as the tenant (the same sudo'd sftp-server),
  and OpenSSH's `sftp` as the service user (sshd's own SFTP subsystem, no sudo);

download (the staged input is one of the job's results: every file of its folder is)
- fetching: `job_results_collect`, the file from the job's folder into platform storage over
  SFTP as the tenant;
- the API: GET /jobs/{id}/files/{name}, streamed to the client and thrown away;
- the archive: GET /jobs/{id}/files.tar.gz (gzip of random bytes: the compressor's cost);
- plain SFTP: paramiko's `getfo` as the tenant, and OpenSSH's `sftp` as the service user.

The job's script is `true`; the bench marks the job ended itself rather than waiting for a
CPU of the shared cluster. Everything the run wrote on the cluster and here is removed at the
end. Figures on a 2-core machine shared with other work are noisy: compare the ratios of one
run. Benchmarks print figures; they never pass or fail."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(REPOSITORY), str(BENCH)]

os.environ.setdefault("BENCH_DATABASE", "computeshare_bench_files")
from bench_support import drop_database, load_average, prepare_django  # noqa: E402

MIB = 1024 * 1024
CHUNK = MIB


def rate(size: int, seconds: float) -> str:
    return f"{size / MIB / seconds:8.1f} MiB/s  ({seconds:6.2f} s)"


def timed(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def multipart_stream(
    fields: dict[str, str], name: str, path: Path
) -> tuple[Iterator[bytes], int, str]:
    """A multipart body that reads the file a chunk at a time, with its exact length."""
    boundary = uuid.uuid4().hex
    head = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
        for key, value in fields.items()
    )
    head += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="input_files"; '
        f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    length = len(head) + path.stat().st_size + len(tail)

    def body() -> Iterator[bytes]:
        yield head
        with path.open("rb") as source:
            while chunk := source.read(CHUNK):
                yield chunk
        yield tail

    return body(), length, f"multipart/form-data; boundary={boundary}"


def http_request(
    port: int, method: str, path: str, token: str, body: object = None, headers: dict | None = None
) -> tuple[int, int, bytes]:
    """Sends a request to gunicorn and reads the answer a chunk at a time: its status, its
    length, and its first bytes (for an error's text)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request(
        method, path, body=body, headers={"Authorization": f"Token {token}", **(headers or {})}
    )
    response = connection.getresponse()
    size, first = 0, b""
    while chunk := response.read(CHUNK):
        if not first:
            first = chunk[:2000]
        size += len(chunk)
    connection.close()
    return response.status, size, first


def openssh_sftp(testcluster: object, batch: str) -> None:
    """OpenSSH's `sftp` client as the service user, running `batch`."""
    subprocess.run(
        [
            "sftp",
            "-q",
            "-b",
            "-",
            "-i",
            testcluster.private_key_path,  # type: ignore[attr-defined]
            "-P",
            str(testcluster.port),  # type: ignore[attr-defined]
            "-o",
            f"UserKnownHostsFile={testcluster.known_hosts_path}",  # type: ignore[attr-defined]
            "-o",
            "BatchMode=yes",
            f"{testcluster.user}@{testcluster.host}",  # type: ignore[attr-defined]
        ],
        input=batch.encode(),
        check=True,
        capture_output=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=100, help="the file's size (100 MiB)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    arguments = parser.parse_args()
    size = arguments.mib * MIB

    scratch = Path(tempfile.mkdtemp(prefix="bench-files-"))
    os.environ["JOB_FILES_ROOT"] = str(scratch / "job-files")
    # The file is one input, past the default 64 MiB a file: the limits of this run fit it.
    os.environ["JOB_INPUT_FILE_MAX_BYTES"] = str(size + MIB)
    os.environ["JOB_INPUT_TOTAL_MAX_BYTES"] = str(size + MIB)
    redis_url = os.environ.get("BENCH_FILES_REDIS_URL", "redis://127.0.0.1:6379/12")
    prepare_django(redis_url=redis_url)

    from django.db import connection as database

    from hpc.ssh import SSHConnection
    from marketplace.models import TenantLease
    from scheduler_bridge import services
    from scheduler_bridge.models import Job, JobState
    from tests.factories import (
        MembershipFactory,
        allocation_bought,
        cluster_on_testcluster,
        funded_organization,
        token_for,
    )
    from tests.testcluster import testcluster_read
    from tests.workers import GunicornServer, database_url, worker_environment

    testcluster = testcluster_read()
    cluster = cluster_on_testcluster(testcluster, pool="fixed")
    team = funded_organization("1000", name="Bench Files Team")
    member = MembershipFactory(organization=team, role="member").user
    allocation = allocation_bought(team, partition=cluster.partitions.get(), quantity=40)
    lease = TenantLease.objects.select_related("account").get(organization=team, cluster=cluster)
    tenant, home = lease.account.username, lease.account.home
    token = token_for(member)

    data = scratch / "data.bin"
    with data.open("wb") as target:
        for _ in range(arguments.mib):
            target.write(os.urandom(MIB))
    server = GunicornServer(
        worker_environment(database=database_url(database.settings_dict), redis=redis_url),
        scratch / "gunicorn.log",
        ["--workers=2", "--timeout=600"],
    )
    remote_folder = f"bench-files-{uuid.uuid4().hex[:8]}"
    ssh = SSHConnection(testcluster.ssh_settings(sftp_server=testcluster.sftp_server))
    job_directory, scheduler_job_id = "", ""
    try:
        server.wait_ready()
        print(f"{arguments.mib} MiB of random bytes; load average {load_average()}")

        # --- Upload ------------------------------------------------------------------------
        body, length, content_type = multipart_stream(
            {
                "allocation": str(allocation.uuid),
                "name": "bench files",
                "script": "#!/bin/sh\ntrue\n",
                "time_limit_minutes": "1",
            },
            "data.bin",
            data,
        )
        answer: dict[str, object] = {}

        def upload() -> None:
            status, _, first = http_request(
                server.port,
                "POST",
                "/api/v1/jobs/",
                token,
                body=body,
                headers={"Content-Type": content_type, "Content-Length": str(length)},
            )
            assert status == 201, first
            answer.update(json.loads(first))

        api_upload = timed(upload)
        job = Job.objects.get(uuid=answer["id"])
        job_directory = job.directory
        staging = timed(lambda: services.cluster_jobs_submit(cluster_id=cluster.pk))
        job.refresh_from_db()
        assert job.state == JobState.SUBMITTED, (job.state, job.state_reason)
        scheduler_job_id = job.scheduler_job_id

        def paramiko_put() -> None:
            with ssh.sftp(600, as_user=tenant) as sftp:
                sftp.mkdir(f"{home}/{remote_folder}", 0o700)
                with data.open("rb") as source:
                    sftp.putfo(source, f"{home}/{remote_folder}/data.bin", file_size=size)

        plain_put = timed(paramiko_put)
        openssh_put = timed(
            lambda: openssh_sftp(testcluster, f"put {data} {remote_folder}-data.bin\n")
        )

        # --- Download ------------------------------------------------------------------------
        Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
        fetch = timed(lambda: services.job_results_collect(job_id=job.pk))
        job.refresh_from_db()
        assert job.results_state == Job.ResultsState.READY, job.results_detail

        def api_get(path: str) -> Callable[[], None]:
            def get() -> None:
                status, received, first = http_request(server.port, "GET", path, token)
                assert status == 200 and received > 0, first

            return get

        api_download = timed(api_get(f"/api/v1/jobs/{job.uuid}/files/data.bin"))
        api_archive = timed(api_get(f"/api/v1/jobs/{job.uuid}/files.tar.gz"))

        def paramiko_get() -> None:
            with ssh.sftp(600, as_user=tenant) as sftp, open(os.devnull, "wb") as sink:
                sftp.getfo(f"{home}/{remote_folder}/data.bin", sink)

        plain_get = timed(paramiko_get)
        openssh_get = timed(
            lambda: openssh_sftp(testcluster, f"get {remote_folder}-data.bin {os.devnull}\n")
        )

        print("\nupload")
        print(f"  API upload (POST /jobs/, multipart)      {rate(size, api_upload)}")
        print(f"  staging as the tenant (+ sbatch)         {rate(size, staging)}")
        print(f"  API upload + staging                     {rate(size, api_upload + staging)}")
        print(f"  paramiko putfo as the tenant (sudo)      {rate(size, plain_put)}")
        print(f"  OpenSSH sftp put, service user           {rate(size, openssh_put)}")
        print(
            f"  -> API + staging at {plain_put / (api_upload + staging):.2f} of paramiko's rate, "
            f"{openssh_put / (api_upload + staging):.2f} of OpenSSH's"
        )
        print("download")
        print(f"  fetch into storage as the tenant         {rate(size, fetch)}")
        print(f"  API download (GET /files/data.bin)       {rate(size, api_download)}")
        print(f"  API archive (GET /files.tar.gz, 2 files) {rate(2 * size, api_archive)}")
        print(f"  fetch + API download                     {rate(size, fetch + api_download)}")
        print(f"  paramiko getfo as the tenant (sudo)      {rate(size, plain_get)}")
        print(f"  OpenSSH sftp get, service user           {rate(size, openssh_get)}")
        print(
            f"  -> fetch + API download at {plain_get / (fetch + api_download):.2f} of paramiko's "
            f"rate, {openssh_get / (fetch + api_download):.2f} of OpenSSH's"
        )
    except BaseException:
        print(server.log()[-3000:])
        raise
    finally:
        server.stop()
        try:
            folders = [remote_folder] + ([job_directory] if job_directory else [])
            ssh.run(["rm", "-rf", "--", *folders], as_user=tenant, timeout=60)
            ssh.run(["rm", "-f", "--", f"{remote_folder}-data.bin"], timeout=60)
            if scheduler_job_id:  # its own job only: other people's tests lease the same accounts
                ssh.run(["scancel", scheduler_job_id], as_user=tenant, timeout=60, check=False)
        finally:
            ssh.close()
            shutil.rmtree(scratch, ignore_errors=True)
            if not arguments.keep:
                drop_database()


if __name__ == "__main__":
    main()
