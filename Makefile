# Two commands do everything on a fresh machine (Python 3.11+, Node 20, no AWS account):
#   make demo   the main job on the local stack
#   make test   the whole suite (lint, unit, CDK synth, end-to-end on the local stack)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Bytecode keeps `import aws_cdk` about 4x faster; the environment may turn it off.
unexport PYTHONDONTWRITEBYTECODE
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export UV_LINK_MODE := copy

.PHONY: install test lint demo clean

install: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode -e '.[dev]'
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

lint: install
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest

demo: install
	$(BIN)/rollouts demo

clean:
	rm -rf $(VENV) node_modules cdk.out .pytest_cache
