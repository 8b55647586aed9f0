# Quick start: `make demo` and `make test`. Both create the local virtual
# environment `.venv` on first use and refresh it when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-seeds test-portable test-oldest test-fast lint docs figures bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m attention_cluster

# SciPy's array API mode, read when SciPy is first imported: without it
# scikit-learn skips its check of array API input (check_array_api_input)
# for every estimator of tests/test_common.py.
TEST_ENV := SCIPY_ARRAY_API=1

# The documentation is built first: tests/test_docs_links.py checks the build.
test: $(STAMP)
	$(MAKE) lint
	$(MAKE) docs
	$(TEST_ENV) $(PY) -m pytest -n 2 -q --doctest-modules attention_cluster tests

# The tests whose numbers must hold for any seed, under 20 more seeds (about
# 20 s each); SEEDS="7 99" runs others.
SEEDS ?= $(shell seq 1 20)
test-seeds: $(STAMP)
	@for s in $(SEEDS); do \
		echo "ATTENTION_CLUSTER_TEST_SEED=$$s"; \
		$(TEST_ENV) ATTENTION_CLUSTER_TEST_SEED=$$s $(PY) -m pytest -n 2 -q -p no:cacheprovider --seeded-only tests || exit 1; \
	done

# The suite with Numba's kernels compiled for generic x86-64 (no FMA, no
# AVX), in a cache of their own: tests whose numbers hold only for one CPU's
# rounding fail here (x86-64 machines only).
test-portable: $(STAMP)
	$(TEST_ENV) NUMBA_CPU_NAME=generic NUMBA_CACHE_DIR=$(VENV)/numba-generic $(PY) -m pytest -n 2 -q -p no:cacheprovider tests

# The suite on the oldest versions pyproject.toml admits (.ci/oldest.txt), in
# an environment of its own: a floor the code has outgrown fails here. On the
# oldest Python too (Numba 0.60 and NumPy 2.0 have no wheels beyond 3.12).
OLDEST := .venv-oldest
OLDEST_PYTHON ?= python3.11
test-oldest:
	$(OLDEST_PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python -m pip install --quiet -c .ci/oldest.txt -e ".[test,dask,docs]"
	$(OLDEST)/bin/python -m sphinx -q -b html docs docs/_build/html
	$(TEST_ENV) $(OLDEST)/bin/python -m pytest -n 2 -q -p no:cacheprovider --doctest-modules attention_cluster tests

test-fast: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest -n 2 -q --doctest-modules -m "not slow" attention_cluster tests

# Formatter and linter, configured in pyproject.toml ([tool.ruff]).
lint: $(STAMP)
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .

docs: $(STAMP)
	@if [ -f docs/conf.py ]; then $(PY) -m sphinx -W --keep-going -b html docs docs/_build/html; else echo "docs: no docs/conf.py yet"; fi

figures: $(STAMP)
	$(PY) -m examples.make_figures

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/engine.py
	$(PY) benchmarks/cold_start.py
	$(PY) benchmarks/peers.py
	$(PY) benchmarks/fit_time.py
	$(PY) benchmarks/psgd_accuracy.py
	$(PY) benchmarks/solvers.py
	$(PY) benchmarks/defaults.py
	$(PY) benchmarks/quantizer_speed.py
	$(PY) benchmarks/quantizer_pipeline.py
	$(PY) benchmarks/streaming.py
	$(PY) benchmarks/stream_order.py
	$(PY) benchmarks/out_of_core.py
	$(PY) benchmarks/out_of_core.py --source zarr
	$(PY) benchmarks/user_data.py
	$(PY) benchmarks/run.py
	$(PY) benchmarks/dynamics.py
	$(PY) benchmarks/choose_k.py
	$(PY) benchmarks/many_clusters.py

clean:
	rm -rf $(VENV) $(OLDEST) docs/_build docs/auto_examples docs/generated .pytest_cache .hypothesis
