# Two commands do everything on a fresh machine (Python 3.11+, Node 20, no AWS account):
#   make demo   the main job on the local stack
#   make test   the whole suite (lint, unit, CDK synth, end-to-end on the local stack)
#   make check  the fast loop: lint and the unit tests, in parallel
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The demos' light environment: only what the local stack and the example agents run (no CDK, linters or
# test tools); `make train-demo` adds CPU PyTorch and matplotlib to it.
DEMO_VENV := .venv-demo
DEMO_BIN := $(DEMO_VENV)/bin
# The optional machine-learning environment: CPU PyTorch, verl, agentcore-rl-toolkit (tests/ml/).
ML_VENV := .venv-ml
ML_BIN := $(ML_VENV)/bin
# Bytecode keeps `import aws_cdk` about 4x faster; the environment may turn it off.
unexport PYTHONDONTWRITEBYTECODE
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export UV_LINK_MODE := copy

.PHONY: install demo-env ml-env browser test test-ml check lint demo train-demo clean

install: $(VENV)/.installed node_modules/.installed

# aws-cdk-lib and its dependency aws-cdk.cloud-assembly-schema both ship aws_cdk/cloud_assembly_schema/__init__.py;
# uv installs in parallel, so either may win, and with the standalone one jsii cannot read aws-cdk-lib's assembly
# types (`Unknown interface: aws-cdk-lib.cloud_assembly_schema.MetadataEntry`). Reinstalling aws-cdk-lib last makes
# its copy win every time.
# $(call cdk_lib_wins,BIN_DIR)
cdk_lib_wins = $(1)/uv pip install --quiet --python $(1)/python --compile-bytecode --no-deps \
	--reinstall-package aws-cdk-lib \
	"aws-cdk-lib==$$($(1)/python -c 'import importlib.metadata as m; print(m.version("aws-cdk-lib"))')"

# requirements/functions.txt pins what the Lambda functions ship and run (infra/functions.py), so the suite runs it too.
$(VENV)/.installed: pyproject.toml requirements/functions.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode -e '.[dev]' -c requirements/functions.txt
	$(call cdk_lib_wins,$(BIN))
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# CPU torch first, with pip (it takes the CPU build on this machine image; a bare `torch` requirement
# would pull a multi-GB CUDA build), then the rest with uv; verl without its GPU-only pins, tinker-cookbook without its
# transformers<=5.5.4 pin (requirements/ml.txt).
ml-env: $(ML_VENV)/.installed

$(ML_VENV)/.installed: pyproject.toml requirements/ml.txt
	test -x $(ML_BIN)/python || $(PYTHON) -m venv $(ML_VENV)
	$(ML_BIN)/python -m pip install --quiet --disable-pip-version-check torch==2.13.0 uv
	$(ML_BIN)/uv pip install --quiet --python $(ML_BIN)/python --compile-bytecode -e '.[dev]' -r requirements/ml.txt
	$(ML_BIN)/uv pip install --quiet --python $(ML_BIN)/python --compile-bytecode --no-deps verl==0.9.1 \
		tinker-cookbook==0.5.8
	$(call cdk_lib_wins,$(ML_BIN))
	touch $@

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# pytest-xdist: one worker per core, a test file per worker at a time (module fixtures start once). The e2e tests
# run after, one at a time: each starts a whole local stack, and two at once on 2 cores only slow each other down.
PYTEST_WORKERS ?= auto
PARALLEL := -n $(PYTEST_WORKERS) --dist loadfile

# make check runs one worker more than there are cores (a third of its tests' time is waiting: long polls,
# deadlines, subprocesses) and lets an idle worker take tests from a busy one (worksteal), so no long file
# finishes alone at the end.
CHECK_WORKERS ?= $(shell $(PYTHON) -c 'import os; print((os.cpu_count() or 1) + 1)')

check: lint
	$(BIN)/python -m pytest -q -m "not e2e and not cdk and not packaging and not processes" \
		-n $(CHECK_WORKERS) --dist worksteal --hypothesis-profile=check

# The dashboard page's test (tests/e2e) loads it in Debian's chromium: installed here when missing and running as
# root with apt-get (CI); elsewhere the test skips and says why.
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "no chromium, and not root with apt-get: the dashboard's browser test will skip"

# The e2e tests run the docs' local command blocks from .venv-demo, as a user after `make demo` (they skip without it).
test: lint browser demo-env
	$(BIN)/python -m pytest -m "not e2e" $(PARALLEL)
	$(BIN)/python -m pytest -m e2e
	$(MAKE) test-ml

# Tests against the real frameworks' types (skipped in .venv, where the frameworks are not installed).
test-ml: ml-env
	$(ML_BIN)/python -m pytest tests/ml

# Not --quiet: a first build downloads about 60 packages, and uv shows what it is doing.
demo-env: $(DEMO_VENV)/.installed

$(DEMO_VENV)/.installed: pyproject.toml requirements/functions.txt
	test -x $(DEMO_BIN)/python || $(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_BIN)/python -m pip install --quiet --disable-pip-version-check uv
	$(DEMO_BIN)/uv pip install --python $(DEMO_BIN)/python --compile-bytecode -e '.[local,examples]' \
		-c requirements/functions.txt
	touch $@

# CPU torch with pip (see ml-env), then matplotlib for the reward plot. Neither is compiled to bytecode at
# install: their .pyc files would add 165 MB (sympy's alone 51 MB, never imported here), and the modules the
# loop imports compile on first use.
$(DEMO_VENV)/.train-installed: $(DEMO_VENV)/.installed
	$(DEMO_BIN)/python -m pip install --disable-pip-version-check --no-compile torch==2.13.0
	$(DEMO_BIN)/uv pip install --python $(DEMO_BIN)/python matplotlib
	touch $@

demo: demo-env
	$(DEMO_BIN)/rollouts demo

# GRPO on the local stack: the tiny PyTorch policy learns the lookup task (examples/grpo_local/; ARGS="--steps 3").
train-demo: $(DEMO_VENV)/.train-installed
	$(DEMO_BIN)/python -m examples.grpo_local $(ARGS)

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(ML_VENV) node_modules cdk.out .pytest_cache
