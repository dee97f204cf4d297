"""Table phase transitions: every legal one, the illegal ones, and what their errors say."""

from __future__ import annotations

import itertools

import pytest

from airflow_provider_pgsync.errors import PgSyncError, PhaseTransitionError, StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import (
    DataSync,
    Errored,
    Init,
    PipelineState,
    Ready,
    SyncDone,
    TablePhase,
    TableState,
    check_transition,
)

ODD = TableRef("Sales Data", 'Odd "Name"; DROP TABLE x;--')
SYNC_DONE = SyncDone("00000003-00000002-1", LSN.parse("0/16B3748"), 740, 750, (745, 741))
ERRORED = Errored("slot lost", "rebaseline the table", "manual", "Ready")
PHASES: dict[str, TablePhase] = {
    "Init": Init(),
    "DataSync": DataSync(),
    "SyncDone": SYNC_DONE,
    "Ready": Ready(),
    "Errored": ERRORED,
}
LEGAL = {
    ("Init", "DataSync"),
    ("DataSync", "SyncDone"),
    ("SyncDone", "Ready"),
    ("Init", "Errored"),
    ("DataSync", "Errored"),
    ("SyncDone", "Errored"),
    ("Ready", "Errored"),
    ("Errored", "Init"),
    ("Errored", "Ready"),  # ERRORED left Ready: apply resumes it there once the cause is fixed
    ("DataSync", "Init"),
    ("SyncDone", "Init"),
    ("Ready", "Init"),
}
ALL = set(itertools.product(PHASES, PHASES))


@pytest.mark.parametrize(("source", "target"), sorted(LEGAL))
def test_legal_transition(source: str, target: str) -> None:
    state = PipelineState("p", tables={str(ODD): TableState(ODD, PHASES[source])})
    moved = state.with_table_phase(ODD, PHASES[target])
    assert moved.table(ODD).phase.kind == target
    assert state.table(ODD).phase.kind == source  # the original is untouched


@pytest.mark.parametrize(("source", "target"), sorted(ALL - LEGAL))
def test_illegal_transition(source: str, target: str) -> None:
    state = PipelineState("p", tables={str(ODD): TableState(ODD, PHASES[source])})
    with pytest.raises(PhaseTransitionError) as info:
        state.with_table_phase(str(ODD), PHASES[target])
    err = info.value
    assert isinstance(err, StateError) and isinstance(err, PgSyncError) and not err.retryable
    assert (err.table, err.from_phase, err.to_phase) == (str(ODD), source, target)
    message = str(err)
    assert str(ODD) in message and f"{source} -> {target}" in message
    assert "it may go to" in message


def test_datasync_twice_says_to_wait_or_rebaseline() -> None:
    with pytest.raises(PhaseTransitionError, match=r"already running or was interrupted.*DataSync -> Init"):
        check_transition("public.orders", DataSync(), DataSync())


def test_leaving_errored_names_reason_and_solution() -> None:
    with pytest.raises(PhaseTransitionError) as info:
        check_transition("public.orders", ERRORED, DataSync())
    assert "slot lost" in str(info.value) and "rebaseline the table" in str(info.value)
    assert "Errored -> Init" in str(info.value)


def test_skipping_the_baseline_says_to_run_it() -> None:
    with pytest.raises(PhaseTransitionError, match="run the baseline of the table first"):
        check_transition("public.orders", Init(), Ready())


def test_new_table_enters_init_only() -> None:
    state = PipelineState("p").with_table_phase("Public.Orders", Init())
    assert state.table("public.orders") == TableState(TableRef("public", "orders"))
    with pytest.raises(PhaseTransitionError, match="not in the pipeline yet") as info:
        PipelineState("p").with_table_phase("public.orders", DataSync())
    assert info.value.from_phase == "(absent)"


def test_unknown_table_names_the_pipeline() -> None:
    with pytest.raises(StateError, match=r"table public.nope is not part of pipeline 'p'"):
        PipelineState("p").table("nope")


def test_errored_records_the_phase_it_left() -> None:
    state = PipelineState("p").with_table_phase("t", Init()).with_table_phase("t", DataSync())
    errored = state.with_table_phase("t", Errored("boom", "fix it", "timed")).table("t").phase
    assert errored == Errored("boom", "fix it", "timed", previous="DataSync")


def test_full_lifecycle_and_rebaseline() -> None:
    state = PipelineState("p")
    for phase in (Init(), DataSync(), SYNC_DONE, Ready(), ERRORED, Init(), DataSync()):
        state = state.with_table_phase(ODD, phase)
    assert state.table(ODD).phase == DataSync()


def test_phase_values_are_validated() -> None:
    with pytest.raises(StateError, match="retry"):
        Errored("r", "s", "sometimes")  # type: ignore[arg-type]
    with pytest.raises(StateError, match="xmin <= xip < xmax"):
        SyncDone("snap", LSN(1), 10, 20, (25,))
    with pytest.raises(StateError, match="64-bit transaction id"):
        SyncDone("snap", LSN(1), 10, 2**64, ())
    assert SYNC_DONE.xip == (741, 745)  # sorted, as pg_current_snapshot() prints them
