"""PipelineState helpers and its JSON form: round trips (hypothesis), odd names, 64-bit values."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_pgsync.errors import ConfigError, StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import (
    XID_MAX,
    Backfill,
    ColumnInfo,
    DataSync,
    Errored,
    Init,
    PipelineState,
    Ready,
    SegmentInfo,
    SyncDone,
    TablePhase,
    TableState,
)
from tests.support.states import ODD, full_state

# ---- strategies ---------------------------------------------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=15)
tables = st.builds(TableRef, names, names)
lsns = st.builds(LSN, st.integers(0, 2**64 - 1) | st.sampled_from([0, 2**64 - 1, 2**63, 2**32 - 1]))
xids = st.integers(0, XID_MAX)


@st.composite
def sync_done(draw: st.DrawFn) -> SyncDone:
    xmin = draw(st.integers(0, XID_MAX - 10) | st.just(XID_MAX - 10))
    xmax = draw(st.integers(xmin, min(XID_MAX, xmin + 1000)))
    xip = draw(st.lists(st.integers(xmin, xmax - 1), max_size=5)) if xmax > xmin else []
    return SyncDone(draw(names), draw(lsns), xmin, xmax, tuple(xip))


phases: st.SearchStrategy[TablePhase] = st.one_of(
    st.just(Init()),
    st.builds(Init, names, names),  # a rebaseline request: why, and its id
    st.just(DataSync()),
    st.just(Ready()),
    sync_done(),
    st.builds(Errored, names, names, st.sampled_from(["none", "manual", "timed"]), names),
)
columns = st.builds(ColumnInfo, names, st.integers(0, 2**32 - 1), st.integers(-1, 2**31 - 1), st.booleans())


@st.composite
def segments(draw: st.DrawFn) -> SegmentInfo:
    first, last = sorted((draw(lsns), draw(lsns)))
    low, high = sorted((draw(xids), draw(xids)))
    return SegmentInfo(
        draw(names), str(draw(tables)), draw(st.integers(0, 99)), first, last, low, high, draw(st.integers(0))
    )


@st.composite
def backfills(draw: st.DrawFn) -> Backfill:
    snapshot = draw(sync_done())
    staged = draw(st.dictionaries(names, names, min_size=1, max_size=2))
    return Backfill(
        id=draw(names),
        condition=draw(st.just("") | names),
        snapshot=snapshot.snapshot,
        baseline_lsn=snapshot.baseline_lsn,
        xmin=snapshot.xmin,
        xmax=snapshot.xmax,
        xip=snapshot.xip,
        staged=staged,
        rows=draw(st.integers(0, 2**40)),
        applied=tuple(draw(st.lists(st.sampled_from(sorted(staged)), max_size=1))),
    )


@st.composite
def table_states(draw: st.DrawFn, table: TableRef) -> TableState:
    phase = draw(phases)
    backfill = draw(st.none() | backfills()) if isinstance(phase, Ready) else None
    cols = tuple(draw(st.lists(columns, max_size=3)))
    return TableState(table, phase, draw(st.integers(0, 2**40)), cols, backfill)


@st.composite
def pipeline_states(draw: st.DrawFn) -> PipelineState:
    table_states_ = [draw(table_states(t)) for t in draw(st.lists(tables, max_size=4, unique=True))]
    return PipelineState(
        pipeline=draw(
            st.from_regex(r"[a-z_][a-z0-9_.-]{0,30}", fullmatch=True).filter(lambda n: ".." not in n)
        ),
        version=draw(st.integers(0, 2**63 - 1)),
        slot_name=draw(st.none() | st.from_regex(r"[a-z_][a-z0-9_]{0,62}", fullmatch=True)),
        slot_creation_lsn=draw(st.none() | lsns),
        last_end_lsn=draw(st.none() | lsns),
        segments=tuple(draw(st.lists(segments(), max_size=4))),
        watermarks=draw(st.dictionaries(names, names, max_size=3)),
        tables={ts.key: ts for ts in table_states_},
    )


# ---- round trips --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(pipeline_states())
def test_json_round_trip(state: PipelineState) -> None:
    text = json.dumps(state.to_json())  # JSON-safe: plain json.dumps accepts it
    assert PipelineState.from_json(json.loads(text)) == state


def test_full_state_round_trip_with_extremes() -> None:
    state = full_state()
    data = state.to_json()
    assert data["tables"][str(ODD)]["phase"]["xmax"] == XID_MAX
    assert data["segments"][0]["last_commit_lsn"] == "FFFFFFFF/FFFFFFFF"
    assert PipelineState.from_json(json.loads(json.dumps(data))) == state
    assert TableRef.parse(next(iter(data["tables"]))) in (ODD, TableRef("public", "plain"))


# ---- backfills ------------------------------------------------------------------------------


def _backfill(id_: str = "b1", staged: dict[str, str] | None = None) -> Backfill:
    return Backfill(
        id_,
        "id > 10",
        "snap-2",
        LSN.parse("0/3000"),
        700,
        705,
        (701,),
        staged or {"lake": "/lake/b1"},
        rows=5,
    )


def _ready(table: str = "public.items") -> PipelineState:
    state = PipelineState("p").with_table_phase(table, Init()).with_table_phase(table, DataSync())
    state = state.with_table_phase(table, SyncDone("snap-1", LSN.parse("0/1000"), 500, 500))
    return state.with_table_phase(table, Ready())


def test_a_backfill_waits_on_a_ready_table_until_every_destination_has_it() -> None:
    state = _ready().with_backfill("public.items", _backfill(staged={"lake": "/a", "lake_two": "/b"}))
    backfill = state.table("public.items").backfill
    assert backfill is not None and backfill.pending == ("lake", "lake_two")
    state = state.with_backfill("public.items", replace(backfill, applied=("lake",)))  # the same one, updated
    updated = state.table("public.items").backfill
    assert updated is not None and updated.pending == ("lake_two",)
    assert PipelineState.from_json(json.loads(json.dumps(state.to_json()))) == state
    assert state.with_backfill("public.items", None).table("public.items").backfill is None


def test_a_second_backfill_or_one_of_a_table_not_ready_is_refused_naming_the_remedy() -> None:
    state = _ready().with_backfill("public.items", _backfill())
    with pytest.raises(
        StateError, match=r"has backfill b1 \(id > 10\) waiting for apply into lake: run the cdc"
    ):
        state.with_backfill("public.items", _backfill("b2"))
    synced = PipelineState("p").with_table_phase("t", Init()).with_table_phase("t", DataSync())
    with pytest.raises(StateError, match=r"public.t is DataSync, not Ready.*rebaseline it"):
        synced.with_backfill("t", _backfill())
    with pytest.raises(StateError, match="a backfill needs the table Ready"):
        TableState(TableRef("public", "t"), Init(), backfill=_backfill())


@pytest.mark.parametrize("phase", [Init(), Errored("lost", "rebaseline", "manual")])
def test_leaving_ready_drops_a_pending_backfill(phase: TablePhase) -> None:
    state = _ready().with_backfill("public.items", _backfill()).with_table_phase("public.items", phase)
    assert state.table("public.items").backfill is None


# ---- helpers --------------------------------------------------------------------------------


def test_columns_bump_schema_version_only_when_they_change() -> None:
    ts = TableState(TableRef("public", "t"))
    first = ts.with_columns([ColumnInfo("id", 23, -1, True)])
    assert first.schema_version == 0  # first columns seen: nothing to compare with
    assert first.with_columns([ColumnInfo("id", 23, -1, True)]) is first
    second = first.with_columns([ColumnInfo("id", 23, -1, True), ColumnInfo("x", 25, -1, False)])
    assert second.schema_version == 1


def test_first_columns_are_recorded_only_for_a_table_without_any() -> None:
    ids = [ColumnInfo("id", 23, -1, True)]
    state = PipelineState("p").with_table_phase("public.t", Init())
    first = state.with_first_columns("public.t", ids)
    assert first.table("public.t").columns == tuple(ids) and first.table("public.t").schema_version == 0
    wider = [*ids, ColumnInfo("x", 25, -1, False)]
    assert first.with_first_columns("public.t", wider) is first  # only capture starts a new version


def test_capture_replaces_segments_of_the_same_path_and_never_goes_back() -> None:
    state = PipelineState("p").with_table_phase("t", Init())
    seg = SegmentInfo("a", "t", 0, LSN(10), LSN(20), 5, 6, 3)
    state = state.with_capture(LSN(30), [seg]).with_capture(
        LSN(30), [SegmentInfo("a", "t", 0, LSN(10), LSN(20), 5, 6, 4)]
    )
    assert [s.rows for s in state.segments] == [4]
    assert state.segments[0].table == "public.t"
    earlier = SegmentInfo("b", "public.t", 0, LSN(1), LSN(2), 1, 1, 1)
    assert [s.path for s in state.with_capture(LSN(40), [earlier]).segments] == ["b", "a"]
    with pytest.raises(StateError, match=r"back from 0/1E to 0/14.*teardown DAG and then its setup DAG"):
        state.with_capture(LSN(20))


def test_capture_keeps_phases_and_refuses_older_schema_versions() -> None:
    state = PipelineState("p").with_table_phase("t", Init()).with_table_phase("t", DataSync())
    newer = TableState(TableRef("public", "t"), Init(), 3, (ColumnInfo("id", 23, -1, True),))
    state = state.with_capture(LSN(1), tables=[newer])
    assert state.table("t").phase == DataSync() and state.table("t").schema_version == 3
    with pytest.raises(StateError, match="schema version would go back from 3 to 0"):
        state.with_capture(LSN(1), tables=[TableState(TableRef("public", "t"))])


def test_watermarks_slot_segments_and_removal_return_new_states() -> None:
    state = PipelineState("p").with_table_phase("t", Init())
    assert state.with_watermark("pg", "0/10/3").watermarks == {"pg": "0/10/3"}
    assert state.with_slot("pgsync_s", LSN(7)).slot_creation_lsn == LSN(7)
    assert state.with_segments([]).segments == ()
    assert state.without_table("public.t").tables == {}
    assert state.watermarks == {} and state.slot_name is None and "public.t" in state.tables
    with pytest.raises(ConfigError, match="replication slot name"):
        state.with_slot("Bad-Slot", None)


@pytest.mark.parametrize("name", ["", "a..b", "has space", "-lead", "x" * 201, "ünï"])
def test_pipeline_names_fit_a_variable_key(name: str) -> None:
    with pytest.raises(ConfigError, match="pipeline name"):
        PipelineState(name)


# ---- malformed JSON -------------------------------------------------------------------------


def _broken(change: Any) -> dict[str, Any]:
    data = full_state().to_json()
    change(data)
    return data


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.pop("segments"),
        lambda d: d.update(last_end_lsn=12),
        lambda d: d.update(version="3"),
        lambda d: d["tables"].update({"bad name!": d["tables"].popitem()[1]}),
        lambda d: next(iter(d["tables"].values()))["phase"].update(kind="Sleeping"),
        lambda d: d["segments"][0].update(min_xid=2**64),
        lambda d: d["segments"][0].update(rows=True),
        lambda d: d.update(format=0),
    ],
)
def test_malformed_state_raises_state_error_with_remedy(change: Any) -> None:
    with pytest.raises(StateError, match=r"pipeline 'orders_to_lake' is malformed .*delete it"):
        PipelineState.from_json(_broken(change))


def test_newer_format_asks_for_an_upgrade() -> None:
    with pytest.raises(StateError, match=r"newer pgsync.*upgrade"):
        PipelineState.from_json(_broken(lambda d: d.update(format=99)))


def test_non_object_is_rejected() -> None:
    with pytest.raises(StateError, match="JSON object"):
        PipelineState.from_json([1, 2])  # type: ignore[arg-type]
