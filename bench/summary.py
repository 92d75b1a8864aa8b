"""The performance table, printed at the end of `make bench` from the figures its benches
recorded in this run (bench_support.record_figure), each with "met" or "NOT met".

    .venv/bin/python bench/summary.py [--figures var/bench/figures.jsonl]

A row the run did not measure says so: the table always has every row, so that a bench that
stopped early cannot hide a figure. The load test's row is measured by `make loadtest`, not
`make bench`: without it in the file the row names that command and counts as neither met
nor NOT met (the figures file is emptied at the start of `make bench`).
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_support import FIGURES

# The rows of the performance issues, issue 33's first and in its order, then issue 15's that
# it left as they were. A bench may record more figures than these; they follow, in the order
# they were recorded.
ROWS = [
    ("money.processes", "hold + capture pairs, 8 processes on 8 organizations / 1 process"),
    ("bids.rush", "bid_place closing rush, 4 processes / 1"),
    ("submit.platform_cpu", "200 POST /jobs/ end to end: the platform's CPU a job"),
    ("clearing.1000", "clearing / loading the bids, 1,000 bids"),
    ("offers.ratio", "offers list API / bare Django view"),
    ("loadtest.p95", "site under load (make loadtest), 200 people: p95, errors"),
    ("submit.bridge", "cluster_jobs_submit (200 queued rows) / plain sbatch"),
    ("submit.end_to_end", "200 POST /jobs/ through gunicorn and a worker to squeue / plain sbatch"),
    ("poll.seconds", "steady poll, 5,000 active jobs: seconds"),
    ("poll.commands", "steady poll, 5,000 active jobs: SSH commands"),
    ("poll.worker_mib", "steady poll, 5,000 active jobs: worker peak memory"),
    ("clearing.10000", "clearing / loading the bids, 10,000 bids"),
    ("clearing.100000", "clearing / loading the bids, 100,000 bids"),
    ("money.shared_rows", "rows every charge must lock"),
]

# Rows that `make bench` does not measure: their own command does (and records the figure in
# the same file), so a bench run without it says which command, neither met nor NOT met.
ELSEWHERE = {
    "loadtest.p95": (
        "p95 < 300 ms and 0 errors at 200 people; the most people within it",
        "make loadtest (about 10 min)",
    ),
}
NOT_RUN = "not run"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", type=Path, default=FIGURES)
    arguments = parser.parse_args()
    recorded: dict[str, dict[str, object]] = {}
    if arguments.figures.exists():
        for line in arguments.figures.read_text().splitlines():
            if line.strip():
                figure = json.loads(line)
                recorded[str(figure["key"])] = figure
    rows = []
    for key, label in ROWS:
        figure = recorded.pop(key, None)
        if figure is not None:
            rows.append(_row(figure))
        elif key in ELSEWHERE:
            aim, command = ELSEWHERE[key]
            rows.append((label, f"not in this run: {command} measures it", aim, NOT_RUN))
        else:
            rows.append((label, "not measured in this run", "", "NOT met"))
    rows.extend(_row(figure) for figure in recorded.values())
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    header = ("figure", "measured", "aim", "")
    print()
    print("Performance, this run:")
    for row in [header, tuple("-" * width for width in widths), *rows]:
        print("  " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    measured = [row for row in rows if row[3] != NOT_RUN]
    met = sum(row[3] == "met" for row in measured)
    elsewhere = len(rows) - len(measured)
    print(
        f"  {met} of {len(measured)} met"
        + (f"; {elsewhere} measured by another command, not run" if elsewhere else "")
    )


def _row(figure: dict[str, object]) -> tuple[str, str, str, str]:
    return (
        str(figure["label"]),
        str(figure["value"]),
        str(figure["aim"]),
        "met" if figure["met"] else "NOT met",
    )


if __name__ == "__main__":
    main()
