"""A baseline that succeeded in some destinations and failed in others records both in one move:
SyncDone for the ones that succeeded, each failed one Errored with its own reason; a destination
rebaselined meanwhile is left alone (Errored) or refuses the decision (SyncDone)."""

from __future__ import annotations

import pytest

from airflow_provider_pgsync.baseline import moves
from airflow_provider_pgsync.errors import StaleDecisionError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import Errored, Init, SyncDone

T = "public.t"
DONE = SyncDone("snap", LSN(100), 10, 12, (11,), lineage="L1", schema_version=1)


def _running(*names: str) -> PipelineState:
    return moves.started(PipelineState("p").with_table_phase(T, Init()), T, list(names), "L1", restart=False)


def test_each_destination_gets_its_own_outcome() -> None:
    lake = Errored("beyond year 294000", "rebaseline public.t in lake alone", retry="manual")
    custom = Errored("RuntimeError: the disk is full", "rebaseline public.t in sqlite alone", retry="manual")

    state = moves.concluded(
        _running("lake", "replica", "sqlite"), T, ["replica"], DONE, {"lake": lake, "sqlite": custom}
    )

    table = state.table(T)
    assert table.destination("replica").phase == DONE and table.destination("replica").lineage == "L1"
    for name, errored in (("lake", lake), ("sqlite", custom)):
        phase = table.destination(name).phase
        assert isinstance(phase, Errored)
        assert (phase.reason, phase.solution, phase.previous) == (
            errored.reason,
            errored.solution,
            "DataSync",
        )
    assert table.phase.kind == "Errored"  # the worst of its destinations


def test_a_destination_rebaselined_meanwhile_is_not_moved_or_refuses() -> None:
    state = moves.started(_running("lake", "replica"), T, ["lake"], "L2", restart=True)
    errored = Errored("refused", "fix it", retry="manual")

    kept = moves.concluded(state, T, ["replica"], DONE, {"lake": errored})
    assert (
        kept.table(T).destination("lake").lineage == "L2"
        and kept.table(T).destination("lake").phase.kind == "DataSync"
    )
    with pytest.raises(StaleDecisionError):
        moves.concluded(state, T, ["lake"], DONE, {"replica": errored})
