"""The tests' ``dag.test()`` looks again after 20 ms, not a second, where a loop found no task
to run (``tests/support/dag_test_polling.py``); other sleeps keep their length."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

from airflow.exceptions import AirflowSkipException
from airflow.sdk import DAG, task

from tests.support import dag_test_polling


def _dag() -> DAG:
    """The cdc DAG's shape: a skipped list, the task mapped over it, a task after both."""
    with DAG("pgsync_polling_probe", schedule=None, start_date=datetime(2024, 1, 1, tzinfo=UTC)) as dag:

        @task
        def requests() -> list[int]:
            raise AirflowSkipException("nothing to trigger")

        @task
        def each(item: int) -> None:
            pass

        @task(trigger_rule="all_done")
        def outcome() -> None:
            pass

        each.expand(item=requests()) >> outcome()
    return dag


def test_a_loop_without_a_task_to_run_waits_20_ms(airflow_db: None) -> None:
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    dag = _dag()
    bag = DagBag(dag_folder=os.devnull, collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    before = dag_test_polling.polls_shortened
    run = dag.test()
    assert str(run.state) == "success"
    assert dag_test_polling.polls_shortened > before, "dag.test() never waited: the probe proves nothing"


def test_other_sleeps_keep_their_length() -> None:
    start = time.monotonic()
    time.sleep(0.3)
    assert time.monotonic() - start >= 0.3
