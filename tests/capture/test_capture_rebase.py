"""ACCEPTANCE: capture's state save rebases over a baseline's or an apply's writes made while it
ran, instead of throwing its batch away; only another capture's write (something capture owns)
makes it redo the batch.

A real source, slot and state store (both backends). ``OverlapStore`` delegates to the real
store; armed, it lets a writer thread make its write (through ``update_state`` on the real
store, as a baseline or an apply does) right after capture's load (before its peek), or right
before capture's first save, and waits until that write is saved. So every write lands
exactly between capture's load and its save, deterministically.

- ``test_capture_rebases_over_phase_writes_20_times``: 20 rounds of source changes, each
  captured while a baseline starts, fails or finishes (first columns of a table the batch
  holds nothing of included) or an apply records watermarks. No batch is redone (no
  StateConflictError, the slot advanced each time, no segment written twice), every change is
  in the changelog once, every write survives, the fail points and lock checks keep their order.
- ``test_another_captures_save_in_between_is_a_true_conflict``: another capture records part
  of the batch in between: StateConflictError, nothing recorded twice, the next run captures
  the rest.
- ``test_a_baselines_first_columns_of_a_table_the_batch_saw_are_a_true_conflict``: a baseline
  records the first columns of a table whose first changes are in the batch (and a column was
  added in between): redone, so no schema version names two shapes.
- Marking tables Errored for a bad slot is decided again on a state saved meanwhile: a phase
  write survives it, and a setup that adopted the slot meanwhile leaves nothing to mark.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import cast

import pytest
from psycopg import sql

from airflow_provider_pgsync.baseline import moves
from airflow_provider_pgsync.capture import run as run_module
from airflow_provider_pgsync.changelog.metadata import columns_of
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.errors import SlotError, StateConflictError
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.run_locks import HeldLock
from airflow_provider_pgsync.hooks.variable_state_store import VariableStateStore
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo, DataSync, Errored, PipelineState, SyncDone
from airflow_provider_pgsync.state.store import StateStore, update_state
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database

ITEMS, OTHER, QUIET = "public.items", "public.other", "public.quiet"
DDL = [
    "CREATE TABLE items (id int PRIMARY KEY, name text)",
    "CREATE TABLE other (id int PRIMARY KEY, note text)",
    "CREATE TABLE quiet (id int PRIMARY KEY, v int)",  # never changed: capture never sees it
]
ROUNDS = 20
INSERT_ITEM = sql.SQL("INSERT INTO items VALUES ({}, {})")
Write = Callable[[StateStore], None]


class OverlapStore:
    """A StateStore that delegates to ``real``; ``arm(write, at)`` makes the next ``load`` (or
    ``save``) let a writer thread run ``write(real)`` first and wait until it is done. Records
    the outcome of every save made through it ("saved" / "conflict") in ``events``."""

    def __init__(self, real: StateStore, events: list[str]) -> None:
        self.real = real
        self.events = events
        self.armed: dict[str, Write] = {}
        self.errors: list[BaseException] = []

    def arm(self, write: Write, *, at: str = "load") -> None:
        assert at in ("load", "save") and not self.armed
        self.armed[at] = write

    def _overlap(self, at: str) -> None:
        write = self.armed.pop(at, None)
        if write is None:
            return
        go, done = threading.Event(), threading.Event()

        def writer() -> None:
            go.wait(60)
            try:
                write(self.real)
            except BaseException as exc:
                self.errors.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=writer, name="phase-writer")
        thread.start()
        go.set()  # the writer runs now, while capture waits here
        assert done.wait(120), "the writer thread did not finish"
        thread.join()
        if self.errors:
            raise AssertionError(f"the writer failed: {self.errors[0]!r}") from self.errors[0]

    def load(self, pipeline: str) -> PipelineState:
        state = self.real.load(pipeline)
        self._overlap("load")  # after capture's load, before its peek
        return state

    def save(self, state: PipelineState) -> PipelineState:
        self._overlap("save")
        try:
            saved = self.real.save(state)
        except StateConflictError:
            self.events.append("conflict")
            raise
        self.events.append("saved")
        return saved

    def delete(self, pipeline: str) -> None:
        self.real.delete(pipeline)


@dataclass
class Setup:
    pipeline: Pipeline
    store: OverlapStore
    events: list[str]


@pytest.fixture(params=["postgres", "variables"])
def setup(request: pytest.FixtureRequest, make_pipeline: MakePipeline) -> Iterator[Setup]:
    events: list[str] = []
    if request.param == "variables":
        request.getfixturevalue("airflow_db")

    def open_store(hook: PgReplicationHook) -> StateStore:
        real: StateStore = (
            VariableStateStore(lock=hook) if request.param == "variables" else PostgresStateStore(hook)
        )
        return OverlapStore(real, events)

    pipeline = make_pipeline(DDL, ["items", "other", "quiet"], open_store=open_store)
    store = pipeline.store
    assert isinstance(store, OverlapStore)
    yield Setup(pipeline, store, events)
    if request.param == "variables":
        store.real.delete(pipeline.name)  # the Airflow database outlives the test


# ---- the writes other runs make (pure changes of the state, through update_state) ----------


def _started(pipeline: str, key: str, destination: str, lineage: str) -> Write:
    def write(store: StateStore) -> None:
        update_state(store, pipeline, lambda s: moves.started(s, key, [destination], lineage, restart=False))

    return write


def _failed(pipeline: str, key: str, destination: str, lineage: str) -> Write:
    errored = Errored("baseline of the test failed", "rebaseline", retry="manual")

    def write(store: StateStore) -> None:
        _started(pipeline, key, destination, lineage)(store)
        update_state(store, pipeline, lambda s: moves.failed(s, key, [destination], lineage, errored))

    return write


def _applied(pipeline: str, destination: str, mark: str) -> Write:
    def write(store: StateStore) -> None:
        update_state(
            store,
            pipeline,
            lambda s: s.with_watermark(destination, mark).with_destination_watermark(
                ITEMS, destination, mark
            ),
        )

    return write


def _baseline_done(
    pipeline: str, key: str, destination: str, lineage: str, columns: list[ColumnInfo]
) -> Write:
    """A baseline of ``key`` starting and finishing as PgBaselineOperator does (its ``finish``)."""
    done = SyncDone("00000003-00000002-1", LSN(1), 5, 5, (), lineage=lineage)

    def finish(state: PipelineState) -> PipelineState:
        version = moves.copied_version(state.table(key), columns)
        state = state.with_first_columns(key, columns)
        return moves.finished(state, key, [destination], replace(done, schema_version=version))

    def write(store: StateStore) -> None:
        _started(pipeline, key, destination, lineage)(store)
        update_state(store, pipeline, finish)

    return write


def _catalog_columns(pipeline: Pipeline, table: str) -> list[ColumnInfo]:
    with pipeline.hook.connect() as conn:
        return column_infos(conn, TableRef.parse(table))


def _recording(monkeypatch: pytest.MonkeyPatch, events: list[str]) -> None:
    """Record capture's fail points and lock checks in ``events``, in order with the saves."""
    real_fail_point, real_ensure_held = run_module.fail_point, HeldLock.ensure_held

    def fail_point(name: str) -> None:
        events.append(name)
        real_fail_point(name)

    def ensure_held(self: HeldLock) -> None:
        events.append("ensure_held")
        real_ensure_held(self)

    monkeypatch.setattr(run_module, "fail_point", fail_point)
    monkeypatch.setattr(HeldLock, "ensure_held", ensure_held)


def _landed(state: PipelineState, kind: int, table: str, destination: str, value: str) -> bool:
    """Whether a write of the 20-round test is in ``state`` (see the test for the kinds)."""
    phase = state.table(table).destination(destination).phase
    if kind == 0:
        return phase == DataSync(value)
    if kind == 1:
        return isinstance(phase, Errored) and state.table(table).destination(destination).lineage == value
    if kind == 2:
        marks = (state.watermarks.get(destination), state.table(ITEMS).destination(destination).watermark)
        return marks == (value, value)
    return isinstance(phase, SyncDone) and phase.lineage == value


def _ops(pipeline: Pipeline, table: str) -> list[tuple[str, str | None]]:
    changes = pipeline.changes(table)
    keys = [(c["_commit_lsn"], c["_seq"]) for c in changes]
    assert keys == sorted(set(keys)), f"changes of {table} repeated or out of order"
    return [(c["_op"], c["id"] or c.get("_old_key_id")) for c in changes]


# ---- the tests ------------------------------------------------------------------------------


def test_capture_rebases_over_phase_writes_20_times(
    setup: Setup, database: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline, store, events = setup.pipeline, setup.store, setup.events
    name = pipeline.name
    quiet_columns = _catalog_columns(pipeline, QUIET)
    _recording(monkeypatch, events)
    caplog.set_level(logging.INFO, logger=run_module.__name__)
    repeated: list[str] = []
    paths: Counter[str] = Counter()
    expect: list[tuple[int, str, str, str]] = []  # each round's write: kind, table, destination, value
    items: list[tuple[str, str | None]] = []
    others: list[tuple[str, str | None]] = []

    for i in range(ROUNDS):
        database.transaction(*(INSERT_ITEM.format(3 * i + k, f"n{i}") for k in (1, 2, 3)))
        database.transaction(sql.SQL("UPDATE items SET name = {} WHERE id = {}").format(f"r{i}", 3 * i + 1))
        database.transaction(sql.SQL("INSERT INTO other VALUES ({}, {})").format(i, f"o{i}"))
        items += [*(("I", str(3 * i + k)) for k in (1, 2, 3)), ("U", str(3 * i + 1))]
        others.append(("I", str(i)))
        if i % 5 == 4:
            database.transaction(sql.SQL("DELETE FROM other WHERE id = {}").format(i - 1))
            others.append(("D", str(i - 1)))

        before = pipeline.state().version  # (before the store is armed: its next load runs the write)
        dest, lineage, table = f"d{i}", f"l{i}", (ITEMS, OTHER)[i % 2]
        kind = i % 4
        if kind == 0:
            store.arm(_started(name, table, dest, lineage))
        elif kind == 1:
            store.arm(_failed(name, table, dest, lineage))
        elif kind == 2:
            lineage = f"0/{i:X}/0"  # the watermark
            store.arm(_applied(name, dest, lineage))
        else:  # quiet's baseline finishes: its first columns (the batch holds nothing of quiet)
            table = QUIET
            store.arm(_baseline_done(name, QUIET, dest, lineage, quiet_columns))
        expect.append((kind, table, dest, lineage))

        del events[:]
        try:
            result = pipeline.capture()
        except StateConflictError as exc:
            repeated.append(f"round {i}: {exc}")
            continue
        state = pipeline.state()
        if not (
            result.advanced_to is not None and pipeline.slot_info().confirmed_flush_lsn == result.advanced_to
        ):
            repeated.append(f"round {i}: slot not advanced ({result.advanced_to})")
        assert state.last_end_lsn == result.advanced_to
        paths.update(s.path for s in result.segments)
        assert result.changes == 4 + 1 + (i % 5 == 4) and len(result.segments) == 2
        # the write landed in between: capture's first save conflicted, the rebased one saved,
        # with the lock checked before each save and the advance, the fail points once each
        assert events == [
            "after_peek",
            "before_state_write",
            "ensure_held",
            "conflict",
            "ensure_held",
            "saved",
            "after_state_write",
            "ensure_held",
            "after_advance",
        ], f"round {i}"
        assert state.version == before + (3 if kind in (1, 3) else 2)  # its writes and capture's
        assert all(_landed(state, *write) for write in expect), f"round {i}: a write was lost"

    twice = [p for p, n in paths.items() if n > 1]
    assert (repeated, twice) == ([], []), "batches were redone over phase writes"

    final = pipeline.state()
    lost = [write for write in expect if not _landed(final, *write)]
    assert lost == [] and len(expect) == ROUNDS
    assert _ops(pipeline, ITEMS) == items
    assert _ops(pipeline, OTHER) == others
    assert sorted(s.path for s in final.segments) == sorted(paths)
    assert [s.table for s in final.segments if s.table == QUIET] == []
    quiet = final.table(QUIET)
    assert (quiet.columns, quiet.schema_version) == (tuple(quiet_columns), 0)  # the baseline's first columns
    assert {(k, ts.schema_version) for k, ts in final.tables.items()} == {(ITEMS, 0), (OTHER, 0), (QUIET, 0)}
    rebased = [
        r.getMessage() for r in caplog.records if "the batch is recorded on state version" in r.getMessage()
    ]
    assert len(rebased) == ROUNDS


class _NoLock:
    """Another capture run of the same slot that took no lock (e.g. one whose lock was lost and
    taken by this one): what the state's compare-and-set still has to catch."""

    def ensure_held(self) -> None:
        pass


def test_another_captures_save_in_between_is_a_true_conflict(setup: Setup, database: Database) -> None:
    pipeline, store, events = setup.pipeline, setup.store, setup.events
    for t in range(10):
        database.transaction(*(INSERT_ITEM.format(5 * t + k, "n") for k in range(5)))
    before = pipeline.slot_info().confirmed_flush_lsn
    other: list[run_module.CaptureResult] = []

    def other_capture(real: StateStore) -> None:
        hook = PgReplicationHook(postgres_conn_id=pipeline.hook.postgres_conn_id)
        settings = replace(pipeline.settings, max_changes=12)  # part of the batch only
        other.append(run_module._capture(hook, real, settings, cast(HeldLock, _NoLock())))

    store.arm(other_capture, at="save")
    del events[:]  # (the pipeline's setup saved through the store)
    with pytest.raises(StateConflictError):
        pipeline.capture()
    assert events == ["conflict"]  # no rebase over another capture
    [theirs] = other
    assert theirs.transactions == 2 and not theirs.idle
    state = pipeline.state()
    assert state.last_end_lsn == theirs.advanced_to == pipeline.slot_info().confirmed_flush_lsn != before
    assert [s.path for s in state.segments] == [s.path for s in theirs.segments]

    rest = pipeline.capture()  # the next run captures the rest of the batch
    assert rest.idle and rest.transactions == 8
    assert [op for op, _ in _ops(pipeline, ITEMS)] == ["I"] * 50
    assert sorted(int(k) for _, k in _ops(pipeline, ITEMS) if k) == list(range(50))


def test_a_baselines_first_columns_of_a_table_the_batch_saw_are_a_true_conflict(
    setup: Setup, database: Database
) -> None:
    pipeline, store, events = setup.pipeline, setup.store, setup.events
    database.transaction("INSERT INTO items VALUES (1, 'a'), (2, 'b')")
    database.execute("ALTER TABLE items ADD COLUMN extra text")
    database.transaction("INSERT INTO items VALUES (3, 'c', 'x')")
    copied = _catalog_columns(pipeline, ITEMS)  # what a baseline reads now: id, name, extra
    store.arm(_baseline_done(pipeline.name, ITEMS, "lake", "l1", copied))
    del events[:]

    with pytest.raises(StateConflictError):
        pipeline.capture()  # its batch numbered items' versions from no columns at all
    assert events == ["conflict"]
    done = pipeline.state().table(ITEMS).destination("lake").phase
    assert isinstance(done, SyncDone) and done.schema_version == 0

    result = pipeline.capture()  # decoded again from the baseline's first columns
    assert result.idle and result.changes == 3
    state = pipeline.state()
    changelog = Changelog(pipeline.settings.changelog_uri)
    shapes: dict[int, set[tuple[str, ...]]] = {}
    for segment in state.segments:
        columns = columns_of(changelog.segment_metadata(segment.path), segment.path)
        shapes.setdefault(segment.schema_version, set()).add(tuple(c.name for c in columns))
    shapes.setdefault(state.table(ITEMS).schema_version, set()).add(
        tuple(c.name for c in state.table(ITEMS).columns)
    )
    shapes.setdefault(done.schema_version, set()).add(tuple(c.name for c in copied))
    # each schema version names one shape, and the baseline's copy is version 0's
    assert shapes == {0: {("id", "name", "extra")}, 1: {("id", "name")}, 2: {("id", "name", "extra")}}
    assert [op for op, _ in _ops(pipeline, ITEMS)] == ["I"] * 3


def test_marking_tables_errored_keeps_a_phase_write_made_meanwhile(setup: Setup) -> None:
    pipeline, store, events = setup.pipeline, setup.store, setup.events
    assert pipeline.hook.drop_slot(pipeline.slot) is True
    store.arm(_started(pipeline.name, ITEMS, "lake", "l1"))
    del events[:]

    with pytest.raises(SlotError, match="does not exist"):
        pipeline.capture()

    assert events == ["conflict", "saved"]  # decided again on the state saved meanwhile
    state = pipeline.state()
    assert all(isinstance(ts.phase, Errored) for ts in state.tables.values())
    lake = state.table(ITEMS).destination("lake")
    assert lake.lineage == "l1" and isinstance(lake.phase, Errored) and lake.phase.previous == "DataSync"


def test_no_table_is_marked_errored_when_a_setup_adopted_the_slot_meanwhile(setup: Setup) -> None:
    pipeline, store, events = setup.pipeline, setup.store, setup.events
    pipeline.database.execute("INSERT INTO items VALUES (1, 'one')")
    assert pipeline.capture().changes == 1
    pipeline.database.execute("INSERT INTO items VALUES (2, 'two')")  # lost with the old slot
    assert pipeline.hook.drop_slot(pipeline.slot) is True
    assert pipeline.hook.ensure_slot(pipeline.slot).created is True
    confirmed = pipeline.slot_info().confirmed_flush_lsn
    assert confirmed is not None

    def adopt(real: StateStore) -> None:  # what the setup DAG's init_tables does with a replaced slot
        update_state(real, pipeline.name, lambda s: s.with_new_slot(pipeline.slot, confirmed))

    store.arm(adopt)
    del events[:]
    with pytest.raises(SlotError, match="was replaced"):
        pipeline.capture()
    assert events == ["conflict"]  # the state saved meanwhile suits the slot: nothing more to mark
    state = pipeline.state()
    assert not any(isinstance(ts.phase, Errored) for ts in state.tables.values())
    assert (state.slot_creation_lsn, state.last_end_lsn) == (confirmed, None)
    pipeline.database.execute("INSERT INTO items VALUES (3, 'three')")
    assert pipeline.capture().changes == 1  # the next run captures from the adopted slot
