# LambdaML: `make demo` and `make test` do all set-up on a fresh Debian machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SRC    := lambdaml analytic_model functions tests bench

.PHONY: setup demo test lint format services clean

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
services:
	@if ! command -v redis-server >/dev/null || ! command -v memcached >/dev/null; then \
		echo "installing redis-server and memcached with apt-get"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends redis-server memcached >/dev/null; \
	fi

lint: setup
	$(BIN)/ruff check $(SRC)
	$(BIN)/ruff format --check $(SRC)
	$(BIN)/mypy lambdaml analytic_model

format: setup
	$(BIN)/ruff check --fix $(SRC)
	$(BIN)/ruff format $(SRC)

test: setup services lint
	$(BIN)/pytest -q -p no:cacheprovider

clean:
	rm -rf $(VENV) results .mypy_cache .ruff_cache .pytest_cache
