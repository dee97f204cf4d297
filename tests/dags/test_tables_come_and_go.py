"""Tables that appear and disappear, through the drop-in DAGs of a PostgreSQL-only pipeline (real
PostgreSQL, Airflow and Spark for the baselines), with a writer running and cdc drained after
each step, the replica compared with the source row by row and the phases read from the state:

1. a table dropped in the source: the next cdc run stays green and warns, naming the table, what
   the replica keeps (its rows as of the drop, every change before it applied) and how to take it
   out; the state and the status page flag it; the other tables stream on. A table created later
   under its name is not taken for it (a baseline of it is refused) until setup follows it, which
   baselines it alone;
2. a table added to the config: setup publishes it and baselines it alone, the others stream on;
3. tables taken out of the config: setup takes them out of the publication, their state and
   replica tables stay (what was captured is applied) until the teardown DAG's param ``tables``
   tears them down (``drop_tables``: their replica tables too); changes still in the slot of a
   table torn down are left out with a warning.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from psycopg import sql

from airflow_provider_pgsync.plugins.collect import collect_pipeline
from airflow_provider_pgsync.plugins.render import render_tables
from airflow_provider_pgsync.source.names import TableRef
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states, triggered_baselines
from tests.support.replica import rows
from tests.support.tables_writer import writer

REPLICA = [{"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}]
A, B, C, D, E = (f"public.{t}" for t in "abcde")


def _create(database: Database, table: str, rows_from: int = 1) -> None:
    ident = TableRef.parse(table).identifier
    database.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident).as_string(None))
    fill = sql.SQL("INSERT INTO {} SELECT g, 'r' || g FROM generate_series(%s, 100) g").format(ident)
    database.execute(fill.as_string(None), (rows_from,))


def _write(database: Database, table: str, n: int, first: int = 900_000) -> None:
    """``n`` transactions of the test on ``table``, inserting ids from ``first`` and updating others."""
    ident = TableRef.parse(table).identifier
    for i in range(n):
        with database.connect() as conn, conn.transaction():
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 't')").format(ident), (first + i,))
            conn.execute(sql.SQL("UPDATE {} SET v = v || '!' WHERE id = %s").format(ident), (10 + i,))


def _cdc_green(pipeline: PipelineDags) -> None:
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)


def _equal(database: Database, replica: Database, tables: list[str]) -> None:
    for table in tables:
        expected = rows(database, table)
        assert len(expected) >= 50, f"{table}: too few rows to prove anything"
        assert rows(replica, table) == expected, f"{table} differs in the replica"


def _phases(pipeline: PipelineDags) -> dict[str, str]:
    return {k: ts.destination("replica").phase.kind for k, ts in pipeline.state().tables.items()}


def _lineage(pipeline: PipelineDags, table: str) -> str:
    return pipeline.state().table(table).destination("replica").lineage


def _in_replica(replica: Database, table: str) -> bool:
    return replica.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))[0][0] is True


def _published(database: Database, pipeline: PipelineDags) -> list[str]:
    found = database.execute(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1",
        (pipeline.config.publication_name,),
    )
    return [str(r[0]) for r in found]


@pytest.mark.slow
@pytest.mark.usefixtures("spark_drivers")  # its baselines are Spark jobs (tests/tiers.py)
def test_tables_dropped_added_and_taken_out_keep_every_destination_exact(
    database: Database,
    replica: Database,
    make_pipeline_dags: MakePipelineDags,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def printed() -> str:
        """What the task logs said since the last call (printed, or logged through ``logging``)."""
        text = capsys.readouterr().out + caplog.text
        caplog.clear()
        return text

    caplog.set_level(logging.WARNING)
    # each edit of the config is stored at once, as a DAG processor stores it on its next parse
    monkeypatch.setenv("AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL", "0")
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica.cluster.url(replica.name, with_password=True))
    for table in (A, B, C, E):
        _create(database, table)
    pipeline = make_pipeline_dags([A, B, C, E], destinations=REPLICA)
    assert str(pipeline.run("setup").state) == "success"
    with writer(database, [A, B, C, E], 1):
        baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
        assert str(baseline.state) == "success", task_states(baseline)
        _cdc_green(pipeline)
    _cdc_green(pipeline)
    assert set(_phases(pipeline).values()) == {"Ready"}
    _equal(database, replica, [A, B, C, E])
    lineage_a = _lineage(pipeline, A)

    # ---- 1. table c dropped in the source, while the writer goes on with the others
    c_oid = int(str(database.execute("SELECT 'public.c'::regclass::oid")[0][0]))
    with writer(database, [A, B, C, E], 2) as w:
        _cdc_green(pipeline)
        w.stop_writing(C)
        _write(database, C, 5)  # the last changes before the DROP
        last_c = rows(database, C)
        database.execute("DROP TABLE public.c")
        _cdc_green(pipeline)  # while the writer goes on
    printed()
    _cdc_green(pipeline)
    said = printed()
    state = pipeline.state()
    dropped = state.table(C).dropped
    assert dropped is not None and dropped.exact and dropped.relation_id == c_oid
    assert set(_phases(pipeline).values()) == {"Ready"}, "nothing else stops, and c keeps its phase"
    assert rows(replica, C) == last_c, "every change before the DROP is applied"
    _equal(database, replica, [A, B, E])
    assert f"table public.c of pipeline {pipeline.config.name!r} was dropped in the source at" in said
    assert "its destinations replica (Ready) keep its rows as of the drop" in said
    assert 'with param tables ["public.c"]' in said
    status = collect_pipeline(pipeline.config, now=datetime.now(UTC))
    row = {r.table: r for r in status.tables}[C]
    assert row.dropped == dropped.describe() and row.phase == "Ready"
    assert "dropped in the source</div>" in render_tables(status.tables)

    # ---- a new table c: not taken for the dropped one, until setup follows it (and baselines it)
    _create(database, C, rows_from=41)
    with writer(database, [A, B, E], 3):
        _cdc_green(pipeline)
        refused = pipeline.run("baseline", run_conf={"tables": [C], "mode": "rebaseline"})
        assert task_states(refused)["baseline[0]"] == "failed", task_states(refused)
        assert pipeline.state().table(C).dropped == dropped
        assert rows(replica, C) == last_c
        setup = pipeline.run("setup")
        assert str(setup.state) == "success", task_states(setup)
    said = printed()
    assert "was dropped in the source, and public.c is another table now" in said  # the refusal
    assert "the pipeline follows the new table under the name public.c from now on" in said
    assert triggered_baselines(pipeline)[-1][1] == {"tables": [C], "mode": "rebaseline"}
    state = pipeline.state()
    assert state.table(C).dropped is None and state.table(C).relation_id != c_oid
    assert _phases(pipeline) == {A: "Ready", B: "Ready", C: "Init", E: "Ready"}
    with writer(database, [A, B, C, E], 4):
        baseline = pipeline.run("baseline", run_conf={"tables": [C], "mode": "rebaseline"})
        assert str(baseline.state) == "success", task_states(baseline)
        _cdc_green(pipeline)
    _cdc_green(pipeline)
    assert set(_phases(pipeline).values()) == {"Ready"}
    _equal(database, replica, [A, B, C, E])

    # ---- 2. table d added to the config: published and baselined alone
    _create(database, D)
    added = make_pipeline_dags([A, B, C, D, E], destinations=REPLICA)
    with writer(database, [A, B, C, D, E], 5):
        setup = added.run("setup")
        assert str(setup.state) == "success", task_states(setup)
        assert triggered_baselines(added)[-1][1] == {"tables": [D], "mode": "rebaseline"}
        assert _phases(added) == {A: "Ready", B: "Ready", C: "Ready", D: "Init", E: "Ready"}
        assert _published(database, added) == [A, B, C, D, E]
        baseline = added.run("baseline", run_conf={"tables": [D], "mode": "rebaseline"})
        assert str(baseline.state) == "success", task_states(baseline)
        _cdc_green(added)
    _cdc_green(added)
    assert set(_phases(added).values()) == {"Ready"}
    assert _lineage(added, A) == lineage_a, "a was not baselined again"
    _equal(database, replica, [A, B, C, D, E])

    # ---- 3. b and e taken out of the config
    taken = make_pipeline_dags([A, C, D], destinations=REPLICA)
    with writer(database, [A, B, C, D, E], 6) as w:
        w.stop_writing(B)
        w.stop_writing(E)
        _write(database, B, 3)  # in the slot, before setup takes them out of the publication
        _write(database, E, 3)
        last_b = rows(database, B)
        setup = taken.run("setup")
        assert str(setup.state) == "success", task_states(setup)
        assert _published(database, taken) == [A, C, D]
        assert set(taken.state().tables) == {A, B, C, D, E}, "their state stays"
        # a table still in the config is refused (and so is a hostile name): nothing is dropped
        for wrong in ([A], ["public.a; DROP TABLE b"]):
            conf = {"confirm": taken.config.name, "tables": wrong, "drop_tables": True}
            refused = taken.run("teardown", run_conf=conf)
            assert task_states(refused).get("check_confirmation") == "failed", (wrong, task_states(refused))
            assert task_states(refused).get("teardown_tables") == "upstream_failed"
        # e torn down before cdc read its last changes, its replica table dropped
        conf = {"confirm": taken.config.name, "tables": [E], "drop_tables": True}
        teardown = taken.run("teardown", run_conf=conf)
        assert task_states(teardown) == {
            "check_confirmation": "success",
            "teardown_tables": "success",
            "drop_slot": "skipped",
            "drop_publication": "skipped",
            "delete_state": "skipped",
        }, task_states(teardown)
        assert set(taken.state().tables) == {A, B, C, D} and not _in_replica(replica, E)
        marks = replica.execute("SELECT count(*) FROM pgsync.watermarks WHERE table_key = %s", (E,))
        assert marks == [(0,)], "its watermark row went with it"
        _write(database, B, 3, first=910_000)  # after setup: not captured
        _cdc_green(taken)
    _cdc_green(taken)
    said = printed()
    assert "change(s) of table public.e left out" in said and "does not follow it" in said
    assert f"param 'tables': table public.a is still in pipeline {taken.config.name!r}'s config" in said
    assert taken.slot_exists() and taken.publication_exists()
    assert _phases(taken) == dict.fromkeys([A, B, C, D], "Ready")
    assert rows(replica, B) == last_b, "b's captured changes applied, none after setup took it out"
    _equal(database, replica, [A, C, D])

    # b torn down, its replica table kept (drop_tables given: dag.test() runs every task in this
    # process, where a run's conf stays in the DAG's params for the next run)
    keep = {"confirm": taken.config.name, "tables": [B], "drop_tables": False}
    teardown = taken.run("teardown", run_conf=keep)
    assert task_states(teardown)["teardown_tables"] == "success", task_states(teardown)
    again = taken.run("teardown", run_conf=keep)
    assert task_states(again)["teardown_tables"] == "success", "a repeated teardown changes nothing"
    assert set(taken.state().tables) == {A, C, D} and rows(replica, B) == last_b
    with writer(database, [A, C, D], 7):
        _cdc_green(taken)
    _cdc_green(taken)
    _equal(database, replica, [A, C, D])
    assert _lineage(taken, A) == lineage_a
    status = collect_pipeline(taken.config, now=datetime.now(UTC))
    assert [r.table for r in status.tables] == [A, C, D]
