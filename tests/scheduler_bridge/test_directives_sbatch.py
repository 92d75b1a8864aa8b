"""The platform's reading of `#SBATCH` lines against sbatch itself: every script of the corpus
goes to `sbatch -v --test-only` as a tenant of the test cluster (Slurm 22.05.8), which prints
the options it read ("defined options") and the processors the job would use, or refuses the
script. The platform's reader must read the same (time, CPUs, tasks, nodes, memory, array,
names) or refuse it too, with sbatch's own words."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from hpc.slurm import directives
from hpc.ssh import SSHConnection
from scheduler_bridge.job_directives import PartitionFacts
from scheduler_bridge.job_requests import JobRequest, job_request_resolve
from tests.scheduler_bridge.directive_corpus import (
    COMPARED,
    CORPUS,
    Case,
    reader_refusal,
    reader_view,
)
from tests.testcluster import TestCluster

_OPTION = re.compile(r"^sbatch: (\S+)\s+: (.*)$")
_PROCESSORS = re.compile(r"using ([0-9]+) processors")


@dataclass(frozen=True)
class SbatchReading:
    exit_status: int
    options: dict[str, str]
    processors: int | None
    stderr: str


@pytest.fixture(scope="module")
def sbatch(testcluster: TestCluster) -> Iterator[object]:
    tenant = testcluster.fixed_pool.tenants[0].user
    with SSHConnection(testcluster.ssh_settings()) as connection:

        def read(script: str) -> SbatchReading:
            # sbatch as any user of the cluster runs it: no --ignore-pbs, the script on stdin.
            result = connection.run(
                ["sbatch", "-v", "--test-only"],
                stdin=script.encode(),
                timeout=30,
                check=False,
                as_user=tenant,
            )
            text = result.stderr + result.stdout
            options = {}
            for line in text.splitlines():
                match = _OPTION.match(line)
                if match and match.group(1) in COMPARED:
                    value = match.group(2)
                    if match.group(1) in ("output", "error", "input"):
                        value = value.rsplit("/", 1)[-1]
                    options[match.group(1)] = value
            processors = _PROCESSORS.search(text)
            return SbatchReading(
                result.exit_status,
                options,
                int(processors.group(1)) if processors else None,
                text,
            )

        yield read


SBATCH_CASES = [case for case in CORPUS if not case.platform_only]


@pytest.mark.parametrize("case", SBATCH_CASES, ids=[case.name for case in SBATCH_CASES])
def test_sbatch_reads_what_the_platform_reads_or_both_refuse(sbatch, case: Case) -> None:
    answer = sbatch(case.script)
    refusal = reader_refusal(case.script)
    if case.refusal is not None:
        assert refusal is not None
        assert answer.exit_status != 0, answer.stderr
        assert case.refusal[2] in answer.stderr, answer.stderr
        assert answer.options == {}
        return
    assert refusal is None
    assert answer.options == reader_view(directives.read_directives(case.script))
    assert answer.options == case.options
    assert answer.processors == case.processors, answer.stderr
    if answer.processors is not None:
        # The platform prices the CPUs Slurm would give.
        reading = directives.read_directives(case.script)
        plan = job_request_resolve(
            # A time limit where the script gives none: the platform asks for one.
            JobRequest(
                script=case.script, time_limit_minutes=5 if not reading.last("time") else None
            ),
            PartitionFacts(name="debug", features=()),
        )
        assert plan.size.cores == answer.processors


def test_the_platforms_own_refusals_are_scripts_sbatch_would_take(sbatch) -> None:
    """#PBS lines and heterogeneous jobs are refused by the platform's rule, not sbatch's:
    sbatch (without --ignore-pbs, as the platform runs it) takes them."""
    for case in CORPUS:
        if case.platform_only:
            assert reader_refusal(case.script) is not None
            assert sbatch(case.script).exit_status == 0, case.name
