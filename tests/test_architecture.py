"""The rules of DESIGN.md that a reader of one file cannot see: imports go one way
(scheduler_bridge -> marketplace -> billing -> notifications -> webhooks -> computeshare), the
SSH and Slurm library has no Django, and only one module talks to Stripe.

The SSH and Slurm library (`scheduler_bridge.slurm`) and the schedulers behind one interface
(`scheduler_bridge.backends`) are plain Python with no Django and no app import: a leaf that
the marketplace uses to verify clusters and manage their accounts, as the jobs code uses it
to run jobs. Only the `scheduler_bridge` app (models, services, tasks)
sits above the marketplace."""

import ast
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
LAYERS = [
    "computeshare",
    "webhooks",
    "notifications",
    "billing",
    "marketplace",
    "scheduler_bridge",
]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def python_files(package: str) -> list[Path]:
    return sorted(
        path for path in (REPOSITORY / package).rglob("*.py") if "migrations" not in path.parts
    )


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_go_one_way(layer: str):
    above = LAYERS[LAYERS.index(layer) + 1 :]
    offenders = [
        f"{path.relative_to(REPOSITORY)} imports {module}"
        for path in python_files(layer)
        for module in imported_modules(path)
        if module.split(".")[0] in above
        and not module.startswith(("scheduler_bridge.slurm", "scheduler_bridge.backends"))
        # The project package wires every app's URLs together; that is its job.
        and not (layer == "computeshare" and path.name == "urls.py")
    ]
    assert offenders == []


def test_the_scheduler_libraries_have_no_django():
    offenders = [
        f"{path.relative_to(REPOSITORY)} imports {module}"
        for library in ("scheduler_bridge/slurm", "scheduler_bridge/backends")
        for path in python_files(library)
        for module in imported_modules(path)
        if module.split(".")[0] in {"django", "rest_framework", "celery", *LAYERS}
        and not module.startswith(("scheduler_bridge.slurm", "scheduler_bridge.backends"))
    ]
    assert offenders == []


def test_only_the_gateway_talks_to_stripe():
    importers = [
        str(path.relative_to(REPOSITORY))
        for layer in LAYERS
        for path in python_files(layer)
        if any(module.split(".")[0] == "stripe" for module in imported_modules(path))
    ]
    assert importers == ["billing/stripe_gateway.py"]
