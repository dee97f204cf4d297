"""PgBaselineOperator end to end: real PostgreSQL, real spark-submit on ``local[*]``, real Airflow.

One DAG run (``dag.test()``, Variables state) checks the task's result, state, log and the
Spark catalog; the other tests run ``execute`` directly (PostgreSQL state, as in
``tests/baseline``): rebaselines and the versions they keep, and the errors raised before
and inside Spark. Distributed masters are covered in ``tests/baseline``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_pgsync.baseline.partitions import ctid_predicates, partition_count
from airflow_provider_pgsync.errors import (
    BaselineError,
    ConfigError,
    PhaseTransitionError,
    StateError,
    UnsupportedTypeError,
)
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.variable_state_store import VariableStateStore
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.state.model import Errored, SyncDone, TablePhase
from pgcluster import dev_password
from tests.apply.lake import lake_session, written_to
from tests.baseline.conftest import PIPELINE, baseline_slot, pipeline_state
from tests.conftest import Database, RunDag

BASE_TABLE = "pgsync.public__items__base"
LSN_TEXT = re.compile(r"[0-9A-F]+/[0-9A-F]+")
PROGRESS = re.compile(
    r"pgsync baseline: public\.items: (\d+)/(\d+) partitions \((\d+)%\)(?:, ([\d,]+) rows, ([\d,]+) rows/s)?"
)

RunBaseline = Callable[..., dict[str, Any]]


def _operator(conn_id: str, table: Any, **kwargs: Any) -> PgBaselineOperator:
    kwargs.setdefault("state_backend", "postgres")
    kwargs.setdefault("progress_seconds", 2)
    kwargs.setdefault("slot_name", baseline_slot(conn_id))
    return PgBaselineOperator(
        task_id="baseline", pipeline=PIPELINE, table=table, postgres_conn_id=conn_id, **kwargs
    )


@pytest.fixture
def run_baseline(source_conn_id: str, lake: Path) -> RunBaseline:
    """``run_baseline(table, **operator_kwargs)``: ``execute`` in this process, state in PostgreSQL."""

    def run(table: Any, **kwargs: Any) -> dict[str, Any]:
        return _operator(source_conn_id, table, **kwargs).execute({"ti": None})  # type: ignore[typeddict-item]

    return run


def _create_items(database: Database, rows: int) -> None:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, payload text NOT NULL)")
    database.execute(
        "INSERT INTO items SELECT i, repeat(md5(i::text), 3) FROM generate_series(1, %s) i", (rows,)
    )


def _phase(source_conn_id: str, table: str = "public.items") -> TablePhase:
    return pipeline_state(source_conn_id).table(table).phase


def _versions(lake: Path, table: str = "public__items") -> set[str]:
    """The base version folders of a table in the lake."""
    base = lake / "pgsync" / table / "base"
    return {p.name for p in base.iterdir()} if base.exists() else set()


def _version(result: dict[str, Any]) -> str:
    return Path(result["written"][0]["location"]).name


def _catalog(lake: Path, table: str = BASE_TABLE) -> tuple[int, str]:
    """``(count(*), location)`` of a catalog table, read in a Spark session of the lake's."""
    [[[count]], described] = lake_session(
        lake,
        [{"sql": f"SELECT count(*) FROM {table}"}, {"sql": f"DESCRIBE TABLE EXTENDED {table}"}],  # noqa: S608
    )
    [location] = [row[1] for row in described if row[0] == "Location"]
    return int(count), str(location).removeprefix("file:")


# ---- in a DAG run ----------------------------------------------------------------------------


@pytest.mark.slow
def test_baseline_in_a_dag_run(
    database: Database,
    source_conn_id: str,
    lake: Path,
    run_dag: RunDag,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _create_items(database, 1000)
    [(size, block_size)] = database.execute(
        "SELECT pg_relation_size('items'), current_setting('block_size')::int"
    )
    target_mb = 0.04
    assert isinstance(size, int) and isinstance(block_size, int)
    # the job rounds the count up to a multiple of its task slots (local[*]: one per core)
    count = partition_count(size, int(target_mb * 1024 * 1024), slots=os.cpu_count() or 1)
    expected_partitions = len(ctid_predicates(math.ceil(size / block_size), count))
    assert expected_partitions >= 3, "the table should be read in several partitions"
    pipeline = "baseline_dag"
    with DAG("pgsync_baseline", schedule=None, default_args={"retries": 0}) as dag:
        PgBaselineOperator(
            task_id="baseline",
            pipeline=pipeline,
            table="public.items",
            slot_name=baseline_slot(source_conn_id),
            postgres_conn_id=source_conn_id,
            target_partition_mb=target_mb,
            progress_seconds=0.2,
        )

    run = run_dag(dag)

    [ti] = run.get_task_instances()
    out, err = capfd.readouterr()
    log = "\n".join([out, err, caplog.text])
    assert (str(run.state), str(ti.state)) == ("success", "success"), log[-20000:]
    result = ti.xcom_pull(task_ids="baseline")
    assert result["table"] == "public.items"
    assert (result["rows"], result["partitions"]) == (1000, expected_partitions)
    assert LSN_TEXT.fullmatch(result["baseline_lsn"]) and result["snapshot"]
    [written] = result["written"]
    assert (written["kind"], written["table"], written["rows"]) == ("lake", BASE_TABLE, 1000)
    location = Path(written["location"])
    assert location.parent == lake / "pgsync" / "public__items" / "base"
    assert _versions(lake) == {location.name}

    # the state: SyncDone with the snapshot and LSN of the result, in the Variables backend only
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    state = VariableStateStore(lock=hook).load(pipeline)
    phase = state.table("public.items").phase
    assert isinstance(phase, SyncDone)
    assert (phase.snapshot, str(phase.baseline_lsn)) == (result["snapshot"], result["baseline_lsn"])
    assert phase.xmin <= phase.xmax
    assert PostgresStateStore(hook).load(pipeline).version == 0, "saved in the other backend"

    # the task log: the plan, progress by partitions, the final count; never the password
    assert f"reading {expected_partitions} partition(s)" in log
    assert "running on master local[*]" in log
    progress = list(PROGRESS.finditer(log))
    assert progress, f"no progress line in the task log:\n{log[-20000:]}"
    assert all(int(m.group(2)) >= expected_partitions for m in progress), "total below the partitions"
    assert re.search(
        r"public\.items: 1,000 rows read and written in [\d.]+ s \([\d,]+ rows/s\), swapped into "
        + re.escape(BASE_TABLE),
        log,
    )
    assert f"baseline public.items: 1,000 rows written, SyncDone at {result['baseline_lsn']} in lake" in log
    password = dev_password()
    assert password and hook.connection.password == password
    submit = [line for line in log.splitlines() if "Spark-Submit cmd" in line]
    assert submit and all("--spec" in line and password not in line for line in submit), submit
    assert password not in log
    assert "***" not in log, "something was masked: a secret reached the log"

    # the catalog table of the base points at the written version and reads back every row
    assert _catalog(lake) == (1000, str(location))


# ---- rebaseline ------------------------------------------------------------------------------


@pytest.mark.slow
def test_rebaseline_swaps_the_base_and_keeps_the_previous_version(
    database: Database, source_conn_id: str, lake: Path, run_baseline: RunBaseline, tmp_path: Path
) -> None:
    _create_items(database, 300)
    first = run_baseline("public.items")
    assert first["rows"] == 300
    done = _phase(source_conn_id)
    assert isinstance(done, SyncDone)

    # without rebaseline=True a baseline of a SyncDone table stops before Spark
    again = _operator(source_conn_id, "public.items")
    with pytest.raises(PhaseTransitionError, match="rebaseline") as raised:
        again.execute({"ti": None})  # type: ignore[typeddict-item]
    assert isinstance(raised.value, StateError)
    assert "SyncDone -> DataSync" in str(raised.value)
    assert again._submit is None, "spark-submit was started"
    assert _phase(source_conn_id) == done, "the state changed"
    assert _versions(lake) == {_version(first)}

    database.execute("DELETE FROM items WHERE id <= 100")
    database.execute("INSERT INTO items SELECT i, 'new' FROM generate_series(1001, 1050) i")
    second = run_baseline("public.items", rebaseline=True)
    assert second["rows"] == 250
    assert second["snapshot"] != first["snapshot"]
    phase = _phase(source_conn_id)
    assert isinstance(phase, SyncDone) and phase.snapshot == second["snapshot"]
    assert _versions(lake) == {_version(first), _version(second)}, "the previous version is kept"

    database.execute("DELETE FROM items WHERE id > 1000")
    third = run_baseline("public.items", rebaseline=True)
    assert third["rows"] == 200
    assert _versions(lake) == {_version(second), _version(third)}, "only current + previous are kept"
    lineages = {p.name for p in (lake / "pgsync" / "public__items" / "changes").iterdir()}
    assert lineages == {_version(second), _version(third)}, "segments of older lineages are removed"
    assert _catalog(lake) == (200, third["written"][0]["location"])


# ---- errors before Spark -----------------------------------------------------------------------


def test_missing_table_is_a_config_error(source_conn_id: str, lake: Path, run_baseline: RunBaseline) -> None:
    with pytest.raises(ConfigError, match=r"public\.no_such_table") as raised:
        run_baseline("public.no_such_table")
    phase = _phase(source_conn_id, "public.no_such_table")
    assert isinstance(phase, Errored)
    assert str(raised.value) in phase.reason
    assert written_to(lake) == [], "something was written to the lake"


def test_columns_differing_only_in_case_are_refused(
    database: Database, source_conn_id: str, lake: Path, run_baseline: RunBaseline
) -> None:
    database.execute('CREATE TABLE items ("Id" int PRIMARY KEY, id int)')
    database.execute("INSERT INTO items VALUES (1, 1)")
    with pytest.raises(UnsupportedTypeError) as raised:
        run_baseline("public.items")
    assert "'Id'" in str(raised.value) and "'id'" in str(raised.value)
    assert "public.items" in str(raised.value)
    phase = _phase(source_conn_id)
    assert isinstance(phase, Errored) and str(raised.value) in phase.reason
    assert written_to(lake) == [], "something was written to the lake"


# ---- errors in Spark -------------------------------------------------------------------------------


@pytest.mark.slow
def test_spark_failure_is_summarised(
    database: Database, source_conn_id: str, lake: Path, run_baseline: RunBaseline
) -> None:
    _create_items(database, 10)
    with pytest.raises(BaselineError) as raised:
        run_baseline({"table": "public.items", "row_filter": "no_such_column > 0"})
    message = str(raised.value)
    assert message.startswith("baseline of public.items failed in Spark: ")
    assert 'column "no_such_column" does not exist' in message
    assert "\n" not in message and len(message) < 2100
    phase = _phase(source_conn_id)
    assert isinstance(phase, Errored)
    assert 'column "no_such_column" does not exist' in phase.reason
    assert phase.previous == "DataSync"
    assert _versions(lake) == set(), "a failed baseline left a version folder"
