"""A real Airflow deployment for the tests of this folder: scheduler, dag-processor, triggerer
and API server with LocalExecutor and the metadata database in the tests' PostgreSQL cluster
(``dev/deployment.py``), over one pipeline ``sched`` (tables ``items`` with a key and ``notes``
without one, a PostgreSQL replica destination) set up and baselined through the deployment.

Nothing here runs a DAG in-process: every run is created by the scheduler (or through the REST
API, as a user triggers one in the UI) and every task runs in a LocalExecutor process.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from deployment import Deployment, DeploymentError

from pgcluster import Cluster, default_base_dir, server_user
from tests.conftest import REPO, free_port

PIPELINE = "sched"
SOURCE_CONN = "sched_source"
REPLICA_CONN = "sched_replica"
TABLES = ("public.items", "public.notes")
SITE = Path(__file__).with_name("site")
"""Holds the deployment's ``sitecustomize``: the pause points of its tasks."""

SCHEMA = """
CREATE TABLE items (id bigint PRIMARY KEY, qty int NOT NULL, pad text);
CREATE TABLE notes (item bigint, body text);
ALTER TABLE notes REPLICA IDENTITY FULL;
INSERT INTO items SELECT g, g % 7, repeat('x', 100) FROM generate_series(1, 2000) g;
INSERT INTO notes SELECT g % 50, 'note ' || g FROM generate_series(1, 500) g;
"""


RETRIES = ", retries: 2, retry_delay: 2s"


def config_yaml(changelog: Path, cdc: str) -> str:
    """The pipeline's config with cdc schedule ``cdc`` (a YAML value)."""
    return f"""pipelines:
  - name: {PIPELINE}
    source_conn_id: {SOURCE_CONN}
    tables: [{", ".join(TABLES)}]
    destinations:
      - {{kind: postgres, conn_id: {REPLICA_CONN}, name: replica}}
    state: {{backend: postgres}}
    changelog: {{uri: {changelog}}}
    schedules: {{cdc: {cdc}, compact: null{RETRIES}}}
"""


@dataclass
class Scheduled:
    """The running deployment, its pipeline's databases and the folder where tests arm pause points."""

    deployment: Deployment
    source: str  # conninfo
    replica: str  # conninfo
    config: Path
    changelog: Path
    pauses: Path

    def dag(self, kind: str) -> str:
        return f"pgsync_{PIPELINE}_{kind}"

    def execute(self, statement: str, params: Any = None) -> None:
        with psycopg.connect(self.source, autocommit=True) as conn:
            conn.execute(statement, params)

    def contents(self, conninfo: str) -> dict[str, tuple[int, str]]:
        """Per table: row count and an md5 of every row's text, sorted (duplicates count)."""
        out = {}
        with psycopg.connect(conninfo) as conn:
            for table in TABLES:
                row = conn.execute(
                    f"SELECT count(*), md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), ''))"  # noqa: S608
                    f" FROM {table} t"
                ).fetchone()
                assert row is not None
                out[table] = (int(row[0]), str(row[1]))
        return out

    def assert_replica_equals_source(self) -> None:
        source, replica = self.contents(self.source), self.contents(self.replica)
        assert replica == source, f"replica {replica} differs from source {source}"

    def wait_for(self, what: str, check: Any, timeout: float = 300.0) -> Any:
        """Poll ``check()`` until it returns a truthy value; fail naming ``what`` at the deadline."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.deployment.check_alive()
            found = check()
            if found:
                return found
            time.sleep(1)
        pytest.fail(f"{what}: not within {timeout:.0f} s (logs: {self.deployment.logs})")

    def quiet(self) -> None:
        """Pause the cdc DAG between two of its runs: none is queued or running afterwards."""
        self.deployment.pause_between_runs(self.dag("cdc"))

    def reschedule(self, cdc: str, summary: str) -> None:
        """Rewrite the config with cdc schedule ``cdc`` (YAML) and wait until the dag-processor
        re-parsed the cdc DAG (its ``timetable_summary`` contains ``summary``)."""
        self.config.write_text(config_yaml(self.changelog, cdc))
        self.deployment.wait_schedule(self.dag("cdc"), lambda found: summary in found, timeout=120)

@pytest.fixture(scope="package")
def scheduled(
    pg_cluster: Cluster,
    tmp_path_factory: pytest.TempPathFactory,
    airflow_deployment: None,
    spark_drivers: None,
) -> Iterator[Scheduled]:
    """The deployment with pipeline ``sched`` set up and baselined (cdc paused, tables SyncDone)."""
    root = tmp_path_factory.mktemp("deployment")
    for name in ("sched_source", "sched_replica"):
        pg_cluster.drop_database(name)
        pg_cluster.create_database(name)
    source, replica = pg_cluster.conninfo("sched_source"), pg_cluster.conninfo("sched_replica")
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute(SCHEMA)
    dags = root / "dags"
    dags.mkdir()
    shutil.copy(REPO / "dags" / "pgsync.py", dags / "pgsync.py")
    shutil.copy(Path(__file__).with_name("sensors_dag.py"), dags / "pgsync_test_sensors.py")
    config = root / "pgsync.yaml"
    changelog = root / "changelog"
    config.write_text(config_yaml(changelog, "'* * * * *'"))
    pauses = root / "pauses"
    pauses.mkdir()
    # Airflow's metadata database in a cluster of its own: its writes (heartbeats, task states)
    # are WAL that the pipeline's slot would retain, and the slot-lag sensor's test counts bytes
    home = default_base_dir(server_user()) / f"test-pg-airflow-{os.getpid()}"
    metadata = Cluster(root=home, port=free_port())
    deployment = Deployment(
        home=root / "airflow",
        cluster=metadata,
        dags_folder=dags,
        port=free_port(),
        metadata_db="sched_airflow",
        env={
            "PGSYNC_CONFIG": str(config),
            f"AIRFLOW_CONN_{SOURCE_CONN.upper()}": pg_cluster.url("sched_source", with_password=True),
            f"AIRFLOW_CONN_{REPLICA_CONN.upper()}": pg_cluster.url("sched_replica", with_password=True),
            "PGSYNC_TEST_SOURCE_CONN": SOURCE_CONN,
            "PGSYNC_TEST_PIPELINE": PIPELINE,
            # pause points, on in the deployment's processes by its sitecustomize only
            "PGSYNC_TEST_PAUSE_DIR": str(pauses),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")])),
        },
    )
    try:
        deployment.start()  # a start that fails leaves nothing running either
        found = Scheduled(deployment, source, replica, config, changelog, pauses)
        _set_up(found)
        yield found
    except DeploymentError as exc:
        pytest.fail(str(exc))
    finally:
        deployment.stop()
        metadata.destroy()


def _set_up(found: Scheduled) -> None:
    """Setup through the scheduler, then the baseline run it triggers; the cdc DAG stays paused."""
    d = found.deployment
    for kind in ("setup", "baseline", "cdc"):
        d.wait_dag(found.dag(kind))
    d.wait_dag("pgsync_test_sensors")
    for dag in (found.dag("setup"), found.dag("baseline"), "pgsync_test_sensors"):
        d.unpause(dag)
    run_id = d.trigger(found.dag("setup"))
    assert d.wait_run(found.dag("setup"), run_id) == "success", f"setup run {run_id} failed; see {d.logs}"
    baseline = found.wait_for("the baseline run setup triggered", lambda: d.runs(found.dag("baseline")))
    state = d.wait_run(found.dag("baseline"), baseline[0]["dag_run_id"], timeout=600)
    assert state == "success", f"baseline run failed; see {d.logs}"
