"""Helpers of lake tests: real baselines (spark-submit), apply into the lake, and reading its
views from a Spark session or the ``spark-sql`` command in processes of their own (a session
here would keep the embedded Derby metastore open)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow_provider_pgsync.destinations.lake import LakeDestination, catalog_name
from airflow_provider_pgsync.destinations.lake_changes import LakeChanges
from airflow_provider_pgsync.hooks.spark_submit import driver_environment
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.source.names import TableRef
from tests.capture.conftest import Pipeline
from tests.conftest import Database
from tests.support import resident_driver, resident_spark
from tests.support.replica import apply_into, column_names

SESSION = Path(__file__).with_name("lake_session.py")
REPO = Path(__file__).resolve().parents[2]


def baseline(
    pipeline: Pipeline, source_conn_id: str, tables: list[str], *, meanwhile: Callable[[], None] | None = None
) -> None:
    """Real baselines (spark-submit) of ``tables`` into the test's lake, all at once, while
    ``meanwhile`` runs (e.g. a writer)."""

    def run(table: str) -> None:
        PgBaselineOperator(
            task_id="baseline",
            pipeline=pipeline.name,
            table=table,
            postgres_conn_id=source_conn_id,
            state_backend="postgres",
            progress_seconds=2,
        ).execute({"ti": None})  # type: ignore[typeddict-item]

    with ThreadPoolExecutor(len(tables)) as pool:
        running = [pool.submit(run, t) for t in tables]
        if meanwhile is not None:
            meanwhile()
        for future in running:
            future.result()


def cdc_into_lake(pipeline: Pipeline, source_conn_id: str, lake: Path) -> dict[str, Any]:
    """A capture until the slot is idle, then an apply into the lake (``apply_lake_operator``)."""
    pipeline.capture_until_idle()
    return apply_lake_operator(pipeline, source_conn_id, lake)


def apply_lake_operator(pipeline: Pipeline, source_conn_id: str, lake: Path) -> dict[str, Any]:
    """One run of ``PgApplyOperator`` into the lake, as the cdc DAG's (phases, watermarks and
    backfills recorded); its result."""
    operator = PgApplyOperator(
        task_id="apply",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        destinations=[{"kind": "lake", "warehouse": str(lake)}],
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
    )
    return operator.execute({})  # type: ignore[arg-type]


def apply_lake(pipeline: Pipeline, lake: Path) -> dict[str, object]:
    return apply_into(pipeline, LakeChanges(LakeDestination.from_config({"warehouse": str(lake)})))


def view_query(database: Database, table: str) -> str:
    """The table's view with every column as text, as ``rows`` reads the source."""
    columns = ", ".join(f"CAST(`{n}` AS STRING)" for n in column_names(database, table))
    return f"SELECT {columns} FROM pgsync.{catalog_name(TableRef.parse(table))}"  # noqa: S608 (test names)


def lake_session(lake: Path, steps: list[dict[str, Any]]) -> list[Any]:
    """Run ``steps`` in one Spark session on the lake (``tests/support/lake_steps.py``): the
    worker's resident driver's, or ``lake_session.py``'s; their results."""
    if resident_spark.current is not None:
        return resident_spark.current.steps(lake, steps)
    return list(run_session(SESSION, [str(lake), json.dumps(steps)], timeout=600))


def run_session(script: Path, args: list[str], timeout: float) -> Any:
    """Run a Spark session ``script`` as a process of its own, as the jobs run; the JSON it
    printed last after ``RESULT``. A script of ``tests/spark/`` with the lake as its one
    argument runs in the worker's resident driver when the test uses it."""
    if resident_spark.current is not None and script.stem in resident_driver.SESSIONS and len(args) == 1:
        return resident_spark.current.session(script, Path(args[0]))
    # the scripts import the tests' own helpers (``tests.spark.lake_spark``)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, **driver_environment(), "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def written_to(lake: Path) -> list[str]:
    """What ``lake`` holds besides the empty Derby metastore the ``lake`` fixture may put there."""
    return sorted(p.name for p in lake.iterdir() if p.name != "metastore_db")


def sort_rows(found: list[list[str | None]]) -> list[tuple[str | None, ...]]:
    return sorted((tuple(r) for r in found), key=lambda r: tuple((v is None, v or "") for v in r))


def spark_sql(lake: Path, query: str) -> list[str]:
    """``query`` run by the ``spark-sql`` command on the lake (by the worker's resident driver,
    which keeps the lake's catalog, when the test uses it); the words of its output."""
    if resident_spark.current is not None:
        [rows] = resident_spark.current.steps(lake, [{"sql": query}])
        return [("NULL" if v is None else str(v)) for row in rows for v in row]
    conf = LakeDestination.from_config({"warehouse": str(lake)}).spark_conf()
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-sql"),
            *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")),
            "-e",
            query,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **driver_environment()},
        cwd=lake,  # where Derby writes its derby.log
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()
