# The two commands a newcomer needs: `make demo` and `make test`. Everything else is their parts.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
UV_VERSION := 0.13.9
export UV_PROJECT_ENVIRONMENT := $(VENV)
UV := $(VENV)/bin/uv
BIN := $(VENV)/bin

.PHONY: help install demo demo-soak test test-services lint typecheck migrations-check pytest bench loadtest clean \
	compose-check cluster-check api-reference

help:
	@echo "make demo    install everything and serve the demo on http://127.0.0.1:8000"
	@echo "make test    install everything, start PostgreSQL, Redis and the Slurm test cluster, run all checks"
	@echo "make compose-check  build and start docker-compose.yml's stack, drive it end to end, take it down"
	@echo "make cluster-check  a login node and two compute nodes in containers, driven end to end, taken down"
	@echo "make bench   print how fast the ledger, the webhook, auction clearing, the offers list and job submission are"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(UV): | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"

# Python from uv.lock, the pages' libraries from package-lock.json.
install: $(UV)
	$(UV) sync --frozen --inexact --quiet
	npm ci --no-audit --no-fund --loglevel=error

demo: install
	scripts/demo

# The demo under a browser and an API client for an hour (bench/demo_soak.py): requests, errors
# and crashes. Not part of `make test` or CI; SOAK_ARGS="--minutes 2" for a short one.
demo-soak: install
	$(BIN)/python bench/demo_soak.py $(SOAK_ARGS)

# --- make test -----------------------------------------------------------------------------
test: install test-services migrations-check lint typecheck pytest

# PostgreSQL and Redis answering (started when they do not), Chromium for the browser tests,
# and the Slurm test cluster behind its own sshd. Each fails loudly rather than skipping.
test-services:
	scripts/test-services
	scripts/testcluster up
	TESTCLUSTER_INSTANCE=b scripts/testcluster up

migrations-check:
	DJANGO_SETTINGS_MODULE=computeshare.settings.test $(BIN)/python manage.py makemigrations --check --dry-run

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck:
	$(BIN)/mypy

# Four pytest processes side by side: the Slurm test clusters' tests in two, one per cluster,
# each one after the other; the pages', the CLI's and the platform's own in the third; the apps'
# in the fourth (scripts/pytest-processes).
pytest:
	PYTEST=$(BIN)/pytest scripts/pytest-processes

# Figures, not pass or fail, on the local PostgreSQL: how fast money moves (bench/ledger.py),
# how the market clears auctions and serves the offers list (bench/marketplace.py), and how
# jobs reach the Slurm test cluster and are followed and charged (bench/jobs.py).
bench: install
	scripts/test-services
	scripts/testcluster up
	rm -f var/bench/figures.jsonl
	$(BIN)/python bench/ledger.py
	$(BIN)/python bench/marketplace.py
	$(BIN)/python bench/jobs.py
	$(BIN)/python bench/summary.py

# The production shape (docker-compose.yml: two web containers behind the proxy, two workers per
# queue, one beat) built and driven end to end on this machine, with one worker of each queue
# and one web container killed mid-journey, then taken down: not part of `make test` or CI (it
# installs Docker, builds images, needs about 4 to 6 minutes).
# docs/api.md's endpoints, shapes and error codes, written again from the code (the suite fails
# when they are stale: tests/computeshare/test_api_reference.py).
api-reference: install
	DJANGO_SETTINGS_MODULE=computeshare.settings.test $(BIN)/python manage.py api_reference

compose-check:
	scripts/compose-check

# A real cluster's shape in containers (docs/cluster-check.md): a login node and two compute
# nodes with GPUs and a shared /home, the platform on this host, the journey of issue 31
# through the public API, then everything taken down. Not part of `make test` or CI (it
# installs Docker, builds an image, needs about 20 minutes).
cluster-check: install
	scripts/cluster-check

clean:
	rm -rf $(VENV) node_modules staticfiles var .pytest_cache .ruff_cache .mypy_cache

# The site under load (bench/loadtest/run.py): simulated people (Locust) browse, bid, buy and
# run tiny jobs against gunicorn, a Celery worker per queue and beat, PostgreSQL, Redis and the
# Slurm test cluster: 50, 100, 150, ... people for 60 s each (LOADTEST_ARGS="--seconds 300" for
# longer, "--users 200 --only" for 200 alone), on past 200 until p95 < 300 ms with no errors
# fails; prints each step, p50/p95/p99 per kind of request at 200, the errors and the machine's
# load, and the most people within the aim. Figures, not pass or fail.
loadtest: install
	scripts/test-services
	scripts/testcluster up
	$(BIN)/python bench/loadtest/run.py $(LOADTEST_ARGS)
