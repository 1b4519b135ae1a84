# LambdaML: `make demo` and `make test` do all set-up on a fresh Debian machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SRC    := lambdaml analytic_model functions tests bench

.PHONY: setup demo test lint format services clean cli-docs

setup: $(STAMP)

# Exact pins (torch 2.13.0 is a CPU wheel that pip finds on local disk).
$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: setup
	$(BIN)/lambdaml demo

# Debian's redis-server and memcached, installed only when missing; tests start their own.
# nftables: the direct channel's emulated-NAT test masquerades with it.
services:
	@if ! command -v redis-server >/dev/null || ! command -v memcached >/dev/null || ! test -x /usr/sbin/nft; then \
		echo "installing redis-server, memcached and nftables with apt-get"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends redis-server memcached nftables >/dev/null; \
	fi

lint: setup
	$(BIN)/ruff check $(SRC)
	$(BIN)/ruff format --check $(SRC)
	$(BIN)/mypy lambdaml analytic_model

# docs/cli.md is rendered from the command's parser; tests/unit/test_cli_reference.py holds them equal.
cli-docs: setup
	$(BIN)/python -m lambdaml.cli.reference > docs/cli.md

# The outputs README.md and docs/ show, rewritten from real runs of their commands on loopback
# (a few minutes: the tour, the local stack, the demo); not part of `make test`, which checks them.
.PHONY: docs-outputs
docs-outputs: setup
	$(BIN)/python bench/docs_outputs.py

format: setup
	$(BIN)/ruff check --fix $(SRC)
	$(BIN)/ruff format $(SRC)

# The set-up steps are independent of each other: made side by side. The suite runs in 3
# processes over 2 cores (most tests wait on servers and subprocesses), a file to a process at a
# time, so a module's fixtures (a stack, a trained model) are made once.
test:
	$(MAKE) --no-print-directory -j4 --output-sync=target test-ready
	$(BIN)/pytest -q -p no:cacheprovider -n 3 --dist loadfile --durations=25

.PHONY: test-ready
test-ready: setup services lint template-check zip-size-check security-check awscli-env local-artifacts

# The local stack's runtime layer and torch worker environment (pip --target), built here beside
# the other set-up rather than inside the first test that starts a stack; rebuilt when their pins change.
.PHONY: local-artifacts
local-artifacts: setup
	$(BIN)/python -m lambdaml.local.artifacts

# SAM and cfn-lint live in their own venv: aws-sam-cli pins boto3/click/pydantic exactly.
SAM_VENV  := .venv-sam
SAM_STAMP := $(SAM_VENV)/.installed
SAM_BUILD := build/sam
# Offline and credential-free: dummy keys, no instance metadata, no telemetry. Nothing here calls AWS.
SAM_OFFLINE := AWS_ACCESS_KEY_ID=dummy AWS_SECRET_ACCESS_KEY=dummy \
	AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true SAM_CLI_TELEMETRY=0

.PHONY: sam-env template-check zip-size-check

sam-env: $(SAM_STAMP)

# Each tool venv (.venv-sam, .venv-checkov, .venv-awscli) from its own pin file: their pins clash with ours and each other's.
.venv-%/.installed: requirements-%.txt
	$(PYTHON) -m venv .venv-$*
	.venv-$*/bin/pip install --quiet --disable-pip-version-check -r $<
	touch $@

template-check: sam-env
	$(SAM_OFFLINE) $(SAM_VENV)/bin/sam validate --lint --region us-east-1 -t template.yaml
	$(SAM_OFFLINE) $(SAM_VENV)/bin/cfn-lint template.yaml infra/ec2/cluster.yaml

# `sam build` without a container (manylinux wheels from PyPI); the torch image function has
# no build metadata, so SAM skips it and no Docker is needed.
zip-size-check: sam-env
	rm -rf $(SAM_BUILD) $(SAM_BUILD)-arm64
	$(SAM_OFFLINE) $(SAM_VENV)/bin/sam build -t template.yaml --build-dir $(SAM_BUILD)
	$(SAM_VENV)/bin/python infra/sam/check_zip_size.py --build-dir $(SAM_BUILD) --architecture x86_64
	$(SAM_OFFLINE) $(SAM_VENV)/bin/sam build -t template.yaml --build-dir $(SAM_BUILD)-arm64 \
		--parameter-overrides Architecture=arm64
	$(SAM_VENV)/bin/python infra/sam/check_zip_size.py --build-dir $(SAM_BUILD)-arm64 --architecture arm64

# The AWS CLI in its own venv, as SAM has: the tests point it at the local Lambda service.
.PHONY: awscli-env
awscli-env: .venv-awscli/.installed

# checkov (static security checks of CloudFormation) in its own venv: its pins clash with ours.
# Without a Prisma Cloud key checkov reports no severities, so ANY failed check fails the build;
# each check a template skips is skipped in that resource's Metadata with the reason (see SECURITY.md).
CHECKOV_VENV  := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
CFN_TEMPLATES := template.yaml $(wildcard infra/ec2/*.yaml infra/ec2/*.yml)

.PHONY: checkov-env security-check

checkov-env: $(CHECKOV_STAMP)

# Offline: --skip-download keeps checkov from calling Prisma Cloud for guidelines and severities.
security-check: checkov-env
	BC_SKIP_MAPPING=TRUE $(CHECKOV_VENV)/bin/checkov --framework cloudformation --skip-download --compact --quiet \
		$(addprefix -f ,$(CFN_TEMPLATES))

clean:
	rm -rf $(VENV) .venv-sam .venv-checkov .venv-awscli build results .mypy_cache .ruff_cache .pytest_cache .hypothesis
