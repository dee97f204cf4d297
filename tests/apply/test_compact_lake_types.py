"""Every type of DESIGN §6 through the lake's compaction (merged and written in Arrow): the
view reads the same rows before and after a first compaction (the baseline's base laid out
by key hash) and after a second one (the base's files and the bucketed lake segments read
back by pyarrow), the ancient and infinite dates and timestamps included (the row of
``ANCIENT_ID`` stays in the base: apply does not carry it)."""

# The statements are built from the module's constants and the table's column names.
# ruff: noqa: S608

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_provider_pgsync.state.phases import Ready
from tests.apply.lake import apply_lake, baseline, lake_session
from tests.capture.conftest import MakePipeline
from tests.conftest import Database
from tests.support.all_types import ANCIENT_ID, create_all_types
from tests.support.replica import column_names

TABLE, VIEW = "public.all_types", "pgsync.public__all_types"


def _rows(names: list[str]) -> str:
    """Every row of the view as text, maps by their sorted entries (their order is no value)."""
    shown = [f"array_sort(map_entries(`{n}`))" if n == "c_hstore" else f"`{n}`" for n in names]
    return f"SELECT id, to_json(struct({', '.join(shown)})) FROM {VIEW} ORDER BY id"


def _compacted(result: list[dict[str, Any]]) -> dict[str, Any]:
    (table,) = result
    assert "error" not in table, table
    return table


def test_compaction_keeps_every_type(
    make_pipeline: MakePipeline, database: Database, source_conn_id: str, lake: Path
) -> None:
    create_all_types(database)
    pipeline = make_pipeline([], [TABLE])
    baseline(pipeline, source_conn_id, [TABLE])
    database.transaction(
        f"CREATE TEMP TABLE copied AS SELECT * FROM all_types WHERE id <> {ANCIENT_ID}",
        "UPDATE copied SET id = id + 100",
        "INSERT INTO all_types SELECT * FROM copied",
        f"DELETE FROM all_types WHERE id = (SELECT min(id) FROM all_types WHERE id <> {ANCIENT_ID})",
    )
    pipeline.capture_until_idle()
    assert apply_lake(pipeline, lake) == {TABLE: Ready()}
    query = _rows([n for n in column_names(database, TABLE) if n != "id"])
    before, first, after_first = lake_session(lake, [{"sql": query}, {"compact": [TABLE]}, {"sql": query}])
    assert len(before) > 2 and after_first == before
    assert _compacted(first)["buckets_rewritten"] == _compacted(first)["buckets"]

    database.transaction("UPDATE all_types SET id = -id WHERE id > 100")  # a key change: old keys go
    pipeline.capture_until_idle()
    assert apply_lake(pipeline, lake) == {TABLE: Ready()}
    on_read, second, after_second = lake_session(lake, [{"sql": query}, {"compact": [TABLE]}, {"sql": query}])
    assert after_second == on_read != before
    assert sorted(r[0] for r in on_read) == sorted(-r[0] if r[0] > 100 else r[0] for r in before)
    assert _compacted(second)["segments"] > 0
    # apply wrote the segments by the laid-out base's buckets: each bucket's task read its own
    assert _compacted(second)["merged_by"] == "segments"
