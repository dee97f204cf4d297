"""What apply records and lists for a schema change's rebaseline (pure, no servers): the
request ids of one run, the compare-and-set that never moves Init to Init, and the list of
every request pending in the state (XCom ``schema_rebaselines``), whichever run decided it."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_pgsync.apply.run import TableApplied
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.operators.apply import _Run, pending_rebaselines
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import DataSync, Init, Ready, SyncDone

A, B = "public.a", "public.b"


def _ready(tables: list[str], names: list[str]) -> PipelineState:
    state = PipelineState("p")
    for table in tables:
        state = state.with_table_phase(table, Init())
        for name in names:
            lineage = f"{table}-{name}"
            state = state.with_destination_phase(table, name, DataSync(lineage))
            done = SyncDone("snap", LSN.parse("0/10"), 5, 5, lineage=lineage)
            state = state.with_destination_phase(table, name, done)
            state = state.with_destination_phase(table, name, Ready(), lineage=lineage)
    return state


def _sent_back(table: str) -> TableApplied:
    return TableApplied(table, 0, 0, None, Init(), schema_change=f"{table} changed")


def _run(tmp_path: Path) -> _Run:
    return _Run(Changelog(str(tmp_path)), request="try1")


def test_one_request_per_table_and_destination_set_recorded_and_listed(tmp_path: Path) -> None:
    state = _ready([A, B], ["lake", "replica"])
    run = _run(tmp_path)
    for table, name in [(A, "lake"), (A, "replica"), (B, "lake")]:
        run.decisions.append((table, name, f"{table}-{name}", Ready(), _sent_back(table)))
    run.decisions.append((B, "replica", f"{B}-replica", Ready(), TableApplied(B, 1, 0, (16, 0), Ready())))
    run.stamp_requests()
    saved = run.record(state)
    a_lake, a_replica = (saved.table(A).destination(n).phase for n in ("lake", "replica"))
    b_lake = saved.table(B).destination("lake").phase
    assert isinstance(a_lake, Init) and isinstance(b_lake, Init)
    assert a_lake == a_replica == Init(f"{A} changed", a_lake.request)
    assert a_lake.request.startswith("try1-") and b_lake.request.startswith("try1-")
    assert a_lake.request != b_lake.request  # other destinations: another baseline run
    assert saved.table(B).destination("replica").phase == Ready()
    assert pending_rebaselines(saved, ["lake", "replica"]) == [
        {"table": A, "destination": "lake", "reason": f"{A} changed", "request": a_lake.request},
        {"table": A, "destination": "replica", "reason": f"{A} changed", "request": a_lake.request},
        {"table": B, "destination": "lake", "reason": f"{B} changed", "request": b_lake.request},
    ]
    # a later run (a retried apply) decides nothing about them, yet lists each again
    later = _Run(Changelog(str(tmp_path)), request="try2")
    later.decisions.append((A, "lake", "", a_lake, TableApplied(A, 0, 0, None, a_lake)))
    later.stamp_requests()
    assert later.record(saved) == saved
    assert pending_rebaselines(saved, ["lake"]) == pending_rebaselines(saved, ["lake", "replica"])[0::2]


def test_a_table_in_init_meanwhile_keeps_its_phase_and_apply_does_not_fail(tmp_path: Path) -> None:
    # a state from before destinations had their own phases: Ready, no lineage; then back to
    # Init (a replaced slot) after apply decided its rebaseline: Init -> Init is no move
    state = PipelineState("p").with_table_phase(A, Init()).with_table_phase(A, DataSync())
    state = state.with_table_phase(A, SyncDone("snap", LSN.parse("0/10"), 5, 5))
    state = state.with_table_phase(A, Ready())
    run = _run(tmp_path)
    run.decisions.append((A, "lake", "", Ready(), _sent_back(A)))
    run.stamp_requests()
    meanwhile = state.with_table_phase(A, Init())
    assert run.record(meanwhile).table(A).destination("lake").phase == Init()
    assert pending_rebaselines(run.record(meanwhile), ["lake"]) == []
