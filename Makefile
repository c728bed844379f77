# Every target a user runs is here and in the README; each works from a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev

.PHONY: install test unit lint format demo synth bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,cdk,bench]'
	touch $(STAMP)

install: $(STAMP)

## make test: lint, type-check and run every test (unit, contract on SeaweedFS, CDK, chaos)
test: install lint
	$(PY) -m pytest -q -p no:cacheprovider

## make unit: the fast tests only (no S3 server)
unit: install
	$(PY) -m pytest -q -m "not s3 and not cdk and not chaos"

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) cdk.out .mypy_cache .ruff_cache .pytest_cache
