"""A whole pipeline over ``sslmode=verify-full`` connections to a server that speaks TLS only:
setup, the baseline through Spark on the JDBC path (``copy_path: off``) and on the Arrow path
(``copy_path: auto``, ADBC in the Spark tasks), capture and apply into the lake, with the state
in a control database and a PostgreSQL destination, each behind its own verify-full connection.
Real PostgreSQL, real Airflow (``dag.test()``), real Spark."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_pgsync.errors import BaselineError, SourceUnavailableError
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.state.model import Errored, Ready
from tests.apply.lake import lake_session, sort_rows, view_query, written_to
from tests.baseline.conftest import baseline_slot
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, task_states
from tests.hooks.conftest import TlsServer
from tests.support.replica import rows

# the subject is TLS on every connection of a real spark-submit job (the executors' own environment):
# not the worker's resident driver (tests/support/resident_spark.py)
pytestmark = pytest.mark.spark_submit

TABLE = "public.items"


@pytest.fixture
def database(tls_database: Database) -> Database:
    """This module's source database is on the TLS server."""
    return tls_database


@pytest.fixture
def source_conn_id(tls_server: TlsServer, database: Database, monkeypatch: pytest.MonkeyPatch) -> str:
    conn_id = "pgsync_tls_source"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", tls_server.verify_full(database.name))
    return conn_id


@pytest.fixture
def tls_databases(tls_server: TlsServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Database]]:
    """A control database (``pgsync_tls_control``) and a replica (``pgsync_tls_replica``) on the
    TLS server, each an Airflow connection with verify-full."""
    made = {}
    for role in ("control", "replica"):
        db = Database(tls_server.cluster, f"{role[0]}_{uuid.uuid4().hex[:12]}")
        tls_server.cluster.create_database(db.name)
        made[role] = db
        monkeypatch.setenv(f"AIRFLOW_CONN_PGSYNC_TLS_{role.upper()}", tls_server.verify_full(db.name))
    try:
        yield made
    finally:
        for db in made.values():
            tls_server.cluster.drop_database(db.name)


def _write(database: Database, first: int, last: int) -> None:
    database.execute(
        "INSERT INTO items SELECT g, 'item ' || g, g * 3 FROM generate_series(%s::int, %s::int) g",
        (first, last),
    )


@pytest.mark.slow
@pytest.mark.parametrize("copy_path", ["off", "auto"])
def test_pipeline_over_verify_full(
    database: Database,
    make_pipeline_dags: MakePipelineDags,
    tls_databases: dict[str, Database],
    lake: Path,
    copy_path: str,
) -> None:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text, price bigint)")
    _write(database, 1, 300)
    pipeline = make_pipeline_dags(
        ["items"],
        baseline={"copy_path": copy_path},
        state={"backend": "postgres", "conn_id": "pgsync_tls_control"},
        destinations=[
            {"kind": "lake"},
            {"kind": "postgres", "conn_id": "pgsync_tls_replica", "name": "replica"},
        ],
    )

    setup = pipeline.run("setup")
    assert str(setup.state) == "success", task_states(setup)
    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
    assert str(baseline.state) == "success", task_states(baseline)
    [result] = baseline.get_task_instances()[0].xcom_pull(task_ids="baseline")
    assert result["rows"] == 300
    files = [p.name for p in Path(result["written"][0]["location"]).glob("part-*")]
    arrow_files = [name for name in files if name.endswith(".parquet") and name.count("-") == 1]
    # the Arrow path names its files part-<n>.parquet, Spark's writer part-<n>-<uuid>...
    assert bool(arrow_files) == (copy_path == "auto"), files

    _write(database, 301, 330)
    database.execute("UPDATE items SET price = price * 2 WHERE id %% 7 = 0")
    database.execute("DELETE FROM items WHERE id BETWEEN 50 AND 59")
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)

    state = pipeline.state()
    assert state.table(TABLE).phase == Ready()
    assert tls_databases["control"].execute("SELECT count(*) FROM pgsync.pipeline_state")[0][0] >= 1
    expected = rows(database, TABLE)
    assert len(expected) == 320
    [lake_rows] = lake_session(lake, [{"sql": view_query(database, TABLE)}])
    assert sort_rows(lake_rows) == expected
    assert rows(tls_databases["replica"], TABLE) == expected


def test_baseline_with_an_unknown_ca_fails_naming_the_connection(
    tls_server: TlsServer,
    database: Database,
    source_conn_id: str,
    monkeypatch: pytest.MonkeyPatch,
    lake: Path,
) -> None:
    """Refused on the worker before any Spark application starts: the operator reads the source
    with the same connection first."""
    database.execute("CREATE TABLE items (id int PRIMARY KEY)")
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{source_conn_id.upper()}",
        tls_server.verify_full(database.name, ca=tls_server.other_ca_file),
    )
    operator = PgBaselineOperator(
        task_id="baseline",
        pipeline="tls",
        table=TABLE,
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
    )
    with pytest.raises(SourceUnavailableError) as raised:
        operator.execute({"ti": None})  # type: ignore[typeddict-item]
    message = str(raised.value)
    assert f"Airflow connection {source_conn_id!r}" in message
    assert "certificate verify failed" in message and "sslrootcert" in message
    assert written_to(lake) == [], "something was written to the lake"


@pytest.mark.slow
@pytest.mark.parametrize("copy_path", ["off", "auto"])
def test_a_tls_refusal_inside_spark_fails_the_baseline_naming_the_connection(
    tls_server: TlsServer,
    database: Database,
    source_conn_id: str,
    replica: Database,
    monkeypatch: pytest.MonkeyPatch,
    lake: Path,
    copy_path: str,
) -> None:
    """The worker's connections succeed, then the server switches to a certificate of an unknown
    CA before the Spark tasks connect (as when the CA file on the Spark nodes is not the worker's):
    pgjdbc (copy_path off) or ADBC (auto) refuses, and the task's error names the source
    connection and the TLS remedy. The state lives on another server, so it records the failure."""
    database.execute("CREATE TABLE items (id int PRIMARY KEY)")
    database.execute("INSERT INTO items SELECT generate_series(1, 10)")
    plain = replica.cluster.url(replica.name, with_password=True)  # the session's server, no TLS needed
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_PLAIN_STATE", plain)
    operator = PgBaselineOperator(
        task_id="baseline",
        pipeline="tls",
        table=TABLE,
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
        slot_name=baseline_slot(source_conn_id),
        state_conn_id="pgsync_plain_state",
        copy_path=copy_path,
    )
    switched = threading.Event()

    def switch_when_the_snapshot_is_held() -> None:
        # the snapshot-holding session waits idle in its transaction while spark-submit starts
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            held = database.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND state = 'idle in transaction'"
            )
            if held[0][0]:
                tls_server.serve("untrusted")
                switched.set()
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=switch_when_the_snapshot_is_held, daemon=True)
    watcher.start()
    try:
        with pytest.raises(BaselineError) as raised:
            operator.execute({"ti": None})  # type: ignore[typeddict-item]
    finally:
        watcher.join(timeout=150)
        tls_server.serve("trusted")
    assert switched.is_set(), "the snapshot session was never seen: the test proved nothing"
    message = str(raised.value)
    assert message.startswith("baseline of public.items failed in Spark: "), message
    assert f"(Airflow connection {source_conn_id!r}: TLS: " in message, message
    # the driver's own reason: pgjdbc's (Java's certificate path check) or libpq's under ADBC
    reason = "unable to find valid certification path" if copy_path == "off" else "certificate verify failed"
    assert reason in message, message
    store = PostgresStateStore(PgReplicationHook(postgres_conn_id="pgsync_plain_state"))
    phase = store.load("tls").table(TABLE).phase
    assert isinstance(phase, Errored) and "failed in Spark" in phase.reason
