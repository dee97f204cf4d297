"""A table's state per destination: each its own phase and lineage, the table showing the worst,
moves that are compare-and-sets on the lineage they were decided for, and the JSON of both
formats."""

from __future__ import annotations

import pytest

from airflow_provider_pgsync.baseline import moves
from airflow_provider_pgsync.errors import PhaseTransitionError, StaleDecisionError, StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import ColumnInfo, PipelineState
from airflow_provider_pgsync.state.phases import DataSync, Errored, Init, Ready, SyncDone

T = "public.t"


def _done(lineage: str) -> SyncDone:
    return SyncDone("snap", LSN(100), 10, 12, (11,), lineage=lineage, schema_version=2)


def _two() -> PipelineState:
    state = PipelineState("p").with_table_phase(T, Init())
    return moves.finished(
        moves.started(state, T, ["lake", "pg"], "L1", restart=False), T, ["lake", "pg"], _done("L1")
    )


def test_each_destination_moves_alone_and_the_table_shows_the_worst() -> None:
    state = _two().with_destination_phase(T, "lake", Ready(), lineage="L1")
    table = state.table(T)
    assert (table.destination("lake").phase, table.destination("pg").phase.kind) == (Ready(), "SyncDone")
    assert table.phase.kind == "SyncDone"
    assert table.destination("lake").baseline == _done("L1")  # kept in Ready, for a resume
    state = state.with_destination_phase(T, "pg", Errored("down", "start it"))
    assert state.table(T).phase.kind == "Errored" and state.table(T).destination("lake").phase == Ready()
    assert state.table(T).destination("archive").phase == Init()  # a destination never baselined


def test_a_decision_for_another_lineage_is_refused_and_records_nothing() -> None:
    state = moves.started(_two(), T, ["lake"], "L2", restart=True)  # a rebaseline of the lake began
    with pytest.raises(StaleDecisionError, match=r"decision made for baseline L1 was dropped.*L2"):
        state.with_destination_phase(T, "lake", Ready(), lineage="L1")
    with pytest.raises(StaleDecisionError, match=r"baseline L1 was dropped.*now at baseline L2 \(DataSync\)"):
        moves.finished(state, T, ["lake"], _done("L1"))
    # the baseline that was overtaken fails: it leaves the newer one alone
    failed = moves.failed(state, T, ["lake"], "L1", Errored("spark died", "rebaseline"))
    assert failed == state
    assert moves.failed(state, T, ["lake"], "L2", Errored("spark died", "rebaseline")).table(
        T
    ).phase.kind == ("Errored")


def test_baselines_need_a_lineage_and_a_restart_over_a_streaming_destination() -> None:
    state = PipelineState("p").with_table_phase(T, Init())
    with pytest.raises(StateError, match="needs a lineage id"):
        state.with_destination_phase(T, "lake", DataSync())
    with pytest.raises(PhaseTransitionError, match=r"in destination lake: illegal phase transition SyncDone"):
        moves.started(_two(), T, ["lake"], "L2", restart=False)
    again = moves.started(_two(), T, ["lake"], "L2", restart=True)
    assert again.table(T).destination("lake").lineage == "L2"
    assert again.table(T).destination("lake").baseline is None  # Init forgot the old baseline
    assert again.table(T).destination("pg").lineage == "L1"


def test_an_errored_destination_resumes_to_the_phase_it_left_or_on_to_ready() -> None:
    state = _two().with_destination_phase(T, "pg", Errored("refused", "fix it"))
    assert state.table(T).destination("pg").phase.previous == "SyncDone"  # type: ignore[union-attr]
    assert state.with_destination_phase(T, "pg", _done("L1"), lineage="L1").table(T).destination(
        "pg"
    ).phase == _done("L1")
    assert (
        state.with_destination_phase(T, "pg", Ready(), lineage="L1").table(T).destination("pg").phase
        == Ready()
    )
    with pytest.raises(PhaseTransitionError):
        state.with_destination_phase(T, "pg", DataSync("L3"))


def test_the_baseline_records_the_schema_version_it_copied() -> None:
    columns = (ColumnInfo("id", 23, -1, True), ColumnInfo("v", 25, -1, False))
    state = PipelineState("p").with_table_phase(T, Init())
    table = state.table(T)
    assert moves.copied_version(table, columns) == 0  # capture saw nothing yet
    seen = state.with_capture(LSN(5), tables=[table.with_columns(columns).with_columns(columns[:1])]).table(T)
    assert seen.schema_version == 1
    assert moves.copied_version(seen, columns[:1]) == 1  # what capture last saw
    assert moves.copied_version(seen, columns) == 2  # changed since: the version capture will give it


def test_json_round_trip_and_the_older_format() -> None:
    state = _two().with_destination_phase(T, "pg", Errored("refused", "fix it", retry="timed"))
    state = state.with_destination_watermark(T, "lake", "0/64/3")
    assert PipelineState.from_json(state.to_json()) == state
    legacy = state.to_json()
    legacy["format"] = 1
    legacy["tables"] = {T: {"phase": {"kind": "Ready"}, "schema_version": 0, "columns": []}}
    table = PipelineState.from_json(legacy).table(T)
    assert table.destinations == {} and table.phase == Ready() == table.destination("lake").phase
