"""LakeChanges through the destination kit, without Spark: an empty base made with pyarrow,
and the lake read back by folding base and segments as the view does (latest record per
key, counted rows without a key, TRUNCATE cuts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_pgsync.apply.destination import SchemaAnswer
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_changes import LakeChanges
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.testing.destination_kit import Change, column, run_lifecycle
from tests.support.lake_changes import KEYED, ROWS, TABLE, empty_base, read_lake


def test_keyed_table_through_the_kit(tmp_path: Path) -> None:
    big = "x" * 9000
    changes = [
        Change("I", {"id": "1", "note": "a", "doc": big}),
        Change("I", {"id": "2", "note": "b", "doc": "short"}),
        Change("U", {"id": "1", "note": "a2", "doc": None}, unchanged=["doc"]),
        Change("U", {"id": "3", "note": "moved", "doc": None}, old_key={"id": "1"}, unchanged=["doc"]),
        Change("U", {"id": "3", "note": "again", "doc": None}, unchanged=["doc"]),
        Change("D", {"id": "2"}),
        Change("I", {"id": "4", "note": None, "doc": None}),
        Change("U", {"id": "5", "note": "m", "doc": None}, old_key={"id": "3"}, unchanged=["doc"]),
        Change("T"),
        Change("I", {"id": "6", "note": "after", "doc": "d"}),
        Change("I", {"id": "7", "note": "x", "doc": big}),
        Change("U", {"id": "8", "note": "y", "doc": None}, old_key={"id": "7"}, unchanged=["doc"]),
    ]
    for batch_size in (1, 3, 100):
        lake = empty_base(tmp_path / str(batch_size), KEYED, ("id",))
        final = run_lifecycle(
            LakeChanges(lake),
            TABLE,
            KEYED,
            changes,
            read_rows=lambda _, lake=lake: read_lake(lake, ["id"]),  # type: ignore[misc]
            batch_size=batch_size,
        )
        assert {r["id"]: r["doc"] for r in final} == {"6": "d", "8": big}


def test_row_identity_table_counts_duplicates(tmp_path: Path) -> None:
    lake = empty_base(tmp_path, ROWS, ())
    changes = [
        Change("I", {"kind": "a", "n": "1"}),
        Change("I", {"kind": "a", "n": "1"}),
        Change("I", {"kind": "b", "n": None}),
        Change("D", {"kind": "a", "n": "1"}),
        Change("U", {"kind": "b", "n": "2"}, old_key={"kind": "b", "n": None}),
    ]
    final = run_lifecycle(LakeChanges(lake), TABLE, ROWS, changes, read_rows=lambda _: read_lake(lake, []))
    assert sorted(r["kind"] for r in final) == ["a", "b"]


def test_an_added_column_continues_and_others_rebaseline(tmp_path: Path) -> None:
    lake = empty_base(tmp_path, KEYED, ("id",))
    added = [*KEYED, column("qty", 20)]
    final = run_lifecycle(
        LakeChanges(lake),
        TABLE,
        KEYED,
        [Change("I", {"id": "1", "note": "a", "doc": "d"})],
        read_rows=lambda _: read_lake(lake, ["id"]),
        new_columns=added,
        changes_after=[Change("U", {"id": "1", "note": "b", "doc": "d", "qty": "7"})],
    )
    assert final == [{"id": "1", "note": "b", "doc": "d", "qty": "7"}]
    destination = LakeChanges(lake)
    destination.open_table(TABLE, KEYED, 0)
    assert destination.schema_changed(TABLE, KEYED, KEYED[:2]) is SchemaAnswer.REBASELINE  # dropped
    assert destination.schema_changed(TABLE, KEYED, [*KEYED, column("tags", 1009)]) is SchemaAnswer.REBASELINE
    changed_type = [KEYED[0], column("note", 23), KEYED[2]]
    assert destination.schema_changed(TABLE, KEYED, changed_type) is SchemaAnswer.REBASELINE


def test_a_table_without_a_base_names_the_remedy(tmp_path: Path) -> None:
    lake = LakeDestination.from_config({"warehouse": str(tmp_path)})
    with pytest.raises(DestinationError, match=r"public\.t has no base.*run its baseline first"):
        LakeChanges(lake).open_table(TABLE, KEYED, 0)


def test_unchanged_toast_of_a_missing_row_fails_naming_table_and_key(tmp_path: Path) -> None:
    """DESIGN rule 6: a value the source kept is never written as NULL, even when the lake lost
    the row to carry it from; nothing of the batch is written."""
    from airflow_provider_pgsync.testing.destination_kit import change_batch

    lake = empty_base(tmp_path, KEYED, ("id",))
    destination = LakeChanges(lake)
    destination.open_table(TABLE, KEYED, 0)
    lost = [Change("U", {"id": "9", "note": "n", "doc": None}, unchanged=["doc"])]
    with pytest.raises(DestinationError, match=r"public\.t has no row with key id=9.*\(doc\).*rebaseline"):
        destination.apply(TABLE, KEYED, change_batch(KEYED, lost, first_lsn=100), (100, 1))
    assert destination.watermark(TABLE) is None
    assert read_lake(lake, ["id"]) == []
