"""A destination's Init phase keeps why a schema change sent it back (``reason``) and the
rebaseline request's id: its JSON round trip, states written before it existed, both stores,
and the moves that end the request (a baseline starting) or must leave it alone."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_pgsync.baseline.moves import started
from airflow_provider_pgsync.errors import PhaseTransitionError, StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import DataSync, Init, Ready, SyncDone, worst
from airflow_provider_pgsync.state.store import StateStore

T = "public.items"
WHY = "table public.items changed its columns (column b changed type from integer to text)"
ASKED = Init(reason=WHY, request="0123456789abcdef-1a2b3c4d")


def _ready(*destinations: str) -> PipelineState:
    state = PipelineState("p").with_table_phase(T, Init())
    for name in destinations:
        state = state.with_destination_phase(T, name, DataSync(f"l-{name}"))
        done = SyncDone("snap-1", LSN.parse("0/1000"), 500, 500, lineage=f"l-{name}")
        state = state.with_destination_phase(T, name, done)
        state = state.with_destination_phase(T, name, Ready(), lineage=f"l-{name}")
    return state


def _sent_back(*destinations: str) -> PipelineState:
    state = _ready("lake", "replica")
    for name in destinations:
        state = state.with_destination_phase(T, name, ASKED, lineage=f"l-{name}")
    return state


def _round_trip(state: PipelineState) -> PipelineState:
    return PipelineState.from_json(json.loads(json.dumps(state.to_json())))


def test_init_with_a_request_round_trips_and_is_pending() -> None:
    state = _sent_back("replica")
    assert _round_trip(state) == state
    phase = _round_trip(state).table(T).destination("replica").phase
    assert phase == ASKED and isinstance(phase, Init) and phase.pending
    assert state.to_json()["tables"][T]["destinations"]["replica"]["phase"] == {
        "kind": "Init",
        "reason": WHY,
        "request": ASKED.request,
    }
    assert _round_trip(state).table(T).destination("lake").phase == Ready()


def test_init_without_a_request_is_written_as_before_so_an_older_pgsync_reads_it() -> None:
    state = PipelineState("p").with_table_phase(T, Init())
    data = state.to_json()
    assert data["tables"][T]["phase"] == {"kind": "Init"}
    assert _round_trip(state) == state
    assert not Init().pending and Init() == Init("", "")


@pytest.mark.parametrize("fmt", [1, 2])
def test_a_state_written_before_init_had_a_reason_still_loads(fmt: int) -> None:
    data: dict[str, Any] = {
        "format": fmt,
        "pipeline": "p",
        "version": 3,
        "slot_name": None,
        "slot_creation_lsn": None,
        "last_end_lsn": None,
        "segments": [],
        "watermarks": {},
        "tables": {
            T: {
                "phase": {"kind": "Init"},
                "schema_version": 0,
                "columns": [],
                **(
                    {"destinations": {"lake": {"phase": {"kind": "Init"}, "lineage": "", "baseline": None,
                                                "watermark": None}}}
                    if fmt == 2 else {}
                ),
            }
        },
    }  # fmt: skip
    state = PipelineState.from_json(data)
    phase = state.table(T).destination("lake").phase
    assert phase == Init() and isinstance(phase, Init) and not phase.pending


@pytest.mark.parametrize("field", ["reason", "request"])
def test_a_reason_or_request_that_is_not_text_is_refused_naming_the_remedy(field: str) -> None:
    data = _sent_back("replica").to_json()
    data["tables"][T]["destinations"]["replica"]["phase"][field] = 42
    with pytest.raises(StateError, match=f"Init {field} must be text, not 42.*restore it"):
        PipelineState.from_json(data)
    with pytest.raises(StateError, match="Init reason and request must be text"):
        Init(reason=42)  # type: ignore[arg-type]


def test_both_stores_keep_the_request(store: StateStore, pipeline: str) -> None:
    state = replace(_sent_back("lake", "replica"), pipeline=pipeline)
    saved = store.save(state)
    loaded = store.load(pipeline)
    assert loaded == saved
    assert {loaded.table(T).destination(n).phase for n in ("lake", "replica")} == {ASKED}


def test_a_baseline_starting_ends_the_request_and_init_is_still_init_everywhere() -> None:
    state = _sent_back("replica")
    assert state.table(T).phase == ASKED  # the table shows its worst destination
    assert worst([Ready(), ASKED]) == ASKED
    # a rebaseline (restart) from Init with a request does not go through Init again
    moved = started(state, T, ["replica"], "new-lineage", restart=True)
    assert moved.table(T).destination("replica").phase == DataSync("new-lineage")
    assert _round_trip(moved).table(T).destination("replica").phase == DataSync("new-lineage")
    # Init -> Init is no move (whatever the reason): the request is never overwritten
    with pytest.raises(PhaseTransitionError):
        state.with_destination_phase(T, "replica", Init(reason="another"))
    # the whole table back to Init (a replaced slot) keeps a destination's request
    again = state.table(T).rebaselined()
    assert again.destination("replica").phase == ASKED
    assert again.destination("lake").phase == Init()
