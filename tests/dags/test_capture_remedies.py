"""The remedy each capture error names works, through the drop-in DAGs (real PostgreSQL and
Airflow; a custom SQLite destination, so no Spark job) with a writer running: each problem fails
the cdc run's capture naming its remedy, and doing exactly what it says brings every table back
to Ready, the destination equal to the source row by row:

- a slot invalidated by the server (``lost``): drop it, run setup, baseline what setup asks for;
- the config naming another slot than the state was built from: keep the new one by running
  setup (it adopts it), baseline, then drop the old slot;
- a column added with a changelog column's name (``_op``): rename it, take the table out of the
  pipeline (config, setup, teardown of that table), one cdc run, put it back (setup baselines it);
- the source's WAL behind what the pipeline captured (a restored server; simulated by the
  state): teardown, setup, baseline.

(The other remedies are tested where their errors are: a dropped or replaced slot in
``tests/dags/test_recovery.py``, a table dropped, recreated or taking a followed table's name in
``tests/dags/test_tables_come_and_go.py`` and ``tests/capture/test_capture_rename.py``.)
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.pgoutput.lsn import LSN
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states, triggered_baselines
from tests.support.sqlite_destination import source_text, sqlite_text
from tests.support.tables_writer import writer

ITEMS, NOTES = "public.items", "public.notes"


@contextmanager
def _small_slot_wal_limit(database: Database) -> Iterator[None]:
    """``max_slot_wal_keep_size = 1MB`` on the session's cluster until the block ends."""

    def setting() -> object:
        return database.execute("SELECT current_setting('max_slot_wal_keep_size')")[0][0]

    def wait_for(value: str) -> None:
        deadline = time.monotonic() + 10
        while setting() != value:
            assert time.monotonic() < deadline, f"max_slot_wal_keep_size never became {value}"
            time.sleep(0.05)

    try:
        database.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        database.execute("SELECT pg_reload_conf()")
        wait_for("1MB")
        yield
    finally:
        database.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
        database.execute("SELECT pg_reload_conf()")
        wait_for("-1")


def _lose_the_slot(database: Database, slot: str) -> None:
    """WAL past the slot and checkpoints until the server invalidates it."""
    database.execute("CREATE TABLE IF NOT EXISTS public.unpublished (id int, pad text)")
    deadline = time.monotonic() + 60
    while database.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,))[0][
        0
    ] != ("lost"):
        assert time.monotonic() < deadline, "the slot was never lost"
        for _ in range(5):
            database.execute("INSERT INTO public.unpublished SELECT g, 'x' FROM generate_series(1, 100) g")
            database.execute("SELECT pg_switch_wal()")
        database.execute("CHECKPOINT")


def _equal(database: Database, path: Path, tables: list[str]) -> None:
    for table in tables:
        expected = source_text(database, table)
        assert len(expected) >= 50, f"{table}: too few rows to prove anything"
        assert sqlite_text(path, table) == expected, f"{table} differs in the destination"


def _phases(pipeline: PipelineDags) -> set[str]:
    return {ts.destination("sqlite").phase.kind for ts in pipeline.state().tables.values()}


def _capture_fails(pipeline: PipelineDags) -> None:
    cdc = pipeline.run("cdc")
    assert task_states(cdc)["capture"] == "failed", task_states(cdc)


def _baseline_and_drain(database: Database, pipeline: PipelineDags, tables: list[str], seed: int) -> None:
    """The baseline of ``tables`` and a cdc run with the writer going on, then a cdc run that drains."""
    with writer(database, [ITEMS, NOTES], seed):
        baseline = pipeline.run("baseline", run_conf={"tables": tables, "mode": "rebaseline"})
        assert str(baseline.state) == "success", task_states(baseline)
        cdc = pipeline.run("cdc")
        assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert _phases(pipeline) == {"Ready"}


@pytest.mark.slow
def test_doing_what_each_capture_error_says_gets_the_pipeline_going_again_exactly(
    database: Database,
    make_pipeline_dags: MakePipelineDags,
    example_module: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def said() -> str:
        text = capsys.readouterr().out + caplog.text
        caplog.clear()
        return text

    caplog.set_level(logging.WARNING)
    monkeypatch.setenv("AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL", "0")  # each config edit stored
    for table in ("items", "notes"):
        database.execute(f"CREATE TABLE public.{table} (id int PRIMARY KEY, v text)")
        database.execute(f"INSERT INTO public.{table} SELECT g, 'r' || g FROM generate_series(1, 100) g")  # noqa: S608
    path = tmp_path / "dest.sqlite"
    sqlite = {
        "kind": "custom",
        "class": f"{example_module}.SqliteDestination",
        "name": "sqlite",
        "path": str(path),
    }

    def pipeline_of(tables: list[str], **config: Any) -> PipelineDags:
        return make_pipeline_dags(tables, destinations=[sqlite], **config)

    pipeline = pipeline_of([ITEMS, NOTES])
    slot = pipeline.config.slot_name
    hook = PgReplicationHook(postgres_conn_id=pipeline.config.source_conn_id)
    assert str(pipeline.run("setup").state) == "success"
    _baseline_and_drain(database, pipeline, [ITEMS, NOTES], 1)
    _equal(database, path, [ITEMS, NOTES])

    # ---- a slot the server invalidated
    with _small_slot_wal_limit(database), writer(database, [ITEMS, NOTES], 2):
        _lose_the_slot(database, slot)
    said()
    _capture_fails(pipeline)
    remedy = f"drop the slot (PgDropSlotOperator, or SELECT pg_drop_replication_slot('{slot}')), then run"
    assert remedy in said() and _phases(pipeline) == {"Errored"}
    database.execute("SELECT pg_drop_replication_slot(%s)", (slot,))  # as it says
    with writer(database, [ITEMS, NOTES], 3):
        setup = pipeline.run("setup")
        assert str(setup.state) == "success", task_states(setup)
    assert _phases(pipeline) == {"Init"}
    assert triggered_baselines(pipeline)[-1][1] == {"tables": [ITEMS, NOTES], "mode": "rebaseline"}
    _baseline_and_drain(database, pipeline, [ITEMS, NOTES], 4)
    _equal(database, path, [ITEMS, NOTES])

    # ---- the config names another slot than the state was built from: keep the new one
    moved = pipeline_of([ITEMS, NOTES], slot_name=f"{slot}_new")
    with writer(database, [ITEMS, NOTES], 5):
        _capture_fails(moved)
    message = said()
    assert f"the pipeline state was built from slot {slot}, not {slot}_new" in message
    assert f"then drop slot {slot} if nothing else reads it" in message
    with writer(database, [ITEMS, NOTES], 6):
        setup = moved.run("setup")
        assert str(setup.state) == "success", task_states(setup)
    assert _phases(moved) == {"Init"} and moved.state().slot_name == f"{slot}_new"
    _baseline_and_drain(database, moved, [ITEMS, NOTES], 7)
    database.execute("SELECT pg_drop_replication_slot(%s)", (slot,))  # as it says
    _equal(database, path, [ITEMS, NOTES])

    # ---- a column added under a changelog column's name
    database.execute("ALTER TABLE notes ADD COLUMN _op text")
    with writer(database, [ITEMS, NOTES], 8):
        _capture_fails(moved)
    assert "column '_op' of table public.notes has the name of a changelog column" in said()
    database.execute("ALTER TABLE notes RENAME COLUMN _op TO op")  # as it says, step by step
    without = pipeline_of([ITEMS], slot_name=f"{slot}_new")
    with writer(database, [ITEMS, NOTES], 9):
        setup = without.run("setup")
        assert str(setup.state) == "success", task_states(setup)
        conf = {"confirm": without.config.name, "tables": [NOTES], "drop_tables": True}
        teardown = without.run("teardown", run_conf=conf)
        assert task_states(teardown)["teardown_tables"] == "success", task_states(teardown)
        cdc = without.run("cdc")
        assert task_states(cdc) == CDC_GREEN, task_states(cdc)
        setup = moved.run("setup")
        assert str(setup.state) == "success", task_states(setup)
    message = said()
    assert "change(s) of table public.notes left out" in message
    assert "cannot drop tables: public.notes is kept there" in message  # SQLite's example has no drop_table
    assert triggered_baselines(moved)[-1][1] == {"tables": [NOTES], "mode": "rebaseline"}
    _baseline_and_drain(database, moved, [NOTES], 10)
    _equal(database, path, [ITEMS, NOTES])

    # ---- the source's WAL behind the state (as after a restore from a backup)
    store = moved.store()
    state = store.load(moved.config.name)
    assert state.last_end_lsn is not None
    store.save(dataclasses.replace(state, last_end_lsn=LSN(state.last_end_lsn.value + 2**36)))
    with writer(database, [ITEMS, NOTES], 11):
        _capture_fails(moved)
    message = said()
    assert "is not the server the pipeline captured from" in message
    assert "run the pipeline's teardown DAG and then its setup DAG" in message
    with writer(database, [ITEMS, NOTES], 12):
        conf = {"confirm": moved.config.name, "tables": [], "drop_tables": False}
        teardown = moved.run("teardown", run_conf=conf)
        assert str(teardown.state) == "success", task_states(teardown)
        setup = moved.run("setup")
        assert str(setup.state) == "success", task_states(setup)
    assert _phases(moved) == {"Init"}
    _baseline_and_drain(database, moved, [ITEMS, NOTES], 13)
    _equal(database, path, [ITEMS, NOTES])
    slots = database.execute("SELECT slot_name FROM pg_replication_slots WHERE database = current_database()")
    assert {r[0] for r in slots} == {f"{slot}_new"}
    assert hook.slot_info(f"{slot}_new") is not None
