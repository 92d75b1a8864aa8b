"""The performance table, printed at the end of `make bench` from the figures its benches
recorded in this run (bench_support.record_figure), each with "met" or "NOT met".

    .venv/bin/python bench/summary.py [--figures var/bench/figures.jsonl]

A row the run did not measure says so: the table always has every row, so that a bench that
stopped early cannot hide a figure.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_support import FIGURES

# The rows of the performance issue, in its order. A bench may record more figures than these;
# they follow, in the order they were recorded.
ROWS = [
    ("submit.bridge", "cluster_jobs_submit (200 queued rows) / plain sbatch"),
    ("submit.end_to_end", "200 POST /jobs/ through gunicorn and a worker to squeue / plain sbatch"),
    ("poll.seconds", "steady poll, 5,000 active jobs: seconds"),
    ("poll.commands", "steady poll, 5,000 active jobs: SSH commands"),
    ("poll.worker_mib", "steady poll, 5,000 active jobs: worker peak memory"),
    ("clearing.1000", "clearing / loading the bids, 1,000 bids"),
    ("clearing.10000", "clearing / loading the bids, 10,000 bids"),
    ("clearing.100000", "clearing / loading the bids, 100,000 bids"),
    ("offers.ratio", "offers list API / bare Django view"),
    ("money.processes", "hold + capture pairs, 8 processes on 8 organizations / 1 process"),
    ("money.shared_rows", "rows every charge must lock"),
    ("bids.rush", "bid_place closing rush, 4 processes / serial"),
]


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
        if figure is None:
            rows.append((label, "not measured in this run", "", "NOT met"))
        else:
            rows.append(_row(figure))
    rows.extend(_row(figure) for figure in recorded.values())
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    header = ("figure", "measured", "aim", "")
    print()
    print("Performance, this run:")
    for row in [header, tuple("-" * width for width in widths), *rows]:
        print("  " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    missed = sum(row[3] != "met" for row in rows)
    print(f"  {len(rows) - missed} of {len(rows)} met")


def _row(figure: dict[str, object]) -> tuple[str, str, str, str]:
    return (
        str(figure["label"]),
        str(figure["value"]),
        str(figure["aim"]),
        "met" if figure["met"] else "NOT met",
    )


if __name__ == "__main__":
    main()
