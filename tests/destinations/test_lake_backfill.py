"""LakeChanges' key-list backfill through the destination kit, without Spark (an empty base made
with pyarrow, the lake folded as the view does): staged rows written, absent keys deleted,
touched keys left alone; for a table without a key, each row counted as the snapshot holds it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_pgsync.apply.backfill import TouchedKeys
from airflow_provider_pgsync.destinations.lake_backfill import _without
from airflow_provider_pgsync.destinations.lake_changes import LakeChanges
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.testing.destination_kit import Change, run_backfill_lifecycle
from tests.support.lake_changes import KEYED, ROWS, TABLE, empty_base, read_lake


def test_a_keyed_lake_table_takes_a_key_backfill(tmp_path: Path) -> None:
    lake = empty_base(tmp_path, KEYED, ("id",))
    final = run_backfill_lifecycle(
        LakeChanges(lake),
        TABLE,
        KEYED,
        [Change("I", {"id": str(i), "note": "streamed", "doc": "d"}) for i in range(1, 7)],
        read_rows=lambda _: read_lake(lake, ["id"]),
        staged=[
            {"id": "1", "note": "source", "doc": None},
            {"id": "7", "note": "source", "doc": "x"},
            {"id": "4", "note": "older", "doc": "d"},
        ],
        absent=[{"id": "2"}, {"id": "3"}, {"id": "5"}, {"id": "99"}],
        touched=[{"id": "4"}, {"id": "5"}],
    )
    assert [(r["id"], r["note"]) for r in final] == [
        ("1", "source"),
        ("4", "streamed"),
        ("5", "streamed"),
        ("6", "streamed"),
        ("7", "source"),
    ]


def test_a_lake_table_without_a_key_takes_a_row_backfill_as_a_multiset(tmp_path: Path) -> None:
    lake = empty_base(tmp_path, ROWS, ())
    row = lambda kind, n="1": {"kind": kind, "n": n}  # noqa: E731
    final = run_backfill_lifecycle(
        LakeChanges(lake),
        TABLE,
        ROWS,
        [Change("I", row(kind)) for kind in ("a", "a", "a", "b", "c", "d", "d")]
        + [Change("I", row(None, None)), Change("D", row("c"), old_key=row("c"))],
        read_rows=lambda _: read_lake(lake, []),
        # a: once in the source (3 here); e: twice, missing; b, NULL: not in the source; d: touched
        staged=[row("a"), row("e"), row("e"), row("d")],
        absent=[row("b"), row(None, None), row("zz")],
        touched=[row("d")],
    )
    assert sorted((r["kind"], r["n"]) for r in final) == [
        ("a", "1"),
        ("d", "1"),
        ("d", "1"),
        ("e", "1"),
        ("e", "1"),
    ]


def test_rows_of_the_base_count_too(tmp_path: Path) -> None:
    """The base holds a twice and b once; the backfill makes it a once, b three times."""
    lake = empty_base(tmp_path, ROWS, ())
    meta = LakeFiles(lake).current(TABLE)
    assert meta is not None
    base = pa.table({"kind": ["a", "a", "b", "c"], "n": pa.array([1, 1, 2, 3], pa.int32())})
    pq.write_table(base, f"{meta.base}/part-0.parquet")
    destination = LakeChanges(lake)
    text = lambda kinds, ns: pa.table({"kind": pa.array(kinds), "n": pa.array(ns, pa.string())})  # noqa: E731
    location = destination.stage_backfill(
        TABLE, ROWS, "b1", text(["a", "b", "b", "b"], ["1", "2", "2", "2"]), text(["c"], ["3"])
    )
    none = TouchedKeys(text([], []))
    assert destination.backfill(TABLE, ROWS, location, none, (5, 1)) == 4  # a -1, b +2, c -1
    assert sorted((r["kind"], r["n"]) for r in read_lake(lake, [])) == [
        ("a", "1"),
        ("b", "2"),
        ("b", "2"),
        ("b", "2"),
    ]
    assert destination.watermark(TABLE) == (5, 1)
    assert destination.backfill(TABLE, ROWS, location, none, (5, 2)) == 0, "a second run must change nothing"


def test_rows_of_touched_keys_are_left_out_beside_list_and_struct_columns() -> None:
    """Arrow's joins refuse list and struct columns beside the keys: the rows are matched on
    their keys alone and taken in their order."""
    rows = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int32()),
            "tags": pa.array([[1], None, [2, 3], []], pa.list_(pa.int32())),
            "pair": pa.array([{"a": 1}, {"a": 2}, None, {"a": 4}], pa.struct([("a", pa.int64())])),
        }
    )
    newer = pa.table({"id": pa.array([3, 1, 9], pa.int32())})
    kept = _without(rows, newer, ["id"])
    assert kept.to_pydict() == {"id": [2, 4], "tags": [None, []], "pair": [{"a": 2}, {"a": 4}]}
