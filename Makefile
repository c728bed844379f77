# Every target a user runs is here and in the README; each works from a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev

.PHONY: install test unit lint format demo synth bench clean

HANDLER_REQUIREMENTS := functions/handlers/requirements.txt

$(STAMP): pyproject.toml $(HANDLER_REQUIREMENTS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,cdk,bench]'
	# What the handlers import, for local runs (make synth installs it for Lambda itself)
	$(PY) -m pip install --quiet -r $(HANDLER_REQUIREMENTS)
	touch $(STAMP)

install: $(STAMP)

## make test: lint, type-check and run every test (unit, contract on SeaweedFS, CDK, chaos,
## the dashboard in a headless browser)
test: install lint browser
	$(PY) -m pytest -q -p no:cacheprovider

## make unit: the fast tests only (no S3 server)
unit: install
	$(PY) -m pytest -q -m "not s3 and not cdk and not chaos"

## make rehearsal: synthesize the stack and run its Lambdas as the service would, on SeaweedFS
## (part of make test; see docs/deployment.md)
.PHONY: rehearsal
rehearsal: install
	$(PY) -m pytest -q -p no:cacheprovider -m rehearsal

## make browser: Debian's chromium and chromedriver for the dashboard's browser test (as root;
## nothing to do when both are there)
.PHONY: browser
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; else \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver; \
	fi

## make install-test: build the wheel, install it with its extras into a fresh virtualenv,
## enqueue, drain and synthesize from another project's folder (part of make test)
.PHONY: install-test
install-test: install
	$(PY) -m pytest -q -p no:cacheprovider -m install

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## make demo: the example queues end to end on an embedded S3 server (no AWS account needed)
demo: install
	$(VENV)/bin/s3queue demo

## make bench: throughput, latency, cost, idle, scale and cold-start figures into
## bench/results/<date>/ (BENCH_ARGS="--quick", or "--endpoint-url URL --bucket NAME" for any S3)
bench: install
	$(PY) -m bench.run $(BENCH_ARGS)

## make chaos: a long chaos soak, random seeds, a results table; a failure prints its seed
## (CHAOS_ARGS="--backend seaweed --messages 500", "--seed N" to replay, "--runs 5"; see
## tests/chaos/soak.py)
.PHONY: chaos
chaos: install
	$(PY) tests/chaos/soak.py $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) cdk.out .mypy_cache .ruff_cache .pytest_cache

# The CDK CLI (Node) is installed into .cdk-cli/, not globally; synth needs no AWS account.
CDK_CLI_DIR := .cdk-cli
CDK := $(CDK_CLI_DIR)/node_modules/.bin/cdk
CDK_STAMP := $(CDK_CLI_DIR)/.installed
CDK_ENV := JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 CDK_DISABLE_CLI_TELEMETRY=true

$(CDK_STAMP):
	npm install --prefix $(CDK_CLI_DIR) --no-audit --no-fund --loglevel=error aws-cdk@2
	touch $(CDK_STAMP)

## make synth: synthesize the CloudFormation template into cdk.out/ (no AWS account needed)
synth: install $(CDK_STAMP)
	$(CDK_ENV) $(CDK) synth --app "$(abspath $(PY)) cdk/app.py" --no-notices --quiet
	@ls cdk.out/*.template.json
