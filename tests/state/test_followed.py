"""Tables followed by relation OID: the state's record of it (JSON, older states) and the matching
of a config's tables to the state's (``state.followed``), without a server."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from airflow_provider_pgsync.errors import ConfigError, StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.followed import FollowedTable, follow
from airflow_provider_pgsync.state.model import Init, PipelineState, TableState

S, S_NEW, T, U = (
    TableRef("public", "s"),
    TableRef("public", "s_new"),
    TableRef("public", "t"),
    TableRef("public", "u"),
)


def _state() -> PipelineState:
    state = PipelineState("p").with_table_phase("public.s", Init()).with_table_phase("public.t", Init())
    return state.with_table_source("public.s", 100, S_NEW).with_table_source("public.t", 200, T)


def test_relation_id_and_source_name_round_trip_and_older_states_read_without_them() -> None:
    state = _state()
    data = json.loads(json.dumps(state.to_json()))
    assert data["tables"]["public.s"]["relation_id"] == 100
    assert data["tables"]["public.s"]["source_name"] == "public.s_new"
    assert "source_name" not in data["tables"]["public.t"], "a table under its own name records none"
    assert PipelineState.from_json(data) == state
    older = json.loads(json.dumps(state.to_json()))
    for table in older["tables"].values():
        table.pop("relation_id", None)
        table.pop("source_name", None)
    read = PipelineState.from_json(older)
    assert read.table("public.s").relation_id is None
    assert read.table("public.s").source_table == S
    older["tables"]["public.s"]["relation_id"] = "100"
    with pytest.raises(StateError, match="relation_id must be an integer"):
        PipelineState.from_json(older)


def test_table_state_checks_the_oid_and_drops_a_source_name_equal_to_its_own() -> None:
    assert TableState(S, source_name=S).source_name is None
    with pytest.raises(StateError, match="not a positive OID"):
        TableState(S, relation_id=0)


def test_capture_keeps_the_recorded_oid_and_source_name() -> None:
    state = _state()
    seen = state.table("public.s").with_source(100, TableRef("public", "s_newer"))
    assert state.with_capture(LSN(1), (), [seen]).table("public.s") == seen


def test_config_names_the_old_name_the_new_name_or_a_new_table() -> None:
    state = _state()
    names = {100: S_NEW, 200: T}
    oids = {S_NEW: 100, T: 200, U: 300}
    old, new, other, fresh = follow(state, [S], names, oids) + follow(state, [S_NEW, T, U], names, oids)
    assert old == FollowedTable(S, S, S_NEW, 100) and old.renamed
    assert new == FollowedTable(S_NEW, S, S_NEW, 100) and new.renamed
    assert other == FollowedTable(T, T, T, 200) and not other.renamed
    assert fresh == FollowedTable(U, U, U, 300)


def test_both_names_in_one_config_are_one_table() -> None:
    with pytest.raises(ConfigError, match=r"public\.s and public\.s_new .* are one table .* list it once"):
        follow(_state(), [S, S_NEW], {100: S_NEW}, {S_NEW: 100})


def test_a_state_without_oids_and_a_dropped_table_fall_back_to_the_name() -> None:
    state = PipelineState("p").with_table_phase("public.s", Init())
    assert follow(state, [S], {}, {S: 7}) == [FollowedTable(S, S, S, 7)]
    # the followed relation is gone (dropped, a new table of that name): the table of that name,
    # marked as replacing the one followed (setup follows it anew, a baseline refuses it)
    dropped = _state()
    [replaced] = follow(dropped, [S], {}, {S: 9})
    assert replaced == FollowedTable(S, S, S, 9, gone_id=100) and replaced.replaced
    with pytest.raises(StateError, match=r"is another table now \(relation OID 9\).*run the setup DAG"):
        replaced.check_present("p")
    [gone] = follow(dropped, [S], {}, {})
    assert gone == FollowedTable(S, S, S, None, gone_id=100) and not gone.replaced
    with pytest.raises(StateError, match=r"was dropped in the source; nothing was copied"):
        gone.check_present("p")
    follow(state, [S], {}, {S: 7})[0].check_present("p")  # nothing gone: no error
    # a recorded source name whose relation is another one now is not that table
    assert follow(dropped, [S_NEW], {}, {S_NEW: 9}) == [FollowedTable(S_NEW, S_NEW, S_NEW, 9)]


def test_the_pipelines_name_of_a_table_named_as_the_source_names_it_now() -> None:
    from airflow_provider_pgsync.state.followed import pipeline_name
    from airflow_provider_pgsync.triggers.checks import phase_event

    state = _state()
    assert pipeline_name(state, "public.s_new") == pipeline_name(state, "s") == "public.s"
    assert pipeline_name(state, "public.u") == "public.u"
    saved = dataclasses.replace(state, version=1)
    assert phase_event(saved, "s_new", "Init", where="x") is not None  # the sensor takes either name


def test_a_table_followed_anew_is_a_new_table_in_every_destination_and_capture_sees_the_change() -> None:
    from airflow_provider_pgsync.state.model import DataSync, Ready, SourceDrop, SyncDone

    state = _state()
    for name in ("lake", "replica"):
        state = state.with_destination_phase("public.s", name, DataSync("L1"))
        state = state.with_destination_phase("public.s", name, SyncDone("x", LSN(5), 1, 1, lineage="L1"))
        state = state.with_destination_phase("public.s", name, Ready())
    columns = [dataclasses.replace(c, attnum=i + 1) for i, c in enumerate(_columns())]
    ts = state.table("public.s").with_columns(columns)
    dropped = ts.with_dropped(SourceDrop(100, LSN(0x50)))
    assert dropped.with_dropped(SourceDrop(100, LSN(0x60))) == dropped, "the first record stays"
    captured = state.with_capture(LSN(0x60), (), [dropped])
    assert captured.table("public.s").dropped == SourceDrop(100, LSN(0x50))
    assert PipelineState.from_json(json.loads(json.dumps(captured.to_json()))) == captured

    anew = captured.with_table_followed_anew("public.s", 300, S)
    ts = anew.table("public.s")
    assert (ts.relation_id, ts.source_name, ts.dropped, ts.columns) == (300, None, None, ())
    assert ts.schema_version == captured.table("public.s").schema_version + 1
    assert {n: d.phase.kind for n, d in ts.destinations.items()} == {"lake": "Init", "replica": "Init"}
    # a capture decoded from the state before does not land on it (it is decoded again)
    assert anew.capture_conflict(captured) is not None
    flagged = state.table("public.s").with_dropped(SourceDrop(100, LSN(0x50)))
    other = dataclasses.replace(state, tables={**state.tables, "public.s": flagged})
    conflict = other.capture_conflict(state)  # a drop another capture recorded meanwhile
    assert conflict is not None and "source identity changed" in conflict


def _columns() -> list[Any]:
    from airflow_provider_pgsync.state.model import ColumnInfo

    return [ColumnInfo("id", 23, -1, True), ColumnInfo("v", 25, -1, False)]
