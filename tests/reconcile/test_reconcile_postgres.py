"""PgReconcileOperator against a PostgreSQL replica while a writer keeps writing to the source
and capture and apply keep running: an equal table reports equal; a row deleted, one changed
and one added by hand in the replica are found; a table without a key compares as a multiset."""

from __future__ import annotations

import inspect

import pytest

from airflow_provider_pgsync.errors import ReconcileError
from airflow_provider_pgsync.hooks.reconcile_pg import PgSide, open_source_snapshot
from airflow_provider_pgsync.operators.backfill import PgBackfillOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.operators.reconcile import PgReconcileOperator
from airflow_provider_pgsync.reconcile.canonical import md5_hex, row_text
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.phases import DataSync, Ready
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline, Pipeline, wait_for
from tests.conftest import Database
from tests.reconcile.conftest import RecordingTI, apply_into, looping, wait_for_repair, writer
from tests.support.replica import apply_all, copy_base, empty_capture_baseline, exported_snapshot, rows

DDL = [
    "CREATE TABLE items (id bigint PRIMARY KEY, v text, n numeric(10,2), at timestamptz, f float8, a int[])",
    "CREATE TABLE bag (k text, n int)",
    "ALTER TABLE bag REPLICA IDENTITY FULL",
]
TABLES = ["public.items", "public.bag"]
REPAIR = "backfill" if "backfill_keys" in inspect.signature(PgBackfillOperator).parameters else "none"
"""``backfill`` once the repair branch's ``PgBackfillOperator(backfill_keys=...)`` is merged."""


def _ready(pipeline: Pipeline, database: Database, replica: Database) -> None:
    """Both tables baselined empty into the replica, filled, captured and applied: Ready and equal."""
    for table in TABLES:
        empty_capture_baseline(pipeline, database, table)
    database.execute(
        "INSERT INTO items SELECT g, 'v' || g, g / 3.0,"
        " '2024-01-01 00:00+00'::timestamptz + g * interval '1 s', g / 7.0, ARRAY[g, NULL]"
        " FROM generate_series(1, 3000) g"
    )
    database.execute(
        "INSERT INTO bag SELECT 'k' || mod(g, 40), mod(g, 3) FROM generate_series(1, 400) g"
    )
    pipeline.capture_until_idle()
    apply_all(pipeline, replica)
    for table in TABLES:
        assert rows(replica, table) == rows(database, table)


def _operator(pipeline: Pipeline, replica_conn_id: str, **kwargs: object) -> PgReconcileOperator:
    return PgReconcileOperator(
        task_id="reconcile",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        destinations=[{"kind": "postgres", "conn_id": replica_conn_id, "name": "replica"}],
        postgres_conn_id=pipeline.hook.postgres_conn_id,
        state_backend="postgres",
        wait_timeout=120,
        poll_seconds=0.2,
        **kwargs,  # type: ignore[arg-type]
    )


def test_differences_are_found_exactly_while_a_writer_runs(
    make_pipeline: MakePipeline, database: Database, replica: Database, replica_conn_id: str
) -> None:
    pipeline = make_pipeline(DDL, TABLES)
    _ready(pipeline, database, replica)

    def cdc() -> None:
        pipeline.capture()
        apply_into(pipeline, replica)

    with (
        writer(database, "items", first=100, last=2999, new_from=10_000) as written,
        looping(cdc) as loop,
    ):
        wait_for("the writer's first transactions", lambda: written.done > 5)
        ti = RecordingTI()
        result = _operator(pipeline, replica_conn_id).execute({"ti": ti})  # type: ignore[arg-type]
        assert [(t["table"], t["status"]) for t in result["tables"]] == [
            ("public.bag", "equal"),
            ("public.items", "equal"),
        ]
        assert ti.xcom["result"] == result
        items = result["tables"][1]
        assert (
            items["source_rows"] > 2000 and items["missing"] == items["extra"] == items["different"] == 0
        )

        # by hand in the replica: keys the writer never touches
        replica.execute("DELETE FROM items WHERE id = 5")
        replica.execute("UPDATE items SET v = 'edited' WHERE id = 6")
        replica.execute("INSERT INTO items (id, v) VALUES (900000, 'stray')")
        replica.execute("DELETE FROM bag WHERE ctid = (SELECT min(ctid) FROM bag WHERE k = 'k7')")
        ti = RecordingTI()
        with pytest.raises(ReconcileError) as failed:
            _operator(pipeline, replica_conn_id, sample_size=5, repair=REPAIR).execute({"ti": ti})  # type: ignore[arg-type]
        found = {t["table"]: t for t in ti.xcom["result"]["tables"]}
        items = found["public.items"]
        counts = (items["status"], items["missing"], items["extra"], items["different"])
        assert counts == ("different", 1, 1, 1)
        assert items["samples"] == {
            "missing": [{"id": "5"}],
            "extra": [{"id": "900000"}],
            "different": [{"id": "6"}],
        }
        bag = found["public.bag"]
        assert (bag["status"], bag["missing"], bag["extra"], bag["different"]) == ("different", 1, 0, 0)
        assert bag["samples"]["missing"][0]["k"] == "k7"
        message = str(failed.value)
        assert "public.items in replica: 1 missing, 1 extra, 1 different" in message
        assert "public.bag in replica" in message
        if REPAIR == "none":
            assert items["repair"] == bag["repair"] == "none" and "repair: backfill" in message
        else:  # the staged backfills of exactly those keys, written by the next apply, repair it
            assert items["repair"] == bag["repair"] == "staged", found
            assert "a backfill of these keys is staged" in message
            for table in TABLES:
                wait_for_repair(pipeline, table)
            repaired = _operator(pipeline, replica_conn_id).execute({"ti": RecordingTI()})  # type: ignore[arg-type]
            assert [t["status"] for t in repaired["tables"]] == ["equal", "equal"], repaired
        runs_during = loop.runs
    assert written.done > 10 and runs_during > 1


def test_the_servers_key_text_is_the_one_left_out_keys_are_written_in(database: Database) -> None:
    database.execute("CREATE TABLE odd (a text, b int, c timestamptz, PRIMARY KEY (a, b))")
    database.execute(
        "INSERT INTO odd VALUES ('é,1:x', 1, '2024-01-01 10:00+02'), ('', 2, NULL), ('N', 3, 'infinity')"
    )
    with database.connect() as conn:
        open_source_snapshot(conn, [TableRef.parse("public.odd")])
        side = PgSide(conn, TableRef.parse("public.odd"), ["a", "b", "c"], ["a", "b"], [], where="test")
        found = side.rows(0, [""])
        left_out = [row_text(["", "2"])]
        left = PgSide(
            conn, TableRef.parse("public.odd"), ["a", "b", "c"], ["a", "b"], left_out, where="t"
        )
        rest = left.rows(0, [""])
    assert sorted(r.key for r in found) == sorted(
        [row_text(["é,1:x", "1"]), row_text(["", "2"]), row_text(["N", "3"])]
    )
    by_key = {r.key: r.row_md5 for r in found}
    assert by_key[row_text(["", "2"])] == md5_hex(row_text(["", "2", None]))
    assert by_key[row_text(["é,1:x", "1"])] == md5_hex(
        row_text(["é,1:x", "1", "2024-01-01 08:00:00+00"])
    )
    assert sorted(r.key for r in rest) == sorted([row_text(["é,1:x", "1"]), row_text(["N", "3"])])


def test_a_table_without_a_key_stays_equal_after_its_hand_off(
    make_pipeline: MakePipeline, database: Database, replica: Database, replica_conn_id: str
) -> None:
    pipeline = make_pipeline(DDL[1:], ["public.bag"])
    database.execute("INSERT INTO bag SELECT 'k' || mod(g, 4), 1 FROM generate_series(1, 20) g")
    source = database.connect(autocommit=False)
    source.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    done = exported_snapshot(source)
    pipeline.capture_until_idle()
    replica.execute("CREATE TABLE bag (k text, n int)")
    copy_base(source, replica, "public.bag")
    source.close()
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase("public.bag", DataSync()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase("public.bag", done))
    apply_into(pipeline, replica)  # the hand-off: Ready
    database.execute("INSERT INTO bag VALUES ('later', 2)")
    pipeline.capture_until_idle()
    apply_into(pipeline, replica)
    ti = RecordingTI()

    def cdc() -> None:
        pipeline.capture()
        apply_into(pipeline, replica)

    with looping(cdc):  # a difference would raise ReconcileError
        _operator(pipeline, replica_conn_id).execute({"ti": ti})  # type: ignore[arg-type]
    [bag] = ti.xcom["result"]["tables"]
    assert (bag["status"], bag["extra"]) == ("equal", 0), bag  # before the hand-off's mark: 20 extra


@pytest.mark.slow
@pytest.mark.usefixtures("spark_drivers")  # its baselines are Spark jobs (tests/tiers.py)
def test_reconcile_after_each_kind_of_ddl_and_after_a_rebaseline(
    make_pipeline: MakePipeline,
    database: Database,
    replica: Database,
    replica_conn_id: str,
    source_conn_id: str,
) -> None:
    """A column added and one dropped (the replica follows both), then the table rebaselined
    (Spark) over a difference made by hand: reconcile compares the columns the table has now,
    finds a difference in the added column, and finds none once the rebaseline replaced it."""
    pipeline = make_pipeline(DDL[:1], ["public.items"])
    empty_capture_baseline(pipeline, database, "public.items")
    database.execute(
        "INSERT INTO items (id, v, f) SELECT g, 'v' || g, g / 7.0 FROM generate_series(1, 500) g"
    )
    pipeline.capture_until_idle()
    apply_into(pipeline, replica)

    database.execute("ALTER TABLE items ADD COLUMN note text DEFAULT 'n'")
    database.execute("ALTER TABLE items DROP COLUMN f")
    database.execute("UPDATE items SET note = 'changed ' || id WHERE id %% 10 = 0")
    database.execute("INSERT INTO items (id, v, note) VALUES (501, 'after the ddl', 'new')")
    pipeline.capture_until_idle()
    apply_into(pipeline, replica)
    assert rows(replica, "public.items") == rows(database, "public.items")

    def cdc() -> None:  # reconcile waits for the destination to reach its source snapshot
        pipeline.capture()
        apply_into(pipeline, replica)

    with looping(cdc):
        equal = _operator(pipeline, replica_conn_id).execute({"ti": RecordingTI()})  # type: ignore[arg-type]
    assert [(t["table"], t["status"], t["source_rows"]) for t in equal["tables"]] == [
        ("public.items", "equal", 501)
    ]

    replica.execute("UPDATE items SET note = 'edited' WHERE id = 7")  # the added column only
    ti = RecordingTI()
    with looping(cdc), pytest.raises(ReconcileError) as failed:
        _operator(pipeline, replica_conn_id, sample_size=5).execute({"ti": ti})  # type: ignore[arg-type]
    assert "public.items in replica: 0 missing, 0 extra, 1 different" in str(failed.value)
    [items] = ti.xcom["result"]["tables"]
    assert items["samples"]["different"] == [{"id": "7"}]

    # the rebaseline replaces the replica's table from a new snapshot: the edit is gone
    PgBaselineOperator(
        task_id="baseline",
        pipeline=pipeline.name,
        table="public.items",
        postgres_conn_id=source_conn_id,
        destinations=[{"kind": "postgres", "conn_id": replica_conn_id, "name": "replica"}],
        state_backend="postgres",
        rebaseline=True,
    ).execute({"ti": None})  # type: ignore[typeddict-item]
    database.execute("UPDATE items SET v = 'after the rebaseline' WHERE id <= 3")
    pipeline.capture_until_idle()
    apply_into(pipeline, replica)
    assert pipeline.state().table("public.items").destination("replica").phase == Ready()
    with looping(cdc):
        again = _operator(pipeline, replica_conn_id).execute({"ti": RecordingTI()})  # type: ignore[arg-type]
    assert [(t["status"], t["source_rows"], t["different"]) for t in again["tables"]] == [("equal", 501, 0)]
