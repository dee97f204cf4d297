# Two commands set up a fresh machine: `make demo` and `make test`.
# Each installs what it needs (system packages through apt when missing, and a
# virtual environment in .venv with the package in editable mode); a second run
# skips what is done.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.pgsync-installed

.PHONY: demo ui airflow airflow-stop test test-fast lint typecheck pytest deps venv pg-start pg-stop pg-status clean

demo: deps venv
	@$(PY) dev/demo.py

ui: deps venv
	@$(PY) dev/ui.py

# a real deployment (scheduler, dag-processor, triggerer, API server; LocalExecutor; metadata in
# PostgreSQL) over the demo pipeline, logs under .dev/airflow/logs
airflow: deps venv
	$(PY) dev/deployment.py start

airflow-stop: venv
	$(PY) dev/deployment.py stop

test: deps venv lint typecheck pytest

lint: venv
	$(VENV)/bin/ruff check .

typecheck: venv
	$(VENV)/bin/mypy airflow_provider_pgsync dev

# the suite in TEST_WORKERS processes (pytest-xdist; a test file stays in one worker, so its
# module fixtures are made once; the slowest tiers' files first: tests/tiers.py), with its
# slowest tests listed at the end
TEST_WORKERS ?= 2
pytest: deps venv
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 $(PYTEST_ARGS)

# the inner loop: every test that starts neither a Spark driver nor an Airflow deployment
# (tests/tiers.py); a test that starts a driver without the fixture saying so fails here
test-fast: deps venv lint
	PGSYNC_TEST_TIER=fast $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=10 \
		-m "not spark and not deployment" $(PYTEST_ARGS)

deps:
	@bash dev/install-system.sh

venv: $(STAMP)

# pip's output goes to $(PIP_LOG); its end is shown when an install fails
PIP_LOG := .dev/logs/pip.log
$(STAMP): pyproject.toml
	@mkdir -p $(dir $(PIP_LOG))
	@echo "venv: installing pgsync and its dependencies into $(VENV) (a few minutes; output in $(PIP_LOG))"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --upgrade pip > $(PIP_LOG) 2>&1 || { tail -n 40 $(PIP_LOG); exit 1; }
	@$(PY) -m pip install -e '.[dev]' >> $(PIP_LOG) 2>&1 || { tail -n 40 $(PIP_LOG); exit 1; }
	@touch $(STAMP)

pg-start: venv
	$(PY) dev/pg.py start

pg-stop: venv
	$(PY) dev/pg.py stop

pg-status: venv
	$(PY) dev/pg.py status

clean: pg-stop
	rm -rf .dev
