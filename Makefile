# Quick start: `make run` then `make test`. Each sets up .venv first (once).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test test-fast test-hostile coverage docs bench bench-lightning-venv clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/mindexp run linear

# Tests run in three worker processes (pytest-xdist), a test file per worker at
# a time, so module fixtures are made once. Three on two cores: many tests wait
# on msrun, servers, signals or subprocesses rather than on the CPU, and with two
# workers a core idled through every such wait (the suite used 1.74 of 2 cores;
# with three, 1.85-1.87: full runs took 13.6-16 minutes, against 16-20 with two).
# Files go out costliest first (tests/conftest.py orders them; xdist's own
# reorder, by test count, would leave the one-test 3-minute fault injection
# for last).
# The slowest 20 tests and the suite's wall time and CPU-seconds (tests/conftest.py) are
# printed at the end.
PYTEST := $(BIN)/python -m pytest -q -ra -p no:cacheprovider -n 3 --dist loadfile --no-loadscope-reorder

# The full suite (what CI runs).
test: $(STAMP)
	$(PYTEST) --durations=20

# Branch coverage of framework/ and callbacks/ over the full suite, subprocesses
# included (coverage's patch = subprocess, setup.cfg); not part of the timed `make test`.
coverage: $(STAMP)
	rm -f .coverage .coverage.*
	COVERAGE_FILE=$(CURDIR)/.coverage COVERAGE_RCFILE=$(CURDIR)/setup.cfg \
		$(PYTEST) --cov --cov-config=setup.cfg --cov-report= $(COVERAGE_ARGS) || true
	$(BIN)/coverage combine -q --keep 2>/dev/null || true
	$(BIN)/coverage report --rcfile=setup.cfg --skip-covered --sort=cover | tail -n 45

# The inner loop: every test not marked slow (nothing trains for long). Two workers:
# its tests keep the CPU busy (the third worker of `make test` fills the waits of slow
# tests), and each worker costs its start and a collection of every file (~10 CPU-s).
# No fork server (tests/forkserver.py): its start (~3 CPU-s a worker) costs more than
# the few processes of this tier that import MindSpore.
test-fast: $(STAMP)
	MINDEXP_TEST_FORK=0 $(PYTEST) -m "not slow" -n 2

# The property suite over hostile run folders with a random seed (make test runs
# it derandomised): many more examples; the seed is printed, and
# `make test-hostile SEED=N` repeats a run. HOSTILE_EXAMPLES sets how many.
HOSTILE_EXAMPLES ?= 150
test-hostile: $(STAMP)
	@seed=$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	echo "test-hostile: seed $$seed (repeat with: make test-hostile SEED=$$seed)"; \
	MINDEXP_HOSTILE=1 MINDEXP_HOSTILE_EXAMPLES=$(HOSTILE_EXAMPLES) $(BIN)/python -m pytest -q \
		-p no:cacheprovider tests/framework/rundir/test_hostile_property.py \
		--hypothesis-seed=$$seed --hypothesis-show-statistics

# The manual (docs/, mkdocs.yml) as a static site in site/, offline; --strict: a
# broken link or a missing API object fails the build.
docs: $(STAMP)
	$(BIN)/python -m mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# Optional: PyTorch Lightning side by side (goal 1), in its own venv
bench-lightning-venv:
	benchmarks/setup_lightning.sh

clean:
	rm -rf $(VENV) build site *.egg-info .coverage .coverage.*
