# The two set-up commands of the README: `make conformance` (the main job) and
# `make test`. Both create .venv, install everything and build the extension
# on a fresh machine, and are quick when nothing changed.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# The stamp's name changes with the list of packages below, so that an existing .venv
# installs what was added (expecttest, pytest-split, pytest-timeout: the op coverage area;
# pyyaml: .github/scripts/accelerators.py).
DEPS := $(VENV)/.flagos-deps-3
REGISTERED := $(VENV)/.flagos-registered
SOURCES := $(shell find csrc -name '*.cpp' -o -name '*.h')
PYTEST_ARGS ?=

.PHONY: build test test-slow conformance conformance-cpu conformance-ops-full smoke bench clean lint docs ci-configs sensitivity

# torch 2.13.0 is the CPU wheel that lies on this machine's disk (pip's
# find-links); naming the exact version keeps a resolver from pulling a CUDA build.
$(DEPS):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0 triton==3.7.0 "pytest>=8" "pytest-xdist>=3.5" "hypothesis>=6.100" \
	  "expecttest>=0.2" "pytest-split>=0.9" "pytest-timeout>=2.3" pyyaml pybind11 ninja setuptools wheel numpy
	touch $@

# Entry points (torch.backends, triton.backends, pytest11) need an install;
# the extension itself is built in place by the next rule.
$(REGISTERED): $(DEPS) pyproject.toml setup.py
	FLAGOS_SKIP_EXT=1 $(PIP) install -q --no-build-isolation --no-deps -e .
	touch $@

build: $(REGISTERED)
	$(PY) setup.py -q build_ext --inplace -j 2

# The default tier, a contributor's run: every test not marked slow, spread over the cores
# by xdist (the outcomes are those of a serial run). The compile tests run in one
# invocation on purpose: the worker pool is lazy and shared, so one file alone can be
# served before the pool is up.
test: build
	$(PY) -m pytest tests --ignore=tests/integration -m "not slow" -n auto $(PYTEST_ARGS)
	$(PY) -m pytest -p flagos --flagos-device=flagos tests/integration $(PYTEST_ARGS)

# The long tier, which CI runs too: the tests marked slow (the kit's sensitivity to
# planted device bugs, fdev end to end, multi-process DDP, pytester runs of inductor).
test-slow: build
	$(PY) -m pytest tests --ignore=tests/integration -m slow -n auto $(PYTEST_ARGS)

smoke: build
	$(PY) -m torch_fl.smoke

# The main job: the conformance suite on flagos (host accelerator), with the
# same command CI runs (.github/configs/flagos-host.yml), then its report.
# The exit status is the suite's; the report is printed either way.
CONFORMANCE_ARGS ?= -q -p no:cacheprovider --hypothesis-profile=flagos-ci
conformance: build
	@mkdir -p reports
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) .github/scripts/accelerators.py pytest flagos-host -- $(CONFORMANCE_ARGS); \
	  status=$$?; cat reports/flagos-host.md; exit $$status

conformance-cpu: build
	@mkdir -p reports
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) .github/scripts/accelerators.py pytest cpu -- $(CONFORMANCE_ARGS); \
	  status=$$?; cat reports/cpu.md; exit $$status

# The op coverage area's full tier (every op, claimed dtype and sample; float32 backward) on
# an accelerator of .github/configs, spread over cores; a share of the ops with OPS_SHARE=k/n,
# one machine's part with OPS_SPLIT="--splits N --group K" (pytest-split). Hours on 2 cores.
OPS_DEVICE ?= flagos-host
OPS_WORKERS ?= auto
OPS_SHARE ?= 1/1
OPS_SPLIT ?=
conformance-ops-full: build
	@mkdir -p reports
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" FLAGOS_OPS_TIER=full FLAGOS_OPS_SHARE=$(OPS_SHARE) \
	  $(PY) .github/scripts/accelerators.py pytest $(OPS_DEVICE) -- -k test_ops.py \
	  -n $(OPS_WORKERS) --flagos-compile-threads=1 $(OPS_SPLIT) $(CONFORMANCE_ARGS)

# Lint, docs and the CI manifests: light tools in the same venv, without torch (mypy does not
# follow torch, but reads pytest's and hypothesis's types). The stamp's name changes with the
# list of tools, so that an existing .venv installs new ones.
TOOLS := $(VENV)/.flagos-tools-2
$(TOOLS):
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q ruff==0.17.6 mypy==2.4.1 clang-format==23.1.5 pre-commit==4.7.0 mkdocs==1.6.1 pyyaml \
	  "pytest>=8" "hypothesis>=6.100"
	touch $@

# The same checks as .pre-commit-config.yaml (`pre-commit run --all-files`). mypy's files and
# settings: pyproject.toml [tool.mypy]; clang-format's: .clang-format.
lint: $(TOOLS)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/clang-format --dry-run --Werror $(SOURCES)

docs: $(TOOLS)
	$(VENV)/bin/mkdocs build --strict

ci-configs: $(TOOLS)
	$(PY) .github/scripts/accelerators.py validate

bench: build
	$(PY) benchmarks/bench_eager.py

# Kit sensitivity: plant each known device bug (tests/faults/) and show which conformance
# area catches it; the table of docs/results/sensitivity.md.
sensitivity: build
	$(PY) -m benchmarks.sensitivity

clean:
	rm -rf build torch_fl/_C*.so
