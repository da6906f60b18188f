# One command each: `make demo`, `make test`, `make dev`. Each sets up what it needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export DAGSTER_HOME ?= $(CURDIR)/.data/dagster

.PHONY: setup bytecode instance demo test test-connect test-slow dev sql bench bench-cluster soak lint clean cluster spark-connect cluster-down stack stack-down stack-demo

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "Python 3.11+ is needed (found $$($(PYTHON) --version)); set PYTHON=python3.11"; exit 1; }
	@# The installers' output goes to a log, shown only when it fails.
	@mkdir -p .data
	$(PYTHON) -m venv $(VENV)
	@# uv installs the packages (pip only installs uv): it fetches wheels in parallel and
	@# links them from its cache, where pip takes 54 s with its cache warm. What runs import
	@# is compiled at install, as pip does: with PYTHONDONTWRITEBYTECODE set (as on these
	@# machines), every process would compile dagster and pyspark again (runs took twice as
	@# long to start). The test tools, which only test processes import, are not: compiling
	@# them too took every set-up 22 s more.
	$(PY) -m pip install --quiet uv > .data/setup.log 2>&1 || { cat .data/setup.log; exit 1; }
	$(PY) -m uv pip install --quiet --compile-bytecode --python $(PY) -e . >> .data/setup.log 2>&1 || { cat .data/setup.log; exit 1; }
	$(PY) -m uv pip install --quiet --python $(PY) -e '.[dev]' >> .data/setup.log 2>&1 || { cat .data/setup.log; exit 1; }
	@# Spark needs Java 17+: stop here with what to install rather than fail deep in a run.
	@$(PY) -c 'from resources.spark import ensure_java; print("Java for Spark:", ensure_java())'
	@# Delta Lake (and hadoop-aws for s3://) from Maven Central, once, into a cache that
	@# every later run reuses without touching the network.
	$(PY) -c 'from resources.spark_packages import main; main([])'
	touch $(STAMP)

# Written on every set-up: with DAGSTER_POSTGRES_URL set, the instance stores runs, event
# logs and schedules in that Postgres database instead of SQLite (platform/instance.py).
instance: $(STAMP)
	@$(PY) platform/instance.py $(DAGSTER_HOME)

# Plain `dagster dev` / `dagster asset materialize` run in this folder use the project's
# instance too: Dagster's CLI reads `.env` from its working directory. The default is
# absolute (Dagster requires it), and a DAGSTER_HOME already set still wins.
.env:
	echo 'DAGSTER_HOME=$${DAGSTER_HOME:-$(DAGSTER_HOME)}' > $@

# The project's own modules compiled to bytecode, as the installer compiles the packages:
# with PYTHONDONTWRITEBYTECODE set, every run process would compile them from source
# again (a share of each run's start). compileall redoes only the files that changed.
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 assets resources sensors platform > /dev/null

setup: $(STAMP) bytecode instance .env

demo: setup
	$(PY) -u -m demo

# The linter first (a second): CI runs `make test`, so style and unused code fail it too.
# TEST_WORKERS processes share the tests out (each with its own Spark); 1: one process.
TEST_WORKERS ?= 2
test: lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal

# The same suite attached to a long-lived Spark (a Spark Connect server each test process
# starts and stops), the way every run under `make dev` and `make demo` reaches Spark.
test-connect: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal --through-connect

test-slow: setup
	@# The UI test drives Debian's Chromium (Playwright never downloads a browser here).
	@command -v chromium > /dev/null || { echo "installing Debian's chromium for the UI test"; \
	  apt-get update -qq && apt-get install -y -qq chromium >> .data/setup.log 2>&1; }
	$(PY) -m pytest -m slow

# The long-lived Spark (Spark Connect on 127.0.0.1:15002) and `dagster dev` (UI on
# http://127.0.0.1:3000); Ctrl-C stops both. ARGS go to `dagster dev`, e.g. ARGS="-p 3001".
dev: setup
	$(PY) platform/dev.py $(ARGS)

# The tables by name over JDBC (beeline on the long-lived Spark's catalog); one statement:
# make sql Q="SELECT count(*) FROM lakehouse.visits_daily". Q is passed through the
# environment, so its quotes need no escaping.
export Q
sql: setup
	@$(PY) platform/sql.py

# Cost ratios; `LAKEHOUSE_ENGINE=delta-spark make bench` times the Overwriting and MERGE
# bounds on delta-spark.
bench: setup
	$(PY) benchmarks/overwriting.py
	$(PY) benchmarks/merge_pruning.py
	$(PY) benchmarks/telemetry.py
	$(PY) benchmarks/engines.py
	$(PY) benchmarks/payments.py
	$(PY) benchmarks/sessions.py
	$(PY) benchmarks/user_events.py
	$(PY) benchmarks/manifest.py
	$(PY) benchmarks/backfill.py
	$(PY) benchmarks/bad_ranges.py
	$(PY) benchmarks/run_cost.py
	$(PY) benchmarks/sensor_ticks.py
	$(PY) benchmarks/delta_log.py

# The chaos soak: MINUTES of files landing while run processes, the long-lived Spark, the
# code server and the daemon are SIGKILLed, then the time until every table is right
# (benchmarks/soak.py). Run it with three seeds: make soak SEED=2.
SEED ?= 1
MINUTES ?= 5
soak: setup
	$(PY) -u benchmarks/soak.py --seed $(SEED) --minutes $(MINUTES)

# Benchmarks that start a standalone cluster (and a Spark Connect server) themselves.
bench-cluster: setup
	$(PY) benchmarks/big_day.py
	$(PY) benchmarks/deployments.py

# A Spark standalone master and two workers on 127.0.0.1, from pyspark's distribution.
cluster: setup
	$(PY) platform/spark_cluster.py up

# A long-lived Spark (Spark Connect) for run processes to attach to: on the cluster if
# one is up, else local.
spark-connect: setup
	$(PY) platform/spark_cluster.py connect

# The production profile on 127.0.0.1: an object store (s3proxy), Postgres, a Spark
# cluster with the long-lived Spark on it, and Dagster's webserver and daemon as separate
# processes (platform/stack.py). In the foreground; `make stack-down` stops it.
stack: setup
	$(PY) -u platform/stack.py up

stack-down:
	$(PY) platform/stack.py down

# The demo on the stack `make stack` brought up: its files land in the stack's bucket, its
# runs go to the stack's daemon and cluster, its tables into the stack's object store.
stack-demo: setup
	set -a && source .data/stack/env && set +a && $(PY) -u -m demo

cluster-down:
	$(PY) platform/spark_cluster.py down

# Style, then types: mypy checks the packages the platform runs (settings in pyproject.toml).
# mypy keeps its cache beside the Spark packages' (a fresh clone checks in under a second
# where it took 14 s); it checks again every file whose content changed, whichever clone.
MYPY_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/idempotent-lakehouse/mypy
lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
	MYPY_CACHE_DIR=$(MYPY_CACHE_DIR) $(VENV)/bin/mypy

clean:
	rm -rf .data
