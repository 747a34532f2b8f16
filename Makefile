# The two commands a new engineer needs: `make run` and `make test`. Both install what they need.
SHELL := /bin/bash
export PATH := $(HOME)/.local/bin:$(PATH)
UV ?= uv

.PHONY: run test bootstrap bootstrap-run lint typecheck importlint schemas check-all bench clean

run: bootstrap-run  ## Run the whole system locally (embedded defaults, simulated clusters, dashboard)
	$(UV) run python scripts/run_local.py

test: bootstrap  ## Run every test against real servers started by the tests
	$(UV) run pytest -q $(PYTEST_ARGS)

bootstrap:
	@scripts/bootstrap.sh test

bootstrap-run:
	@scripts/bootstrap.sh run

lint:
	$(UV) run ruff check .
	$(UV) run ruff format --check .

typecheck:
	$(UV) run mypy -p trainwatch_common -p kubesim -p trainwatch_registry -p trainwatch_watcher \
		-p trainwatch_notifier -p trainwatch_persister -p trainwatch_dashboard

importlint:
	$(UV) run lint-imports

schemas:  ## Regenerate the published JSON Schemas, AsyncAPI and OpenAPI documents in docs/
	$(UV) run python -m trainwatch_common.schemas docs

check-all: lint typecheck importlint test

clean:
	rm -rf .run .artifacts .pytest_cache .mypy_cache .ruff_cache
