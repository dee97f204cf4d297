"""A compaction and a rebaseline of the same lake table, in both orders, with the embedded Derby
metastore (real PostgreSQL, Spark and Airflow): the compaction's driver is paused mid-merge
(SIGSTOP, the OS's own pause) while the rebaseline copies its new base, or the compaction starts
while the rebaseline copies. Neither removes the other's files: no generation points at a
missing folder, no cdc run fails, and the lake ends equal to the source."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.operators.compact import PgCompactOperator
from airflow_provider_pgsync.source.names import TableRef
from tests.apply.lake import lake_session, sort_rows, view_query
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states
from tests.support.replica import rows

# the subject is two drivers of their own, one paused by the OS (SIGSTOP) with the Derby lock:
# not the worker's resident driver (tests/support/resident_spark.py)
pytestmark = pytest.mark.spark_submit

TABLE = "public.items"
DEADLINE_S = 300


def _wait(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _versions(files: LakeFiles, lake: LakeDestination) -> set[str]:
    base = Path(files.path(lake.table_dir(TableRef.parse(TABLE))), "base")
    return {p.name for p in base.iterdir()} if base.is_dir() else set()


def _complete(files: LakeFiles, lake: LakeDestination, version: str) -> bool:
    return Path(files.path(lake.table_dir(TableRef.parse(TABLE))), "base", version, "_SUCCESS").exists()


def _compaction_processes() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "pgsync-compaction" in line or "compact_job.py" in line:
            found.append(child)
    return found


def _signal(processes: list[psutil.Process], sig: int) -> None:
    for process in processes:
        try:
            process.send_signal(sig)
        except psutil.NoSuchProcess:
            continue


def _compact_in_thread(pipeline: PipelineDags) -> tuple[threading.Thread, list[Any]]:
    kwargs = pipeline.config.compact_kwargs()["lake"]
    results: list[Any] = []

    def run() -> None:
        try:
            results.append(PgCompactOperator(task_id="compact", **kwargs).execute({}))  # type: ignore[arg-type]
        except Exception as exc:
            results.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, results


def _every_generation_whole(files: LakeFiles) -> None:
    table = TableRef.parse(TABLE)
    numbers = files.generations(table)
    assert numbers, "no generation"
    for number in numbers[-2:]:  # the current one and the one a reader may still be reading
        meta = files.generation(table, number)
        assert Path(files.path(meta.base), "_SUCCESS").exists(), (
            f"generation {number}: {meta.base} is missing"
        )


def _changes(database: Database, pipeline: PipelineDags, round_: int) -> None:
    """Writes, captured and applied as lake segments (what a compaction folds)."""
    for i in range(3):
        database.execute("UPDATE items SET v = v || %s WHERE id %% 7 = %s", (f"-{round_}.{i}", i))
        database.execute(
            "INSERT INTO items SELECT g, 'new' FROM generate_series(%s, %s) g",
            (100_000 * round_ + 1000 * i, 100_000 * round_ + 1000 * i + 500),
        )
        database.execute("DELETE FROM items WHERE id %% 11 = %s", (round_ + i,))
        cdc = pipeline.run("cdc")
        assert task_states(cdc) == CDC_GREEN, task_states(cdc)


@pytest.mark.slow
def test_compaction_and_rebaseline_of_one_table_in_either_order(
    database: Database, make_pipeline_dags: MakePipelineDags, lake: Path
) -> None:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
    database.execute("INSERT INTO items SELECT g, 'r' || g FROM generate_series(1, 60000) g")
    pipeline = make_pipeline_dags(["items"], destinations=[{"kind": "lake"}])
    destination = LakeDestination.from_config({"warehouse": str(lake)})
    files = LakeFiles(destination)
    rebaseline = {"tables": [TABLE], "destinations": ["lake"], "mode": "rebaseline"}
    assert str(pipeline.run("setup").state) == "success"
    assert str(pipeline.run("baseline", run_conf=pipeline.every_table()).state) == "success"
    _changes(database, pipeline, 1)

    # 1. the compaction first: paused mid-merge, holding the metastore, while the rebaseline
    # copies; it goes on once the rebaseline's base is written, and publishes before it
    before = _versions(files, destination)
    generation = files.generations(TableRef.parse(TABLE))[-1]
    compaction, results = _compact_in_thread(pipeline)
    _wait("the compaction's merge", lambda: bool(_versions(files, destination) - before))
    paused = _compaction_processes()
    _signal(paused, signal.SIGSTOP)
    assert files.generations(TableRef.parse(TABLE))[-1] == generation, "the compaction published already"
    merging = _versions(files, destination) - before

    def go_on_once_the_rebaseline_copied() -> None:
        _wait(
            "the rebaseline's copy",
            lambda: any(
                _complete(files, destination, v) for v in _versions(files, destination) - before - merging
            ),
        )
        _signal(paused, signal.SIGCONT)

    resume = threading.Thread(target=go_on_once_the_rebaseline_copied, daemon=True)
    resume.start()
    try:
        run = pipeline.run("baseline", run_conf=rebaseline)
    finally:
        _signal(paused, signal.SIGCONT)
    assert str(run.state) == "success", task_states(run)
    compaction.join(timeout=DEADLINE_S)
    assert results and not isinstance(results[0], Exception), results
    _every_generation_whole(files)
    assert task_states(pipeline.run("cdc")) == CDC_GREEN
    _changes(database, pipeline, 2)

    # 2. the rebaseline first: the compaction starts while it copies
    before = _versions(files, destination)
    compaction_started: list[Any] = []

    def compact_once_the_rebaseline_copies() -> None:
        _wait("the rebaseline's copy", lambda: bool(_versions(files, destination) - before))
        compaction_started.append(_compact_in_thread(pipeline))

    starter = threading.Thread(target=compact_once_the_rebaseline_copies, daemon=True)
    starter.start()
    run = pipeline.run("baseline", run_conf=rebaseline)
    assert str(run.state) == "success", task_states(run)
    starter.join(timeout=DEADLINE_S)
    compaction, results = compaction_started[0]
    compaction.join(timeout=DEADLINE_S)
    assert results and not isinstance(results[0], Exception), results
    _every_generation_whole(files)
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert pipeline.state().table(TABLE).phase.kind == "Ready"
    (found,) = lake_session(lake, [{"sql": view_query(database, TABLE)}])
    assert sort_rows(found) == rows(database, TABLE)
