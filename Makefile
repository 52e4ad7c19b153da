# gpusessions: the two commands are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CACHE := .cache
SHAPE ?= demo
export PYTHONPATH := $(CURDIR)/devcluster

.PHONY: gpu-check torch-check help venv labextension node-deps browser-deps devcluster-build helm-build cluster cluster-down cluster-status lint unit test screenshots fuzz bench demo demo-down clean

help:
	@echo "make demo          start the local simulated GPU cluster and JupyterHub, print the URL"
	@echo "make demo-down     stop the demo (hub, cluster and every process they started)"
	@echo "make test          lint, type-check and run all tests (builds what it needs)"
	@echo "make cluster SHAPE=<name>   start only the local cluster (shapes: devcluster/shapes/)"
	@echo "make cluster-down  stop the local cluster"
	@echo "make fuzz SEED=<n> OPS=<n>   the lifecycle fuzzer alone (tests/fuzz/lifecycle.py)"
	@echo "make screenshots   retake the README's pictures (docs/images/) with the browser tests"
	@echo "make gpu-check     the GPU agent on this machine's real NVML (needs an NVIDIA GPU)"
	@echo "make torch-check   parking's PyTorch tests (installs torch beside the venv once: 2.8 GB)"
	@echo "make bench         every benchmark (tests/bench/bench_*.py); writes docs/benchmarks.json"

# --- Python virtual environment (.venv) -------------------------------------
# `pip install -e` also builds the JupyterLab extension (labextension/, TypeScript: jlpm and
# Node.js; pyproject's jupyter-builder hook); the install helper links it into .venv.
$(VENV)/.installed: pyproject.toml
	@bash devcluster/scripts/ensure-debian-deps.sh python
	@bash devcluster/scripts/ensure-debian-deps.sh node
	@echo "gpusessions: creating the Python virtual environment in $(VENV) ..."
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install --quiet --upgrade pip
	@echo "gpusessions: installing the package and test tools (first time: a minute or two) ..."
	@$(BIN)/pip install --quiet -e '.[dev]'
	@# jsonschema's optional IRI format checker (rfc3987-syntax, from jupyter-events'
	@# jsonschema[format-nongpl]) compiles a Lark grammar when imported: about 1.3 s of CPU in
	@# every hub, notebook server and kernel host start. No schema we load uses the iri formats;
	@# without it jsonschema skips them. docs/devcluster.md, "Where the CPU goes".
	@$(BIN)/pip uninstall --quiet --yes rfc3987-syntax
	@$(BIN)/python -m gpusessions.notebook.install >/dev/null
	@touch $@

venv: $(VENV)/.installed

# The JupyterLab extension, rebuilt when its sources changed since (development build:
# source maps; `cd labextension && jlpm watch` rebuilds on every save).
LABEXT := spawner/gpusessions/notebook/labextension
LABEXT_SRC := $(wildcard labextension/src/*.ts labextension/style/*) labextension/package.json \
	labextension/yarn.lock labextension/tsconfig.json
$(LABEXT)/package.json: $(LABEXT_SRC) | $(VENV)/.installed
	@echo "gpusessions: building the JupyterLab extension (labextension/) ..."
	@cd labextension && PATH="$(CURDIR)/$(BIN):$$PATH" jlpm install --immutable >/dev/null \
		&& PATH="$(CURDIR)/$(BIN):$$PATH" jlpm build >/dev/null

labextension: $(LABEXT)/package.json

# --- configurable-http-proxy (npm), used by JupyterHub -----------------------
$(CACHE)/node/.installed:
	@bash devcluster/scripts/ensure-debian-deps.sh node
	@echo "gpusessions: installing configurable-http-proxy from npm into $(CACHE)/node ..."
	@mkdir -p $(CACHE)/node
	@npm install --silent --no-audit --no-fund --prefix $(CACHE)/node configurable-http-proxy@4 >/dev/null
	@touch $@

node-deps: $(CACHE)/node/.installed

# Debian's Chromium for the browser tests (Playwright drives it; it downloads no browser).
browser-deps:
	@bash devcluster/scripts/ensure-debian-deps.sh browser

# --- the local cluster ---------------------------------------------------------
# Kubernetes (devcluster/scripts/build.sh), then KAI Scheduler from its source (devcluster/kai/build.sh:
# ../shared/kai-scheduler, or KAI_SRC=<path>, or a clone of the pinned commit).
KAI_SRC ?=
devcluster-build:
	@bash devcluster/scripts/build.sh
	@KAI_SRC="$(KAI_SRC)" bash devcluster/kai/build.sh

cluster: venv devcluster-build
	@$(BIN)/python -m localcluster up --shape $(SHAPE)

cluster-down: venv
	@$(BIN)/python -m localcluster down

cluster-status: venv
	@$(BIN)/python -m localcluster status

# --- helm, built from its Go module (for the chart's tests) ----------------------
HELM_VERSION := v4.3.1
HELM := $(CACHE)/tools/bin/helm
$(CACHE)/tools/.helm-$(HELM_VERSION):
	@bash devcluster/scripts/build-helm.sh $(HELM_VERSION) $(CACHE)/tools/bin
	@touch $@

helm-build: $(CACHE)/tools/.helm-$(HELM_VERSION)

# --- checks ----------------------------------------------------------------------
lint: venv
	@echo "gpusessions: ruff, mypy and the import layers ..."
	@$(BIN)/ruff check .
	@$(BIN)/ruff format --check .
	@$(BIN)/mypy
	@$(BIN)/lint-imports --no-cache --no-logo

unit: venv labextension helm-build
	@$(BIN)/python -m pytest tests/unit -q

# Two workers (pytest-xdist), each a whole test module at a time on a local cluster of its own
# (the first reuses a running one; tests/conftest.py): most of a test is waiting for a scheduler,
# a culler cycle or a hub, so two share the two cores. TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 2
# Beside them, the DRA, spawner and KAI modules once more on Kubernetes 1.35 and 1.34, emulated
# by the 1.36 binaries (--emulated-version; docs/devcluster.md), each on a cluster of its own:
# started first, waited for last (most of those tests wait for a scheduler, not the CPU).
# EMULATED_VERSIONS= skips that pass.
EMULATED_VERSIONS ?= 1.35 1.34
EMULATED_TESTS := tests/integration/test_dra_behaviour.py tests/integration/test_kai_dra.py \
	tests/integration/test_kai_queues.py tests/integration/test_spawner.py
test: venv labextension node-deps browser-deps devcluster-build helm-build lint
	@echo "gpusessions: running the tests (they start the local cluster, or reuse a running one) ..."
	@set +e; emu=""; \
	if [ -n "$(strip $(EMULATED_VERSIONS))" ]; then \
		bash devcluster/scripts/emulated-tests.sh "$(EMULATED_VERSIONS)" $(EMULATED_TESTS) & emu=$$!; fi; \
	$(BIN)/python -m pytest --durations=15 $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile); rc=$$?; \
	if [ -n "$$emu" ]; then wait $$emu; erc=$$?; else erc=0; fi; \
	if [ $$rc -eq 5 ]; then echo "gpusessions: no tests were collected: that is a failure" >&2; exit 1; fi; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; \
	exit $$erc

# The README's pictures: the browser tests marked `screenshot` write docs/images/*.png, on a
# hub configured as the demo's (random ports, a namespace of their own) and a demo-shaped local
# cluster (DEVCLUSTER_PORT_BASE's: a running demo's cluster is reused, its hub left alone; a
# cluster of another shape there must be stopped first: make cluster-down).
screenshots: venv labextension node-deps browser-deps devcluster-build
	@DEVCLUSTER_TEST_SHAPE=demo GPUSESSIONS_PICTURES=$(CURDIR)/docs/images \
		$(BIN)/python -m pytest tests/browser -m screenshot -q

# The agent on this machine's real NVML (read-only); one line and exit 1 without an NVIDIA GPU.
gpu-check: venv
	@$(BIN)/python -m gpusessions.agent.gpucheck --park-dir $(CACHE)/gpu-check
	@$(BIN)/python -m pytest -m gpu tests/gpu -q

# Parking's torch tests (tests/unit/test_park_torch.py): torch from PyPI (the CUDA wheel and its
# nvidia-* dependencies, 2.8 GB: not in `make test`) into a folder of its own, put on the path.
TORCH_LIB := $(CACHE)/torch-lib
torch-check: venv
	@test -f $(TORCH_LIB)/.installed || { echo "gpusessions: installing torch into $(TORCH_LIB) (2.8 GB, once) ..."; \
		$(BIN)/pip install -q --target $(TORCH_LIB) torch && touch $(TORCH_LIB)/.installed; }
	@PYTHONPATH=$(TORCH_LIB) $(BIN)/python -m pytest -q -m torch tests/unit/test_park_torch.py

# Lifecycle fuzzer alone: make fuzz SEED=<n> OPS=<n> [USERS=<n>] (tests/fuzz/lifecycle.py)
SEED ?= 1
OPS ?= 500
USERS ?= 20
fuzz: venv labextension node-deps devcluster-build
	@$(BIN)/python -m tests.fuzz.lifecycle --seed $(SEED) --ops $(OPS) --users $(USERS)

# Every benchmark with its default arguments (tests/bench/run_all.py): results to
# docs/benchmarks.json, commands and dates to docs/benchmarks.md. ONLY=a,b or SKIP=a,b to choose.
ONLY ?=
SKIP ?=
bench: venv labextension node-deps devcluster-build
	@$(BIN)/python tests/bench/run_all.py --only "$(ONLY)" --skip "$(SKIP)"

# --- the demo ------------------------------------------------------------------------
demo: venv labextension node-deps devcluster-build
	@$(BIN)/python -m localcluster.demo up

demo-down: venv
	@$(BIN)/python -m localcluster.demo down

clean: cluster-down
	rm -rf $(CACHE)/demo
