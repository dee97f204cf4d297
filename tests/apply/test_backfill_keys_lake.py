"""A backfill of a key list into the lake, end to end: real PostgreSQL, a real baseline (Spark),
apply through ``PgApplyOperator``, the view read back by Spark.

The lake's base loses a row, gets one changed and one the source never had (rewritten by hand);
a backfill of those three keys, taken while a writer keeps writing (one of the keys too, and a
transaction on it open across the snapshot), then apply, leave the view equal to the source.
"""

from __future__ import annotations

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
from tests.apply.lake import baseline, lake_session, sort_rows, view_query
from tests.apply.test_apply_postgres import rows
from tests.apply.test_backfill_lake import _cdc
from tests.capture.conftest import MakePipeline
from tests.conftest import Database
from tests.operators.test_backfill_keys import Writer, backfill_keys

TABLE = "public.items"


def damage_base(lake: Path) -> None:
    """Rewrite the lake table's base by hand: row 10 gone, row 20 changed, row 1000 added."""
    files = LakeFiles(LakeDestination.from_config({"warehouse": str(lake)}))
    meta = files.current(TableRef.parse(TABLE))
    assert meta is not None
    folder = Path(files.path(meta.base))
    parts = sorted(folder.glob("*.parquet"))
    base = pa.concat_tables([pq.read_table(p) for p in parts])
    ids = base.column("id")
    kept = base.filter(pc.and_(pc.not_equal(ids, 10), pc.not_equal(ids, 20)))
    changed = base.filter(pc.equal(ids, 20)).set_column(
        1, "name", pa.array(["damaged"], base.schema.field("name").type)
    )
    extra = pa.table({"id": [1000], "name": ["extra"], "n": [0]}, schema=base.schema)
    for part in parts:
        part.unlink()
    pq.write_table(pa.concat_tables([kept, changed, extra]), folder / parts[0].name)


@pytest.mark.slow
def test_a_key_backfill_repairs_the_lake_under_writes(
    make_pipeline: MakePipeline, database: Database, source_conn_id: str, lake: Path
) -> None:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text, n int)")
    database.execute("INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 100) g")
    pipeline = make_pipeline([], [TABLE])
    baseline(pipeline, source_conn_id, [TABLE])
    _cdc(pipeline, source_conn_id, lake)
    assert pipeline.state().table(TABLE).phase == Ready()
    damage_base(lake)

    with Writer(database, touched=20) as writer:
        with psycopg.connect(database.conninfo) as open_tx:  # in the snapshot's xip, committed after it
            open_tx.execute("UPDATE items SET name = 'open tx' WHERE id = 20")
            result = backfill_keys(
                pipeline, source_conn_id, [{"id": "10"}, {"id": "20"}, {"id": "1000"}], [{"kind": "lake"}]
            )
            open_tx.commit()
        assert (result["keys"], result["rows"], result["absent"]) == (3, 2, 1)
        staged = Path(result["staged"]["lake"])
        assert (staged / "rows.parquet").is_file() and (staged / "_absent.parquet").is_file()
        _cdc(pipeline, source_conn_id, lake)  # the backfill is applied here, the writer still going
        assert pipeline.state().table(TABLE).backfill is None, "the backfill was not applied"
        assert not staged.exists(), "the staged rows were not removed after apply"
        _cdc(pipeline, source_conn_id, lake)
    assert writer.writes > 10, "the writer hardly wrote"
    _cdc(pipeline, source_conn_id, lake)

    (found,) = lake_session(lake, [{"sql": view_query(database, TABLE)}])
    assert sort_rows(found) == rows(database, TABLE)
