"""Ready job templates: a batch script for each technique a newcomer needs first, its sizes in
its own `#SBATCH` lines as any batch script carries them, with a sentence on the technique.
Starting from one fills the submit form; the API lists them (GET /api/v1/job-templates/) with
the sizes their scripts ask for, so that a client can POST one's script (and nothing else) as a
job.

They are data, not rules: a job started from a template is read, checked, reserved and charged
like any other. Every script runs on a cluster with nothing more than bash and Python 3 (the
MPI one uses mpi4py when the cluster has it, and works with `srun` alone otherwise); the GPU one
is offered only where the partition has GPUs."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from hpc.sizes import JobSize
from hpc.slurm import directives

# The templates' own names are their ids in the API and in `Job.template`.
SLUG_MAX_LENGTH = 32


@dataclass(frozen=True)
class TemplateReading:
    """What a template's script asks for, as its `#SBATCH` lines say."""

    name: str
    size: JobSize
    array: str = ""


@dataclass(frozen=True)
class JobTemplate:
    slug: str
    title: str
    technique: str  # one sentence: what the technique is and when to use it
    script: str  # its sizes are its #SBATCH lines
    environment: dict[str, str] = field(default_factory=dict)

    @cached_property
    def reading(self) -> TemplateReading:
        return template_reading(self.script)

    @property
    def name(self) -> str:
        return self.reading.name

    @property
    def size(self) -> JobSize:
        return self.reading.size

    @property
    def array(self) -> str:
        return self.reading.array

    @property
    def needs_gpus(self) -> bool:
        return self.size.gpus > 0


def template_reading(script: str) -> TemplateReading:
    """The name, size and array a template's `#SBATCH` lines give, read as sbatch reads them
    (the templates use the plain forms: --job-name, --time, -c, -n, -N, --gpus, --array)."""
    reading = directives.read_directives(script)

    def value(key: str) -> str | None:
        directive = reading.last(key)
        return directive.value if directive is not None else None

    def count(key: str, default: int) -> int:
        text = value(key)
        return directives.whole_number(text, option=f"--{key}") if text else default

    time = directives.time_minutes(value("time") or "")
    assert time is not None, "a template has a time limit"
    size = JobSize(
        time_limit_minutes=time,
        cpus_per_task=count("cpus-per-task", 1),
        ntasks=count("ntasks", 1),
        nodes=count("nodes", 1),
        gpus=count("gpus", 0),
    )
    return TemplateReading(name=value("job-name") or "job", size=size, array=value("array") or "")


_PYTHON_SWEEP = """#!/bin/bash
#SBATCH --job-name="parameter sweep"
#SBATCH --time=5
#SBATCH --array=0-9%2
# One task per index of the array: each reads its index and works out its own parameter.
set -euo pipefail
python3 - <<'PYTHON'
import math
import os

index = int(os.environ["SLURM_ARRAY_TASK_ID"])
rate = 0.1 * (index + 1)  # the parameter of this task
# A small model: logistic growth for 100 steps at this rate.
population = 0.01
for _ in range(100):
    population += rate * population * (1 - population)
print(f"rate={rate:.1f} population={population:.6f}")
with open(f"result-{index}.txt", "w") as result:
    result.write(f"{rate:.1f},{population:.6f}\\n")
PYTHON
"""

_OPENMP = """#!/bin/bash
#SBATCH --job-name="openmp run"
#SBATCH --time=5
#SBATCH --cpus-per-task=2
# One process, several threads: OpenMP uses as many threads as the CPUs per task asked for.
set -euo pipefail
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"
cat > sum.c <<'C'
#include <omp.h>
#include <stdio.h>
int main(void) {
    double total = 0.0;
    int threads = 0;
    #pragma omp parallel reduction(+:total)
    {
        #pragma omp single
        threads = omp_get_num_threads();
        #pragma omp for
        for (long i = 1; i <= 200000000L; i++) total += 1.0 / ((double)i * (double)i);
    }
    printf("threads=%d sum=%.9f\\n", threads, total);
    return 0;
}
C
if ! command -v gcc >/dev/null; then
    echo "This cluster has no gcc: build your OpenMP program with the compiler it offers." >&2
    exit 1
fi
gcc -O2 -fopenmp -o sum sum.c
./sum
"""

_MPI = """#!/bin/bash
#SBATCH --job-name="mpi run"
#SBATCH --time=5
#SBATCH --ntasks=2
# srun starts one copy of the program per task (ntasks), spread over the nodes; each copy
# knows its rank. With mpi4py the copies add up their parts over MPI; without an MPI library
# each copy writes its part and the script adds them up.
set -euo pipefail
cat > part.py <<'PYTHON'
import os

rank = int(os.environ["SLURM_PROCID"])
size = int(os.environ["SLURM_NTASKS"])
part = sum(range(rank, 10_000_000, size))  # this rank's share of 0 + 1 + ... + 9,999,999
try:
    from mpi4py import MPI
except ImportError:
    with open(f"part-{rank}.txt", "w") as out:
        out.write(f"{part}\\n")
    print(f"rank {rank} of {size} on {os.uname().nodename}: {part}")
else:
    total = MPI.COMM_WORLD.reduce(part, root=0)
    if rank == 0:
        with open("total.txt", "w") as out:
            out.write(f"{total}\\n")
PYTHON
srun python3 part.py
if [ ! -f total.txt ]; then
    awk '{ total += $1 } END { printf "%.0f\\n", total }' part-*.txt > total.txt
fi
echo "total=$(cat total.txt)"
"""

_GPU = """#!/bin/bash
#SBATCH --job-name="gpu run"
#SBATCH --time=10
#SBATCH --gpus=1
# Slurm gives the job the GPUs asked for and sets CUDA_VISIBLE_DEVICES to them.
set -euo pipefail
echo "GPUs given: ${CUDA_VISIBLE_DEVICES:-none}"
nvidia-smi --query-gpu=name,memory.total,utilization.gpu --format=csv
python3 - <<'PYTHON'
try:
    import torch
except ImportError:
    print("No PyTorch here: run your own GPU program in its place.")
else:
    device = torch.device("cuda")
    a = torch.rand(4096, 4096, device=device)
    print("matrix product sum:", float((a @ a).sum()))
PYTHON
"""

_CHECKPOINT = """#!/bin/bash
#SBATCH --job-name="checkpointed run"
#SBATCH --time=5
# Survives preemption. On preemptible capacity the owner's own jobs may take the cores back:
# Slurm then sends this script SIGTERM, lets it run for the cluster's grace period (the offer
# shows it), stops it and queues it again under the same id. That run is not charged; the next
# one starts from the state saved here. A job that exits during the grace has ended for good
# (Slurm does not run it again), so on SIGTERM this one saves and waits to be stopped.
set -uo pipefail
state=state.txt
step=$(cat "$state" 2>/dev/null || echo 0)
echo "run ${SLURM_RESTART_COUNT:-0} starts at step $step"
stopping=0
trap 'stopping=1' TERM
while (( step < 120 )); do
    if (( stopping )); then
        echo "$step" > "$state"
        echo "SIGTERM: saved step $step; Slurm will run the job again from here"
        while true; do sleep 1; done
    fi
    sleep 1  # one step of the work
    step=$((step + 1))
done
echo "$step" > "$state"
echo "done after $step steps"
"""

JOB_TEMPLATES: tuple[JobTemplate, ...] = (
    JobTemplate(
        slug="python-sweep",
        title="Python parameter sweep",
        technique="A job array runs the same script once per index, side by side; each task "
        "reads its index ($SLURM_ARRAY_TASK_ID) to pick its own parameter, and %2 caps how "
        "many run at once.",
        script=_PYTHON_SWEEP,
    ),
    JobTemplate(
        slug="openmp",
        title="Multi-threaded run (OpenMP)",
        technique="One process uses several cores of one node through threads: the job asks "
        "for them with CPUs per task, and OMP_NUM_THREADS is set to that number.",
        script=_OPENMP,
    ),
    JobTemplate(
        slug="mpi-srun",
        title="MPI run across nodes (srun)",
        technique="Several processes, possibly on several nodes, work on one problem: ntasks "
        "sets how many, nodes how many machines, and srun starts one per task.",
        script=_MPI,
    ),
    JobTemplate(
        slug="checkpoint",
        title="A long run that survives preemption",
        technique="On preemptible capacity the owner's jobs may take the cores back: the job "
        "gets SIGTERM and the cluster's grace period to save its state, then Slurm queues it "
        "again and its next run resumes from what it saved (the preempted run is not charged).",
        script=_CHECKPOINT,
    ),
    JobTemplate(
        slug="gpu",
        title="GPU run",
        technique="The job asks for GPUs and Slurm gives it those devices alone; offered only "
        "where the partition has GPUs.",
        script=_GPU,
    ),
)

_BY_SLUG = {template.slug: template for template in JOB_TEMPLATES}


def job_template_get(slug: str) -> JobTemplate | None:
    return _BY_SLUG.get(slug)


def job_templates_for(*, has_gpus: bool) -> list[JobTemplate]:
    """The templates a partition can run: the GPU ones only where it has GPUs."""
    return [template for template in JOB_TEMPLATES if has_gpus or not template.needs_gpus]
