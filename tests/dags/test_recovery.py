"""Recovery through the DAGs of a PostgreSQL-only pipeline (real servers, Airflow and Spark): the
replica's server stopped with ``pg_ctl -m immediate`` in the middle of an apply, then started
again; the slot dropped, and separately replaced, behind the pipeline's back, recovered by the
documented procedure (the setup DAG, then the baseline it asks for). Each ends Ready and exact."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from pgcluster import Cluster, default_base_dir, server_user
from tests.conftest import Database, free_port
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states
from tests.support.replica import rows

TABLE = "public.accounts"


@pytest.fixture
def replica_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    """A database on a cluster of its own (so the test can stop it), as connection pgsync_replica."""
    cluster = Cluster(
        root=default_base_dir(server_user()) / f"test-pg-replica-{os.getpid()}", port=free_port()
    )
    try:
        cluster.start()
        cluster.create_database("replica")
        monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", cluster.url("replica", with_password=True))
        yield Database(cluster, "replica")
    finally:
        cluster.destroy()


def _cdc_ok(pipeline: PipelineDags) -> None:
    run = pipeline.run("cdc")
    assert task_states(run) == CDC_GREEN, task_states(run)


def _watermark(replica: Database) -> object:
    """The replica's watermark of the table (None while it cannot be read)."""
    try:
        with psycopg.connect(replica.conninfo, connect_timeout=2) as conn:
            return conn.execute("SELECT commit_lsn, seq FROM pgsync.watermarks").fetchall()
    except psycopg.Error:
        return None


@pytest.mark.slow
@pytest.mark.usefixtures("spark_drivers")  # its baselines are Spark jobs (tests/tiers.py)
def test_replica_crash_mid_apply_and_a_lost_or_replaced_slot_end_exact(
    database: Database, replica_server: Database, make_pipeline_dags: MakePipelineDags
) -> None:
    replica = replica_server
    database.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, note text)")
    database.execute("INSERT INTO accounts SELECT g, 1000, 'n' || g FROM generate_series(1, 500) g")
    pipeline = make_pipeline_dags(
        ["accounts"],
        destinations=[{"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}],
        limits={"batch_rows": 500},
    )
    assert str(pipeline.run("setup").state) == "success"
    assert pipeline.state().table(TABLE).phase.kind == "Init"
    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
    assert str(baseline.state) == "success", task_states(baseline)
    _cdc_ok(pipeline)
    assert rows(replica, TABLE) == rows(database, TABLE)  # rows from before setup are there

    # the replica's server dies while apply writes its batches (20 of them): the task fails for
    # a retry, the phase stays, and the next run after the restart goes on from the watermark
    for i in range(20):
        database.execute("UPDATE accounts SET balance = balance + %s", (i,))
    database.execute("DELETE FROM accounts WHERE id > 495")
    before = _watermark(replica)
    stopped = threading.Event()

    def stop_once_a_batch_is_in() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _watermark(replica) == before:
            time.sleep(0.01)
        replica.cluster.stop("immediate")
        stopped.set()

    killer = threading.Thread(target=stop_once_a_batch_is_in, daemon=True)
    killer.start()
    crashed = pipeline.run("cdc")
    killer.join(timeout=180)
    assert stopped.is_set()
    if task_states(crashed)["apply"] == "failed":  # the server went before apply was done
        assert pipeline.state().table(TABLE).destination("replica").phase.kind == "Ready"
    replica.cluster.start()
    _cdc_ok(pipeline)
    assert rows(replica, TABLE) == rows(database, TABLE)

    # the slot dropped behind the pipeline's back: capture stops loudly; the documented
    # procedure (setup, then the baseline it asks for) ends exact
    database.execute("SELECT pg_drop_replication_slot(%s)", (pipeline.config.slot_name,))
    database.execute("UPDATE accounts SET balance = 0 WHERE id <= 100")
    lost = pipeline.run("cdc")
    assert task_states(lost)["capture"] == "failed"
    assert pipeline.state().table(TABLE).phase.kind == "Errored"
    _recover(pipeline, database, replica)

    # the slot replaced (dropped and created again) behind the pipeline's back
    database.execute("SELECT pg_drop_replication_slot(%s)", (pipeline.config.slot_name,))
    database.execute("INSERT INTO accounts VALUES (9001, 1, 'while the slot was gone')")
    database.execute(
        "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (pipeline.config.slot_name,)
    )
    database.execute("UPDATE accounts SET balance = 7 WHERE id <= 10")
    replaced = pipeline.run("cdc")
    assert task_states(replaced)["capture"] == "failed"
    _recover(pipeline, database, replica)


def _recover(pipeline: PipelineDags, database: Database, replica: Database) -> None:
    setup = pipeline.run("setup")
    assert str(setup.state) == "success", task_states(setup)
    assert pipeline.state().table(TABLE).destination("replica").phase.kind == "Init"
    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
    assert str(baseline.state) == "success", task_states(baseline)
    database.execute("UPDATE accounts SET note = 'after recovery' WHERE id = 1")
    _cdc_ok(pipeline)
    assert pipeline.state().table(TABLE).phase.kind == "Ready"
    assert rows(replica, TABLE) == rows(database, TABLE)
