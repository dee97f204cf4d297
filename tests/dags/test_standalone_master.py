"""The pipeline's DAGs, unchanged, against a Spark standalone master (``spark://``) with one
Worker started here from the pyspark distribution: a baseline into a lake and a PostgreSQL
replica, cdc, a backfill and a compaction; the destinations equal the source, and the Master
lists each Spark job as a finished application whose executors its Worker ran."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.state.model import Ready
from tests.apply.lake import lake_session, sort_rows, view_query
from tests.conftest import Database, MakeReplica, free_port
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, task_states
from tests.spark.standalone import DAEMON_JAVA_OPTS, StandaloneCluster, standalone_cluster, wait_until
from tests.support.replica import rows

# the subject is a standalone master:
# not the worker's resident driver (tests/support/resident_spark.py)
pytestmark = pytest.mark.spark_submit

TABLE = "public.items"


@pytest.fixture(scope="module")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A Master and one Worker (2 cores, 2 GiB) for this module's tests."""
    with standalone_cluster(tmp_path_factory.mktemp("spark-standalone"), ports=free_port) as cluster:
        yield cluster


def _applications(cluster: StandaloneCluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Master's (active, completed) applications."""
    status = cluster.status()
    return list(status["activeapps"]), list(status["completedapps"])


@pytest.mark.slow
def test_baseline_backfill_and_compaction_on_a_standalone_master(
    spark_standalone: StandaloneCluster,
    database: Database,
    make_replica: MakeReplica,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    cluster = spark_standalone
    # a Spark connection as a user would make it: conn type spark, the master URL as its host
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_STANDALONE",
        json.dumps({"conn_type": "spark", "host": f"spark://{cluster.host}", "port": cluster.port}),
    )
    replica = make_replica("replica")
    # a numeric column: the lake's copy is read with Spark's JDBC source (the driver jar on the
    # executors), the replica's by this package's Python tasks there (and the password file)
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, price numeric(10,2))")
    database.execute("INSERT INTO items SELECT g, 'item ' || g, g * 1.5 FROM generate_series(1, 5000) g")
    database.execute("ANALYZE items")
    pipeline = make_pipeline_dags(
        [TABLE],
        destinations=[{"kind": "lake"}, {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}],
        # the executors' JVMs are short-lived too (see DAEMON_JAVA_OPTS); the rest is the defaults
        spark={"conn_id": "spark_standalone", "conf": {"spark.executor.extraJavaOptions": DAEMON_JAVA_OPTS}},
        baseline={"target_partition_mb": 0.05},  # several ctid ranges: tasks on both executor cores
    )
    assert _applications(cluster) == ([], []), "the master ran applications before the test"

    assert str(pipeline.run("setup").state) == "success"
    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
    assert str(baseline.state) == "success", task_states(baseline)
    [result] = baseline.get_task_instances()[0].xcom_pull(task_ids="baseline")
    assert result["rows"] == 5000
    assert [w["kind"] for w in result["written"]] == ["lake", "postgres"], result

    database.execute("INSERT INTO items SELECT g, 'new ' || g, g FROM generate_series(5001, 5100) g")
    database.execute("UPDATE items SET price = price * 2 WHERE id %% 7 = 0")
    database.execute("DELETE FROM items WHERE id BETWEEN 100 AND 199")
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)

    # a backfill of some rows (into the lake only), one of them changed after its snapshot
    backfill = pipeline.run(
        "baseline", run_conf={"tables": [TABLE], "mode": "backfill", "backfill_filter": "id <= 300"}
    )
    assert task_states(backfill)["backfill[0]"] == "success", task_states(backfill)
    [staged] = backfill.get_task_instances()[0].xcom_pull(task_ids="backfill")
    assert staged["rows"] == 200
    database.execute("UPDATE items SET name = 'after the backfill' WHERE id = 3")
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert pipeline.state().table(TABLE).backfill is None, "apply did not take the backfill"

    compact = pipeline.run("compact")
    assert task_states(compact) == {"compact_lake": "success"}, task_states(compact)
    [folded] = compact.get_task_instances()[0].xcom_pull(task_ids="compact_lake")
    assert folded["segments"] > 0, folded

    # the baseline and the backfill said where their drivers ran and how they read
    out = "".join(capfd.readouterr())
    assert out.count(f"(master {cluster.master_url}, 2 task slots)") == 2, "a job ran on another master"
    assert out.count(f"{TABLE}: reading with Spark's JDBC source") == 2

    assert pipeline.state().table(TABLE).phase == Ready()
    expected = rows(database, TABLE)
    assert len(expected) == 5000
    assert rows(replica, TABLE) == expected, "the replica differs from the source"
    [found] = lake_session(lake, [{"sql": view_query(database, TABLE)}])
    assert sort_rows(found) == expected, "the lake differs from the source"

    # the three Spark jobs ran as applications of the standalone master, their executors on its worker
    def finished() -> bool:
        active, completed = _applications(cluster)
        return not active and len(completed) >= 3

    wait_until(
        "the master to list 3 finished applications", finished, 60, detail=lambda: str(cluster.status())
    )
    _, completed = _applications(cluster)
    jobs = [f"pgsync baseline {TABLE}", f"pgsync baseline {TABLE}", "pgsync compaction"]
    assert sorted(a["name"] for a in completed) == jobs, completed  # the baseline, the backfill, ...
    assert {a["state"] for a in completed} == {"FINISHED"}, completed
    for app in completed:
        executors = [p for p in (cluster.work_dir / app["id"]).iterdir() if (p / "stderr").is_file()]
        assert executors, f"no executor of {app['name']} ({app['id']}) ran on the worker"
