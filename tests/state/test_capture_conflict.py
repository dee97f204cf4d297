"""PipelineState.capture_conflict: which writes made between a capture's load and its save the
batch may be recorded over (a rebase), and which mean it must be decoded again."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airflow_provider_pgsync.baseline import moves
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import (
    ColumnInfo,
    DataSync,
    Errored,
    Init,
    PipelineState,
    SchemaChange,
    SegmentInfo,
    SyncDone,
    TableState,
)

ITEMS, OTHER = "public.items", "public.other"
IDS = (ColumnInfo("id", 23, -1, True, attnum=1),)
WIDER = (*IDS, ColumnInfo("x", 25, -1, False, attnum=2))


def _segment(path: str, table: str = ITEMS, lsn: int = 10, version: int = 0) -> SegmentInfo:
    return SegmentInfo(path, table, version, LSN(lsn), LSN(lsn + 5), 5, 6, 3, 64)


def _loaded() -> PipelineState:
    """A state as capture loads it: items known (columns, OID), other never seen by capture."""
    state = PipelineState("p", version=7).with_slot("s", LSN(1))
    state = state.with_table_phase(ITEMS, Init()).with_table_phase(OTHER, Init())
    items = replace(state.table(ITEMS), columns=IDS, relation_id=100)
    state = replace(state, tables={**state.tables, ITEMS: items})
    return state.with_capture(LSN(50), [_segment("old")])


def _batch(loaded: PipelineState) -> tuple[list[SegmentInfo], list[TableState]]:
    """What a capture decoded from ``loaded``: a segment of items, items at a new version."""
    items = loaded.table(ITEMS).with_columns(WIDER)
    assert items.schema_version == 1
    return [_segment("new", lsn=60, version=1)], [items]


def _phase_writes(state: PipelineState) -> PipelineState:
    state = state.with_destination_phase(ITEMS, "lake", DataSync("l1"))
    state = state.with_destination_phase(OTHER, "lake", DataSync("l2"))
    state = state.with_destination_phase(
        OTHER, "lake", Errored("boom", "retry", previous="DataSync"), lineage="l2"
    )
    state = state.with_watermark("lake", "0/40/1").with_destination_watermark(ITEMS, "lake", "0/40/1")
    state = state.with_segments([])  # retention pruned the old segment
    return state.with_table_phase("public.added", Init())


def test_writes_of_baselines_and_applies_are_no_conflict_and_survive_the_rebase() -> None:
    loaded = _loaded()
    segments, tables = _batch(loaded)
    current = replace(_phase_writes(loaded), version=9)
    assert current.capture_conflict(loaded, segments, tables) is None
    rebased = current.with_capture(LSN(70), segments, tables)
    assert rebased.version == 9 and rebased.last_end_lsn == LSN(70)
    assert [s.path for s in rebased.segments] == ["new"]  # the pruned one stays pruned
    assert rebased.table(ITEMS).schema_version == 1 and rebased.table(ITEMS).columns == WIDER
    assert rebased.table(ITEMS).destination("lake").phase == DataSync("l1")
    assert isinstance(rebased.table(OTHER).phase, Errored)
    assert rebased.watermarks == {"lake": "0/40/1"} and "public.added" in rebased.tables
    # the same as if those writes had been saved before capture loaded the state
    serial = replace(_phase_writes(loaded), version=9).with_capture(LSN(70), *_batch(_phase_writes(loaded)))
    assert rebased == serial


def test_the_same_state_is_no_conflict() -> None:
    loaded = _loaded()
    assert loaded.capture_conflict(loaded, *_batch(loaded)) is None


def test_first_columns_of_a_table_the_batch_holds_nothing_of_are_kept() -> None:
    loaded = _loaded()
    segments, tables = _batch(loaded)
    current = moves.started(loaded, OTHER, ["lake"], "l1", restart=False)
    done = SyncDone("snap", LSN(55), 1, 2, (), lineage="l1")
    current = moves.finished(current.with_first_columns(OTHER, IDS), OTHER, ["lake"], done)
    assert current.capture_conflict(loaded, segments, tables) is None
    rebased = current.with_capture(LSN(70), segments, tables)
    assert (rebased.table(OTHER).columns, rebased.table(OTHER).schema_version) == (IDS, 0)


@pytest.mark.parametrize("how", ["columns", "segment"])
def test_first_columns_of_a_table_the_batch_saw_are_a_conflict(how: str) -> None:
    """The batch numbered the table's versions from no columns; the baseline's copy is
    numbered from the columns it recorded: recording both would give a wrong version."""
    loaded = _loaded()
    segments, tables = _batch(loaded)
    if how == "columns":  # capture saw other's first Relation: its first columns are capture's
        tables.append(loaded.table(OTHER).with_columns(WIDER))
    else:
        segments.append(_segment("other", OTHER, lsn=61))
    current = loaded.with_first_columns(OTHER, IDS)
    assert current.capture_conflict(loaded, segments, tables) == (
        f"table {OTHER}: its first columns were recorded (schema version 0 -> 0)"
    )


def _rebind_items(state: PipelineState) -> PipelineState:
    return state.with_table_source(ITEMS, 101, TableRef("public", "items"))


def _other_capture(state: PipelineState) -> PipelineState:
    return state.with_capture(LSN(55), [_segment("theirs", lsn=51)])


def _same_end_more_segments(state: PipelineState) -> PipelineState:
    return state.with_capture(LSN(50), [_segment("theirs", lsn=51)])


def _versioned(state: PipelineState) -> PipelineState:
    return state.with_capture(LSN(50), tables=[state.table(ITEMS).with_columns(WIDER)])


def _ddl_on_other(state: PipelineState) -> PipelineState:
    ddl = replace(state.table(OTHER), ddl=SchemaChange(rewrite=1))
    return replace(state, tables={**state.tables, OTHER: ddl})


def _new_slot(state: PipelineState) -> PipelineState:
    return state.with_new_slot("s", LSN(2))


def _removed(state: PipelineState) -> PipelineState:
    return state.without_table(OTHER)


def _added_on_items_oid(state: PipelineState) -> PipelineState:
    return state.with_table_phase("public.items2", Init()).with_table_source(
        "public.items2", 100, TableRef("public", "x")
    )


@pytest.mark.parametrize(
    ("write", "reason"),
    [
        (_other_capture, "the captured end LSN moved from 0/32 to 0/37"),
        (_same_end_more_segments, "segment(s) theirs were recorded"),
        (_versioned, f"table {ITEMS}: its schema or source identity changed (schema version 0 -> 1)"),
        (_rebind_items, f"table {ITEMS}: its schema or source identity changed"),
        (_ddl_on_other, f"table {OTHER}: its schema or source identity changed"),
        (_new_slot, "the slot identity changed from s (created at 0/1) to s (created at 0/2)"),
        (_removed, f"table {OTHER} was removed from the pipeline"),
        (_added_on_items_oid, "table public.items2 was added, following relation OID 100 the batch matched"),
    ],
)
def test_writes_of_what_capture_owns_are_a_conflict(write: object, reason: str) -> None:
    loaded = _loaded()
    assert callable(write)
    current = write(loaded)
    conflict = current.capture_conflict(loaded, *_batch(loaded))
    assert conflict is not None and conflict.startswith(reason), conflict


def test_a_slot_recorded_where_capture_loaded_none_is_a_conflict() -> None:
    loaded = PipelineState("p").with_table_phase(ITEMS, Init())
    current = loaded.with_slot("s", LSN(3))  # a baseline adopted the slot meanwhile
    assert "slot identity changed from None" in (current.capture_conflict(loaded) or "")
