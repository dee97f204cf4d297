"""A backfill of a key list into the lake, end to end: real PostgreSQL, a real baseline (Spark),
apply through ``PgApplyOperator``, the view read back by Spark.

The lake's base loses a row, gets one changed and one the source never had (rewritten by hand);
a backfill of those three keys, taken while a writer keeps writing (one of the keys too, and a
transaction on it open across the snapshot), then apply, leave the view equal to the source. A
table without a key is damaged the same way and repaired by a backfill of whole rows, as a
multiset.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import Ready
from tests.apply.lake import baseline, cdc_into_lake, lake_session, sort_rows, view_query
from tests.capture.conftest import MakePipeline
from tests.conftest import Database
from tests.support.backfill import backfill_keys, writer
from tests.support.replica import rows

TABLE = "public.items"
EVENTS = "public.events"


def rewrite_base(lake: Path, table: str, change: Callable[[pa.Table], pa.Table]) -> None:
    """Rewrite a lake table's base by hand, as ``change`` makes it."""
    files = LakeFiles(LakeDestination.from_config({"warehouse": str(lake)}))
    meta = files.current(TableRef.parse(table))
    assert meta is not None
    folder = Path(files.path(meta.base))
    parts = sorted(folder.glob("*.parquet"))
    changed = change(pa.concat_tables([pq.read_table(p) for p in parts]))
    for part in parts:
        part.unlink()
    pq.write_table(changed, folder / parts[0].name)


def damage_items(base: pa.Table) -> pa.Table:
    """Row 10 gone, row 20 changed, row 1000 added."""
    ids = base.column("id")
    kept = base.filter(pc.and_(pc.not_equal(ids, 10), pc.not_equal(ids, 20)))
    changed = base.filter(pc.equal(ids, 20)).set_column(
        1, "name", pa.array(["damaged"], base.schema.field("name").type)
    )
    extra = pa.table({"id": [1000], "name": ["extra"], "n": [0]}, schema=base.schema)
    return pa.concat_tables([kept, changed, extra])


def damage_events(base: pa.Table) -> pa.Table:
    """One of the two rows (NULL, 1) gone, (b, 50) changed to (b, 99), (x, 0) added."""
    rows = base.to_pylist()
    rows.remove({"kind": None, "at": 1})
    rows[rows.index({"kind": "b", "at": 50})] = {"kind": "b", "at": 99}
    return pa.Table.from_pylist([*rows, {"kind": "x", "at": 0}], schema=base.schema)


@pytest.mark.slow
def test_a_key_backfill_repairs_the_lake_under_writes(
    make_pipeline: MakePipeline, database: Database, source_conn_id: str, lake: Path
) -> None:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text, n int)")
    database.execute("INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 100) g")
    database.execute("CREATE TABLE events (kind text, at int)")
    database.execute("ALTER TABLE events REPLICA IDENTITY FULL")
    database.execute("INSERT INTO events SELECT chr(97 + mod(g, 5)), mod(g, 7) FROM generate_series(1, 60) g")
    database.execute("INSERT INTO events VALUES (NULL, 1), (NULL, 1), ('b', 50)")
    pipeline = make_pipeline([], [TABLE, EVENTS])
    baseline(pipeline, source_conn_id, [TABLE, EVENTS])
    cdc_into_lake(pipeline, source_conn_id, lake)
    assert pipeline.state().table(TABLE).phase == Ready() and pipeline.state().table(EVENTS).phase == Ready()
    rewrite_base(lake, TABLE, damage_items)
    rewrite_base(lake, EVENTS, damage_events)
    rows_of_events = [{"kind": None, "at": "1"}, {"kind": "b", "at": "50"}, {"kind": "b", "at": "99"}]

    with writer(database, touched=20) as writes:
        with psycopg.connect(database.conninfo) as open_tx:  # in the snapshot's xip, committed after it
            open_tx.execute("UPDATE items SET name = 'open tx' WHERE id = 20")
            result = backfill_keys(
                pipeline, source_conn_id, [{"id": "10"}, {"id": "20"}, {"id": "1000"}], [{"kind": "lake"}]
            )
            open_tx.commit()
        assert (result["keys"], result["rows"], result["absent"]) == (3, 2, 1)
        staged = Path(result["staged"]["lake"])
        assert (staged / "rows.parquet").is_file() and (staged / "_absent.parquet").is_file()
        events = backfill_keys(
            pipeline,
            source_conn_id,
            [*rows_of_events, {"kind": "x", "at": "0"}],
            [{"kind": "lake"}],
            table=EVENTS,
        )
        assert (events["rows"], events["absent"]) == (3, 2)
        database.execute("INSERT INTO events VALUES ('a', 1), ('y', 5)")  # the stream goes on
        cdc_into_lake(pipeline, source_conn_id, lake)  # the backfill is applied here, the writer still going
        assert pipeline.state().table(TABLE).backfill is None, "the backfill was not applied"
        assert pipeline.state().table(EVENTS).backfill is None, "the backfill of events was not applied"
        assert not staged.exists(), "the staged rows were not removed after apply"
        cdc_into_lake(pipeline, source_conn_id, lake)
    assert writes.done > 10, "the writer hardly wrote"
    cdc_into_lake(pipeline, source_conn_id, lake)

    found, found_events = lake_session(lake, [{"sql": view_query(database, t)} for t in (TABLE, EVENTS)])
    assert sort_rows(found) == rows(database, TABLE)
    assert sort_rows(found_events) == rows(database, EVENTS)
