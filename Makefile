# turnledger: every target does its own set-up, so `make test` / `make demo` work on a fresh clone.
# Set-up steps are idempotent: the venv is rebuilt only when pyproject.toml changes (stamp file),
# system packages are installed only when missing (and only as root), Kafka jars are fetched once (cache).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.turnledger-installed
# Packages go in with uv (installed into the venv by pip) when it can be had: a fresh venv takes ~2 s where
# pip takes ~45, and uv keeps the wheel it built for gssapi, which pip built again (~20 s) for every clone.
# pip does the job when uv cannot be installed or fails.
INSTALL = $(BIN)/python -m pip install -q uv 2>/dev/null && $(BIN)/uv pip install --python $(BIN)/python -q $(1) \
	|| { echo "uv could not install them: pip installs $(1) instead (slower)" >&2; $(BIN)/python -m pip install -q $(1); }
KERBEROS_EXTRA := -e '.[dev,kerberos]'
PYTEST_ARGS ?=
# workers of the first pass (the tests that need no broker or Redis): pytest-xdist's -n
TEST_WORKERS ?= auto
# workers of the integration pass, each with a stack of its own (0: one pytest process, no xdist)
INTEGRATION_WORKERS ?= 2

.PHONY: setup venv system-deps kafka-jars kerberos test demo lint bench dev-up dev-down clean mutation fuzz

setup: venv system-deps kafka-jars kerberos

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(call INSTALL,-e '.[dev]')
	@touch $@

# redis-server (unless REDIS_URL is given) and, for the local broker, Java 17+ and Maven
# (unless KAFKA_BOOTSTRAP_SERVERS is given). Installed with apt only when missing and running as root.
# prometheus (the devstack starts it; the live-metrics test scrapes the services with it) the same way,
# without recommends (they pull in exporters), and chromium (the browser tests drive it through Playwright,
# which cannot download a browser here), and valgrind (`bench_dispatch_engine --instructions` counts with it);
# openssl (the devstack makes its mutual-TLS client key with it; on Debian Java already brings it);
# when one cannot be installed, the tests that need it are skipped. MIT Kerberos the same way: its KDC and
# tools (the Kerberos test makes its own realm) and libkrb5-dev with gcc, which `make kerberos` builds gssapi
# against (no wheel for every platform), and the interpreter's C headers when it has none.
system-deps:
	@missing=""; \
	if [ -z "$${REDIS_URL:-}" ] && ! command -v redis-server >/dev/null; then missing="$$missing redis-server"; fi; \
	if [ -z "$${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then \
	  command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	  command -v mvn >/dev/null || missing="$$missing maven"; \
	fi; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	  else \
	    echo "Missing system packages:$$missing. Install them (e.g. sudo apt-get install -y$$missing)," \
	         "or set REDIS_URL / KAFKA_BOOTSTRAP_SERVERS to existing services." >&2; exit 1; \
	  fi; \
	fi; \
	optional() { \
	  command -v "$$1" >/dev/null && return 0; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing: $$1"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$$1"; \
	  else \
	    echo "$$1 is not installed: $$2 (sudo apt-get install -y --no-install-recommends $$1)." >&2; \
	  fi; \
	}; \
	optional openssl "the devstack's mutual-TLS listener and its tests will be left out"; \
	optional prometheus "the live-metrics integration test will be skipped"; \
	optional valgrind "bench_dispatch_engine --instructions and its test will not run"; \
	optional chromium "the browser integration tests will be skipped"; \
	krb=""; \
	command -v krb5-config >/dev/null || krb="$$krb libkrb5-dev"; \
	PATH="$$PATH:/usr/sbin:/sbin" command -v krb5kdc >/dev/null || krb="$$krb krb5-kdc"; \
	PATH="$$PATH:/usr/sbin:/sbin" command -v kadmin.local >/dev/null || krb="$$krb krb5-admin-server"; \
	if ! $(BIN)/python -c 'import gssapi' 2>/dev/null; then \
	  command -v gcc >/dev/null || krb="$$krb gcc"; \
	  $(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.isfile(sysconfig.get_path("include") + "/Python.h"))' \
	    || krb="$$krb python3-dev"; \
	fi; \
	if [ -n "$$krb" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing:$$krb"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$krb; \
	  else \
	    echo "Missing for Kerberos:$$krb: KAFKA_SASL_MECHANISM=GSSAPI and its test will not work" \
	         "(sudo apt-get install -y --no-install-recommends$$krb)." >&2; \
	  fi; \
	fi

# The `kerberos` extra (gssapi, built from source against MIT Kerberos) once krb5-config is there. A build
# that fails says so and setup goes on: KAFKA_SASL_MECHANISM=GSSAPI then says how to install it, and the
# Kerberos test is skipped (failed under CI). Built without optimisation unless CFLAGS says otherwise: its C
# runs a few calls per login, and -O0 builds in 24 s where -O2 takes 67 (gssapi 1.12.0, 2 cores); with uv,
# only a machine's first set-up builds it.
kerberos: venv system-deps
	@if command -v krb5-config >/dev/null && ! $(BIN)/python -c 'import gssapi' 2>/dev/null; then \
	  echo "Building gssapi (the kerberos extra) against MIT Kerberos"; \
	  ( export CFLAGS="$${CFLAGS:--O0}"; $(call INSTALL,$(KERBEROS_EXTRA)) ) \
	    || echo "Could not build gssapi: KAFKA_SASL_MECHANISM=GSSAPI will not work here." >&2; \
	fi

kafka-jars: venv system-deps
	@if [ -z "$${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then $(BIN)/turnledger dev fetch; fi

# Two passes over one collection: the tests that need no broker or Redis (the slow ones among them too: CPU
# work, such as the valgrind count) on TEST_WORKERS cores at once (about half the wall time of one process),
# then the integration tests on INTEGRATION_WORKERS workers, each starting a broker, Redis and Prometheus of
# its own (a test that stops or restarts its broker disturbs no other) and taking whole modules (a module's
# fixtures, such as a Redis cluster, are made once). They mostly wait on their services: one at a time left
# ~74% of two cores idle. Each pass runs whatever the other did; either failing fails the target. Exit 5 means
# "no tests collected": a broken suite. Bytecode is written even where the environment says not to
# (PYTHONDONTWRITEBYTECODE): each pass, each worker and each service a test starts would otherwise compile the
# sources again, and pytest rewrite every test module's asserts (~6 s of a collection's 14).
test: setup
	@unset PYTHONDONTWRITEBYTECODE; rc=0; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m "not integration" --durations=10 $(PYTEST_ARGS) tests || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests in the first pass: failing." >&2; fi; \
	rc2=0; $(BIN)/python -m pytest -n $(INTEGRATION_WORKERS) --dist loadfile -m "integration" --durations=15 \
	  $(PYTEST_ARGS) tests || rc2=$$?; \
	if [ $$rc2 -eq 5 ]; then echo "pytest collected no tests in the second pass: failing." >&2; fi; \
	$(BIN)/turnledger dev reap || true; \
	echo "make test: first pass exited $$rc, second pass $$rc2"; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; exit $$rc2

demo: setup
	$(BIN)/turnledger demo

lint: venv
	$(BIN)/ruff check turnledger tests
	$(BIN)/mypy turnledger

# Mutation testing of the guard modules ([tool.mutmut] in pyproject.toml; docs/mutation-report.md).
# Slow, so not in CI. MUTANTS selects mutants by name glob, e.g. MUTANTS='turnledger.dispatch.attempt.*';
# MUTATION_JOBS children (default 1: the machine is shared), under nice. Works in ./mutants/ (gitignored);
# the tests are copied afresh and the map of tests to functions collected again each run, so a new
# killing test counts and a function new since the last run gets every test that calls it; after a change
# of pyproject.toml (a module joining [tool.mutmut] only_mutate) mutants/ is made afresh, since mutmut
# does not mutate a module it copied unmutated before until that module's source changes.
# Bytecode is written (PYTHONDONTWRITEBYTECODE unset): the multiproc tests spawn children, which otherwise
# compile the whole mutated tree at every start and time out the stats run on a busy machine.
MUTANTS ?=
MUTATION_JOBS ?= 1
mutation: venv
	if [ pyproject.toml -nt mutants ]; then rm -rf mutants; fi
	rm -rf mutants/tests mutants/mutmut-stats.json
	nice -n 10 env -u PYTHONPATH -u PYTHONDONTWRITEBYTECODE $(abspath $(BIN))/mutmut run --max-children $(MUTATION_JOBS) $(MUTANTS)
	$(abspath $(BIN))/mutmut export-cicd-stats
	$(BIN)/python tests/mutation_summary.py

# Fuzzing at scale, in two parts. The seeded mutation fuzzer (tests/fuzz/mutation.py, targets.py) sends
# FUZZ_INPUTS mutated real inputs (default 100,000) into each decoder, parser, the assembler and the fold's
# interleavings, under nice; FUZZ_SEED picks the run, FUZZ_MUTATION_REPORT gets the counts (JSON).
# Then the hypothesis profile `fuzz` sends FUZZ_EXAMPLES structured inputs (default 2,000: hypothesis costs
# 15-50 ms per example here) into the same targets (tests/fuzz). CI runs both in their fast profiles.
FUZZ_INPUTS ?= 100000
FUZZ_SEED ?= 1
FUZZ_MUTATION_REPORT ?= fuzz-mutation-report.json
FUZZ_EXAMPLES ?= 2000
fuzz: venv
	env -u PYTHONPATH PYTHONPATH=. nice -n 10 $(BIN)/python -m tests.fuzz.run --inputs $(FUZZ_INPUTS) \
	  --seed $(FUZZ_SEED) --report $(FUZZ_MUTATION_REPORT)
	HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) nice -n 10 $(BIN)/python -m pytest -q -p no:cacheprovider \
	  -p no:timeout tests/fuzz

bench: setup
	$(BIN)/python -m bench

dev-up: setup
	$(BIN)/turnledger dev up

dev-down: venv
	$(BIN)/turnledger dev down

clean: dev-down
	rm -rf $(VENV) .devstack .pytest_cache .mypy_cache .ruff_cache
