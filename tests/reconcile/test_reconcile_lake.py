"""PgReconcileOperator against the lake while a writer keeps writing to the source and capture
and apply keep running: real baselines and reconciliation jobs (spark-submit), the lake's base
edited by hand (a row deleted, one changed, one added; one copy of a duplicated row of a table
without a key removed) and found."""

from __future__ import annotations

import inspect
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.errors import ApplyFailedError, ReconcileError
from airflow_provider_pgsync.operators.backfill import PgBackfillOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.operators.reconcile import PgReconcileOperator
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.phases import Init, Ready
from tests.apply.lake import apply_lake, apply_lake_operator, baseline
from tests.capture.conftest import MakePipeline, Pipeline, wait_for
from tests.conftest import Database
from tests.reconcile.conftest import RecordingTI, looping, wait_for_repair, writer

DDL = [
    "CREATE TABLE items (id bigint PRIMARY KEY, v text, n numeric(10,2), at timestamptz, f float8,"
    " d date, b bytea, j jsonb)",
    # arrays compared too, in a table not edited: the key-list backfill of the lake cannot merge
    # a table with a list column yet (pyarrow's join), see the report
    "CREATE TABLE lists (id int PRIMARY KEY, a int[], t text[])",
    "INSERT INTO lists SELECT g, ARRAY[g, NULL, -g], ARRAY['x' || g, NULL] FROM generate_series(1, 300) g",
    "CREATE TABLE bag (k text, n int)",
    "ALTER TABLE bag REPLICA IDENTITY FULL",
    # before the slot: rows only the baselines copy (see the report: a table without a key whose
    # captured changes the baseline snapshot all saw gets them applied again once Ready)
    "INSERT INTO items SELECT g, 'v' || g, g / 3.0, '2024-01-01 00:00+00'::timestamptz"
    " + g * interval '1.5 s', g / 7.0, DATE '2024-01-01' + g,"
    " decode(md5(g::text), 'hex'), jsonb_build_object('g', g) FROM generate_series(1, 2000) g",
    "INSERT INTO bag SELECT 'k' || mod(g, 40), mod(g, 3) FROM generate_series(1, 400) g",
]
TABLES = ["public.items", "public.bag", "public.lists"]
REPAIR = "backfill" if "backfill_keys" in inspect.signature(PgBackfillOperator).parameters else "none"
"""``backfill`` once the repair branch's ``PgBackfillOperator(backfill_keys=...)`` is merged."""


def _operator(pipeline: Pipeline, lake: Path, **kwargs: object) -> PgReconcileOperator:
    return PgReconcileOperator(
        task_id="reconcile",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        destinations=[{"kind": "lake", "warehouse": str(lake)}],
        postgres_conn_id=pipeline.hook.postgres_conn_id,
        state_backend="postgres",
        wait_timeout=300,
        poll_seconds=0.2,
        **kwargs,  # type: ignore[arg-type]
    )


def _cdc(pipeline: Pipeline, lake: Path, source_conn_id: str) -> None:
    """One cdc run as the DAG's: capture, then apply recording phases and backfills."""
    pipeline.capture()
    apply_lake_operator(pipeline, source_conn_id, lake)


def _edit_base(lake: Path, table: str, edit: pa.Table) -> None:
    """Rewrite the lake table's base files by hand: ``edit(rows)`` for each file."""
    files = LakeFiles(LakeDestination.from_config({"warehouse": str(lake)}))
    meta = files.current(TableRef.parse(table))
    assert meta is not None
    folder = Path(files.path(meta.base))
    for path in sorted(folder.glob("*.parquet")):
        rows = pq.read_table(path)
        pq.write_table(edit(rows), path)  # type: ignore[operator]
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old file


def test_differences_in_the_lake_are_found_while_a_writer_runs(
    make_pipeline: MakePipeline, database: Database, source_conn_id: str, lake: Path
) -> None:
    pipeline = make_pipeline(DDL, TABLES)
    baseline(pipeline, source_conn_id, TABLES)
    # a change after the baselines: the state learns bag's columns (the repair's backfill needs them)
    database.execute("INSERT INTO bag VALUES ('late', 9)")
    pipeline.capture_until_idle()
    apply_lake(pipeline, lake)

    def cdc() -> None:
        _cdc(pipeline, lake, source_conn_id)

    with writer(database, "items", first=100, last=1999, new_from=10_000) as written, looping(cdc) as loop:
        wait_for("the writer's first transactions", lambda: written.done > 5)
        result = _operator(pipeline, lake).execute({"ti": RecordingTI()})  # type: ignore[arg-type]
        assert [(t["table"], t["status"]) for t in result["tables"]] == [
            ("public.bag", "equal"),
            ("public.items", "equal"),
            ("public.lists", "equal"),
        ], result
        assert result["tables"][1]["source_rows"] > 1500

        # by hand in the lake's base: keys the writer never touches
        def edit_items(rows: pa.Table) -> pa.Table:
            ids = rows.column("id")
            changed = pc.if_else(pc.equal(ids, 6), pa.scalar("edited"), rows.column("v"))
            rows = rows.set_column(rows.schema.get_field_index("v"), "v", changed)
            rows = rows.filter(pc.not_equal(ids, 5))
            if pc.any(pc.equal(ids, 7)).as_py():
                stray = rows.filter(pc.equal(rows.column("id"), 7))
                stray = stray.set_column(0, "id", pa.array([900000], rows.schema.field("id").type))
                rows = pa.concat_tables([rows, stray])
            return rows

        def edit_bag(rows: pa.Table) -> pa.Table:
            positions = pc.indices_nonzero(pc.equal(rows.column("k"), "k7")).to_pylist()
            if not positions:
                return rows
            keep = [i for i in range(rows.num_rows) if i != positions[0]]
            return rows.take(pa.array(keep))

        _edit_base(lake, "public.items", edit_items)  # type: ignore[arg-type]
        _edit_base(lake, "public.bag", edit_bag)  # type: ignore[arg-type]
        ti = RecordingTI()
        with pytest.raises(ReconcileError) as failed:
            _operator(pipeline, lake, sample_size=5, repair=REPAIR).execute({"ti": ti})  # type: ignore[arg-type]
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
        assert bag["samples"]["missing"] == [{"k": "k7", "n": "1"}]
        assert "public.items in lake: 1 missing, 1 extra, 1 different" in str(failed.value)
        if REPAIR == "backfill":  # the staged backfills of exactly those keys, written by the next apply
            assert items["repair"] == bag["repair"] == "staged", found
            for table in TABLES[:2]:
                wait_for_repair(pipeline, table)
            repaired = _operator(pipeline, lake).execute({"ti": RecordingTI()})  # type: ignore[arg-type]
            assert [t["status"] for t in repaired["tables"]] == ["equal", "equal", "equal"], repaired
        runs_during = loop.runs
    assert written.done > 10 and runs_during > 1


@pytest.mark.slow
def test_the_lake_reconciles_after_each_kind_of_ddl_and_after_a_rebaseline(
    make_pipeline: MakePipeline, database: Database, source_conn_id: str, lake: Path
) -> None:
    """A column added with a default (rows before it hold the default in the source) and one
    dropped right after the baseline: the lake goes back to baseline (it cannot follow either),
    and once rebaselined reconciles equal over the new columns; a value edited by hand in its
    base is found; a rebaseline replaces the base and the lake reconciles equal again."""
    pipeline = make_pipeline(
        [
            "CREATE TABLE items (id bigint PRIMARY KEY, v text, f float8)",
            "INSERT INTO items SELECT g, 'v' || g, g / 7.0 FROM generate_series(1, 300) g",
        ],
        ["public.items"],
    )
    baseline(pipeline, source_conn_id, ["public.items"])
    database.execute("ALTER TABLE items ADD COLUMN note text DEFAULT 'n'")
    database.execute("ALTER TABLE items DROP COLUMN f")
    database.execute("UPDATE items SET note = 'changed ' || id WHERE id %% 10 = 0")
    database.execute("INSERT INTO items (id, v, note) VALUES (301, 'after the ddl', 'new')")
    pipeline.capture_until_idle()

    def cdc() -> None:  # reconcile waits for the lake to reach its source snapshot
        _cdc(pipeline, lake, source_conn_id)

    # the lake cannot follow a dropped column, nor older rows holding the added one's default:
    # the DDL came between the baseline's copy and the first captured change, and is caught there
    with pytest.raises(ApplyFailedError, match=r"public\.items in destination lake went back to Init"):
        cdc()
    sent = pipeline.state().table("public.items").destination("lake").phase
    assert isinstance(sent, Init) and "schema version" in sent.reason, sent  # a pending rebaseline
    _rebaseline(pipeline, source_conn_id)
    cdc()
    assert pipeline.state().table("public.items").destination("lake").phase == Ready()
    with looping(cdc):
        result = _operator(pipeline, lake).execute({"ti": RecordingTI()})  # type: ignore[arg-type]
    assert [(t["status"], t["source_rows"]) for t in result["tables"]] == [("equal", 301)], result

    def edit(rows: pa.Table) -> pa.Table:
        changed = pc.if_else(pc.equal(rows.column("id"), 7), pa.scalar("edited"), rows.column("v"))
        return rows.set_column(rows.schema.get_field_index("v"), "v", changed)

    _edit_base(lake, "public.items", edit)
    ti = RecordingTI()
    with looping(cdc), pytest.raises(ReconcileError):
        _operator(pipeline, lake, sample_size=5).execute({"ti": ti})  # type: ignore[arg-type]
    [items] = ti.xcom["result"]["tables"]
    assert (items["missing"], items["extra"], items["samples"]["different"]) == (0, 0, [{"id": "7"}]), items

    _rebaseline(pipeline, source_conn_id)  # a new base replaces the edited one
    database.execute("UPDATE items SET v = 'after the rebaseline' WHERE id <= 3")
    cdc()
    assert pipeline.state().table("public.items").destination("lake").phase == Ready()
    with looping(cdc):
        again = _operator(pipeline, lake).execute({"ti": RecordingTI()})  # type: ignore[arg-type]
    assert [(t["status"], t["source_rows"], t["different"]) for t in again["tables"]] == [("equal", 301, 0)]


def _rebaseline(pipeline: Pipeline, source_conn_id: str) -> None:
    PgBaselineOperator(
        task_id="baseline",
        pipeline=pipeline.name,
        table="public.items",
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
        rebaseline=True,
    ).execute({"ti": None})  # type: ignore[typeddict-item]
