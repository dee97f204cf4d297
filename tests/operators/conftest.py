"""Real Airflow for operator tests: a metadata database and a way to run a DAG with ``dag.test()``.

``tests/conftest.py`` points ``AIRFLOW_HOME`` at a fresh folder under ``.dev/`` (removed at
the end of the session) before Airflow is imported, so the metadata database is a new
SQLite file there. ``initdb()`` creates its tables straight from the ORM models (about a
second, much faster than replaying every migration with ``airflow db migrate``).

``dag.test()`` in Airflow 3 only runs a DAG whose serialized form is in the metadata
database (the DAG processor would normally put it there from a bundle); ``run_dag``
stores the in-memory DAG the same way the DAG processor does, then runs it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """Create the tables of the (fresh, per-session) Airflow metadata database."""
    from airflow import settings
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.utils.db import initdb

    from tests.conftest import _AIRFLOW_HOME

    if f"sqlite:///{_AIRFLOW_HOME}/airflow.db" != settings.SQL_ALCHEMY_CONN:
        pytest.fail(
            f"the Airflow metadata database is {settings.SQL_ALCHEMY_CONN}, not the tests' own in "
            f"{_AIRFLOW_HOME}: unset AIRFLOW_HOME and AIRFLOW__DATABASE__SQL_ALCHEMY_CONN to run these tests"
        )
    initdb()
    DagBundlesManager().sync_bundles_to_db()


RunDag = Callable[..., Any]


@pytest.fixture
def run_dag(airflow_db: None) -> RunDag:
    """``run_dag(dag, **test_kwargs)``: store the DAG like the DAG processor, then ``dag.test()``."""
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    def run(dag: Any, **kwargs: Any) -> Any:
        bag = DagBag(dag_folder=os.devnull, collect_dags=False)
        bag.bag_dag(dag)
        sync_bag_to_db(bag, "dags-folder", None)
        return dag.test(**kwargs)

    return run
