"""The source server stopped (``pg_ctl -m immediate``) in the middle of a baseline into a
PostgreSQL replica, with the state kept on that source: the baseline cannot record its failure,
so the next apply finds the destination in DataSync with no baseline running, records it
Errored and fails naming it; a rebaseline then ends Ready and exact. Real servers, real Spark."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_pgsync.errors import ApplyFailedError
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.state.phases import DataSync, Errored, Ready
from pgcluster import Cluster, default_base_dir, server_user
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database, free_port
from tests.support.replica import rows

TABLE = "public.t"


@pytest.fixture
def database() -> Iterator[Database]:
    """The source on a cluster of its own, so the test can stop it (this module's ``database``)."""
    cluster = Cluster(
        root=default_base_dir(server_user()) / f"test-pg-source-{os.getpid()}", port=free_port()
    )
    try:
        cluster.start()
        cluster.create_database("source")
        yield Database(cluster, "source")
    finally:
        cluster.destroy()


def _baseline(pipeline: Pipeline, source_conn_id: str, replica_conn_id: str, **kwargs: Any) -> Any:
    op = PgBaselineOperator(
        task_id="baseline",
        pipeline=pipeline.name,
        table=TABLE,
        postgres_conn_id=source_conn_id,
        destinations=[{"kind": "postgres", "conn_id": replica_conn_id, "name": "replica"}],
        state_backend="postgres",
        target_partition_mb=0.2,
        **kwargs,
    )
    return op.execute({"ti": None})  # type: ignore[typeddict-item]


def _apply(pipeline: Pipeline, source_conn_id: str, replica_conn_id: str) -> None:
    PgApplyOperator(
        task_id="apply",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        destinations=[{"kind": "postgres", "conn_id": replica_conn_id, "name": "replica"}],
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
    ).execute({})  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.usefixtures("spark_drivers")  # its baselines are Spark jobs (tests/tiers.py)
def test_a_source_down_mid_baseline_ends_errored_then_a_rebaseline_ends_exact(
    make_pipeline: MakePipeline,
    database: Database,
    replica: Database,
    replica_conn_id: str,
    source_conn_id: str,
) -> None:
    pipeline = make_pipeline(["CREATE TABLE t (id int PRIMARY KEY, v text)"], ["t"])
    database.execute("INSERT INTO t SELECT g, repeat('v', 200) FROM generate_series(1, 50000) g")
    failures: list[BaseException] = []

    def run() -> None:
        try:
            _baseline(pipeline, source_conn_id, replica_conn_id)
        except BaseException as exc:
            failures.append(exc)

    baseline = threading.Thread(target=run, daemon=True)
    baseline.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not replica.execute(
        "SELECT 1 FROM pg_class WHERE relname LIKE 'baseline\\_v%%'"
    ):
        time.sleep(0.05)  # the replica's staging table: the baseline is copying
    database.cluster.stop("immediate")
    baseline.join(timeout=300)
    assert not baseline.is_alive() and failures, "the baseline did not fail with its source gone"
    database.cluster.start()
    held = pipeline.state().table(TABLE).destination("replica")
    assert isinstance(held.phase, DataSync), "the failure could not be recorded: the source was down"

    with pytest.raises(ApplyFailedError, match=r"table public\.t in destination replica is Errored"):
        _apply(pipeline, source_conn_id, replica_conn_id)
    errored = pipeline.state().table(TABLE).destination("replica").phase
    assert isinstance(errored, Errored) and "ended without recording its result" in errored.reason
    assert not replica.execute("SELECT 1 FROM pg_class WHERE relname = 't'"), (
        "a half-copied table was swapped in"
    )

    database.execute("UPDATE t SET v = 'after' WHERE id <= 10")
    _baseline(pipeline, source_conn_id, replica_conn_id, rebaseline=True)
    database.execute("DELETE FROM t WHERE id > 49990")
    pipeline.capture_until_idle()
    _apply(pipeline, source_conn_id, replica_conn_id)
    assert pipeline.state().table(TABLE).destination("replica").phase == Ready()
    assert rows(replica, TABLE) == rows(database, TABLE)
