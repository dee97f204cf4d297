"""ACCEPTANCE (DESIGN §2 rules 1-4): capture is at-least-once under crashes, and the changelog
read back holds every committed change exactly once.

The oracle is independent of capture: a second slot, created before any change, is
decoded at the end with the reference ``PgOutputDecoder`` (not capture's vectorised
reader), and the changelog replayed must also rebuild the source table.

- ``test_capture_survives_crashes_at_every_fail_point``: a writer thread commits small
  transactions of every kind (and rolls some back) while capture runs in child processes
  that die at each fail point in turn (``os._exit(77)``), alternating with runs without
  fail point (in the test process); a round with peeks cut by the change limit and
  decoded in place, then a round of idle peeks decoded in capture's worker process. Then
  clean captures drain the slot.
- ``test_capture_survives_an_immediate_server_stop``: PostgreSQL is stopped with
  ``-m immediate`` right after a capture advanced the slot. The advance is lost with
  the crash (PostgreSQL persists an advanced logical slot at the next checkpoint only),
  so the slot goes back and capture re-peeks transactions its state holds already.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest

from airflow_provider_pgsync.capture.run import CaptureResult, CaptureSettings, capture
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.failpoints import EXIT_CODE, POINTS
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.pgoutput import (
    LSN,
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Origin,
    PgOutputDecoder,
    Relation,
    TupleData,
    Type,
    Update,
    pg_timestamp,
)
from airflow_provider_pgsync.state.model import Init, PipelineState
from tests.capture.capture_worker import HOLDER, WorkerRun, run_capture_process
from tests.conftest import Cluster, Database, free_port

TABLE = "public.t"
PUBLICATION = "crash_pub"
COLUMNS = ("id", "v", "note")
DDL = "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text)"
MARKER = "ROLLED-BACK"


def wait_for(what: str, check: Callable[[], bool], *, timeout: float = 30.0) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


# ---- the oracle -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One row change as both sides can state it."""

    commit_lsn: int
    seq: int
    xid: int
    commit_ts: datetime
    op: str
    old_key: str | None
    row: tuple[str | None, ...]


def _texts(data: TupleData) -> tuple[str | None, ...]:
    assert b"u" not in data.kinds and b"b" not in data.kinds, data
    return tuple(None if v is None else v.decode() for v in data.values)


def reference_changes(hook: PgReplicationHook, slot: str, upto: LSN) -> list[Change]:
    """Every change of the publication in ``slot`` up to ``upto``, by the reference decoder."""
    decoder = PgOutputDecoder(protocol_version=2)
    relations: dict[int, Relation] = {}
    out: list[Change] = []
    begin: Begin | None = None
    seq = 0
    with hook.peek(slot, [PUBLICATION], upto_lsn=upto, upto_nchanges=None) as rows:
        for _lsn, _xid, data in rows:
            message = decoder.decode(data)
            if isinstance(message, Begin):
                assert begin is None
                begin, seq = message, 0
                continue
            if isinstance(message, Commit):
                assert begin is not None and message.commit_lsn == begin.final_lsn
                begin = None
                continue
            if isinstance(message, Relation):
                relations[message.relation_id] = message
                continue
            if isinstance(message, Type | Origin | LogicalMessage):
                continue
            assert begin is not None, f"{message} outside a transaction"
            assert isinstance(message, Insert | Update | Delete), f"unexpected {message}"
            relation = relations[message.relation_id]
            assert [c.name for c in relation.columns] == list(COLUMNS)
            assert [c.is_key for c in relation.columns] == [True, False, False], "id is the key"
            if isinstance(message, Insert):
                op, old_key, row = "I", None, _texts(message.new_tuple)
            else:
                old = message.key_tuple or message.old_tuple
                old_key = None if old is None else _texts(old)[0]
                if isinstance(message, Update):
                    op, row = "U", _texts(message.new_tuple)
                else:
                    op, row = "D", (None, None, None)
            out.append(
                Change(begin.final_lsn.value, seq, begin.xid, pg_timestamp(begin.commit_ts), op, old_key, row)
            )
            seq += 1
    assert begin is None, "the peek ended inside a transaction"
    return out


def _change_of(record: dict[str, Any]) -> Change:
    return Change(
        record["_commit_lsn"],
        record["_seq"],
        record["_xid"],
        record["_commit_ts"],
        record["_op"],
        record["_old_key_id"],
        tuple(record[c] for c in COLUMNS),
    )


def changelog_changes(changelog_uri: str, state: PipelineState) -> list[Change]:
    """The table's changes as destinations read them: ``Changelog.read_changes`` over the state's segments."""
    out: list[Change] = []
    for _version, batch in Changelog(changelog_uri).read_changes(TABLE, state.segments):
        out.extend(_change_of(record) for record in batch.to_pylist())
    return out


def raw_rows(path: Path) -> list[Change]:
    """Every row of one segment file as it is on disk (no de-duplication)."""
    return [_change_of(record) for record in pq.read_table(path).to_pylist()]


def replay(changes: list[Change]) -> dict[str, tuple[str | None, ...]]:
    """The table the changes build, by key; an impossible change (insert of a present key...) fails."""
    rows: dict[str, tuple[str | None, ...]] = {}
    for c in changes:
        if c.op == "I":
            assert c.row[0] not in rows, f"insert of present key: {c}"
        elif c.op == "U":
            if c.old_key is not None:
                assert rows.pop(c.old_key, None) is not None, f"key update of absent key: {c}"
            else:
                assert c.row[0] in rows, f"update of absent key: {c}"
        else:
            assert c.op == "D" and c.old_key is not None, c
            assert rows.pop(c.old_key, None) is not None, f"delete of absent key: {c}"
            continue
        assert c.row[0] is not None
        rows[c.row[0]] = c.row
    return rows


def table_rows(conninfo: str) -> dict[str, tuple[str | None, ...]]:
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute("SELECT id::text, v::text, note FROM t").fetchall()
    return {r[0]: tuple(r) for r in rows}


def check_changelog(
    hook: PgReplicationHook, conninfo: str, ref_slot: str, changelog_uri: str, state: PipelineState
) -> list[Change]:
    """Assert the changelog holds every committed change exactly once and nothing else; return them."""
    expected = reference_changes(hook, ref_slot, hook.wal_positions().flush)
    got = changelog_changes(changelog_uri, state)
    assert len(got) == len(expected), f"changelog has {len(got)} changes, the reference {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g == e, f"change {i} differs:\n changelog {g}\n reference {e}"
    assert got == expected
    assert not [c for c in got if MARKER in str(c.row)], "a rolled-back change reached the changelog"
    assert replay(got) == table_rows(conninfo)

    # the files on disk: the segments of the state never disagree about a change, and no
    # file written by any run (also those a crash left unrecorded) holds anything but
    # committed changes exactly as the reference decodes them
    reference = {(c.commit_lsn, c.seq): c for c in expected}
    root = Path(changelog_uri)
    listed: dict[tuple[int, int], Change] = {}
    for segment in state.segments:
        for row in raw_rows(root / segment.path):
            key = (row.commit_lsn, row.seq)
            assert listed.setdefault(key, row) == row, f"two contents for {key}: {listed[key]} and {row}"
    assert listed.keys() == reference.keys()
    files = sorted(p for p in root.rglob("*.parquet") if not p.name.startswith("."))
    for path in files:
        for row in raw_rows(path):
            assert reference.get((row.commit_lsn, row.seq)) == row, f"{path.name} holds {row}"
    return got


# ---- the writer -------------------------------------------------------------------------------


@dataclass
class Writer:
    """Commits small transactions of every kind into ``t`` from one connection; rolls some back.

    Rolled-back work (whole transactions and savepoints) writes notes containing MARKER.
    Run it in a thread with ``start``/``stop``, or call ``transaction`` directly.
    """

    conninfo: str
    seed: int
    pause: float = 0.002
    live: list[int] = field(default_factory=list)
    next_id: int = 1
    committed: int = 0
    rolled_back: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="crash-test-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            assert not self._thread.is_alive(), "the writer did not stop"
        if self.error is not None:
            raise AssertionError(f"the writer failed: {self.error!r}") from self.error

    def wait_for_commits(self, count: int) -> None:
        """Wait until the writer committed ``count`` transactions in all."""

        def done() -> bool:
            if self.error is not None:
                raise AssertionError(f"the writer failed: {self.error!r}") from self.error
            return self.committed >= count

        wait_for(f"{count} transactions of the writer", done)

    def _run(self) -> None:
        try:
            with psycopg.connect(self.conninfo) as conn:
                while not self._stop.is_set():
                    self.transaction(conn)
                    self._stop.wait(self.pause)  # pacing, not synchronisation
        except BaseException as exc:
            self.error = exc

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def transaction(self, conn: psycopg.Connection[Any]) -> None:
        """One transaction: committed (inserts, updates, key updates, deletes, savepoints) or rolled back."""
        rnd = self.random
        kinds = ["insert", "update", "delete", "key", "mixed", "savepoint", "rollback"]
        kind = rnd.choices(kinds, weights=[4, 3, 2, 1, 2, 1, 2])[0]
        if len(self.live) < 5:
            kind = "insert"
        live = list(self.live)
        n = self.committed + self.rolled_back

        def insert(note: str) -> None:
            new = self._new_id()
            conn.execute("INSERT INTO t VALUES (%s, %s, %s)", (new, rnd.randrange(1000), f"{note}-{new}"))
            live.append(new)

        def update(note: str) -> None:
            target = rnd.choice(live)
            conn.execute("UPDATE t SET v = v + 1, note = %s WHERE id = %s", (f"{note}-{n}", target))

        def delete() -> None:
            target = live.pop(rnd.randrange(len(live)))
            conn.execute("DELETE FROM t WHERE id = %s", (target,))

        def change_key() -> None:
            old = live.pop(rnd.randrange(len(live)))
            new = self._new_id()
            conn.execute("UPDATE t SET id = %s, note = %s WHERE id = %s", (new, f"moved-{old}", old))
            live.append(new)

        if kind == "insert":
            for _ in range(rnd.randint(1, 4)):
                insert("ins")
        elif kind == "update":
            for _ in range(rnd.randint(1, 3)):
                update("upd")
        elif kind == "delete":
            for _ in range(rnd.randint(1, 2)):
                delete()
        elif kind == "key":
            change_key()
        elif kind == "mixed":
            insert("mix")
            update("mix")
            delete()
            change_key()
            update("mix2")
        elif kind == "savepoint":
            insert("sp")
            before = list(live)
            conn.execute("SAVEPOINT s")
            insert(MARKER)
            update(MARKER)
            conn.execute("ROLLBACK TO SAVEPOINT s")
            live[:] = before
            update("sp")
        else:
            insert(MARKER)
            update(MARKER)
            delete()
            conn.rollback()
            self.rolled_back += 1
            self.kinds[kind] += 1
            return
        conn.commit()
        self.live = live
        self.committed += 1
        self.kinds[kind] += 1


# ---- the pipeline -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pipeline:
    hook: PgReplicationHook
    store: PostgresStateStore
    settings: CaptureSettings
    ref_slot: str

    def capture(self, **overrides: Any) -> CaptureResult:
        return capture(self.hook, self.store, replace(self.settings, **overrides))

    def state(self) -> PipelineState:
        return self.store.load(self.settings.pipeline)

    def confirmed(self) -> LSN:
        info = self.hook.slot_info(self.settings.slot_name)
        assert info is not None and info.confirmed_flush_lsn is not None
        return info.confirmed_flush_lsn

    def drain(self, *, runs: int = 50) -> list[CaptureResult]:
        """Capture until a run finds no change and the slot is past the flush LSN of now."""
        flush = self.hook.wal_positions().flush
        results: list[CaptureResult] = []
        while not results or results[-1].changes or self.confirmed() < flush:
            assert len(results) < runs, f"not drained after {runs} captures: {results[-3:]}"
            results.append(self.capture(max_changes=100_000))
        return results


def make_pipeline(conn_id: str, conninfo: str, name: str, changelog: Path) -> Pipeline:
    """Table, publication, reference slot, capture slot and a state with the table in Init."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(DDL)
    hook = PgReplicationHook(postgres_conn_id=conn_id)
    hook.ensure_publication(PUBLICATION, [TABLE])
    slot = f"s_{name}"
    ref_slot = f"{slot}_ref"
    assert hook.ensure_slot(ref_slot).created
    assert hook.ensure_slot(slot).created
    store = PostgresStateStore(hook)
    store.save(PipelineState(f"p_{name}").with_table_phase(TABLE, Init()))
    settings = CaptureSettings(
        pipeline=f"p_{name}", slot_name=slot, publication_name=PUBLICATION, changelog_uri=str(changelog)
    )
    return Pipeline(hook, store, settings, ref_slot)


# ---- 1. crashes at every fail point, with a concurrent writer -----------------------------------

ROUNDS: tuple[dict[str, int], ...] = (
    {"max_changes": 200},
    {"max_changes": 100_000, "worker_from_bytes": 1},
)
"""Capture settings of each round: peeks cut by the change limit and decoded in place (rule 1),
then peeks that are not cut (idle advance, rule 3) decoded in a worker process."""


@pytest.mark.slow
def test_capture_survives_crashes_at_every_fail_point(
    database: Database, source_conn_id: str, tmp_path: Path
) -> None:
    pipeline = make_pipeline(source_conn_id, database.conninfo, database.name, tmp_path / "changelog")
    url = database.cluster.url(database.name, with_password=True)
    settings = pipeline.settings
    slot = settings.slot_name

    def run(fail_point: str, overrides: dict[str, int]) -> WorkerRun:
        done = run_capture_process(
            conn_id="pgsync_crash_src",
            conn_url=url,
            pipeline=settings.pipeline,
            slot=settings.slot_name,
            publication=PUBLICATION,
            changelog=settings.changelog_uri,
            max_changes=overrides["max_changes"],
            fail_point=fail_point,
            settings={k: v for k, v in overrides.items() if k != "max_changes"},
        )
        # the killed run's sessions end when the server notices; the next run must not race them
        wait_for("the capture worker's sessions to end", lambda: not _worker_sessions(database, slot))
        return done

    writer = Writer(database.conninfo, seed=20240611)
    deaths: Counter[str] = Counter()
    survived: Counter[str] = Counter()
    finished: list[CaptureResult] = []
    writer.start()
    try:
        for overrides in ROUNDS:
            for point in POINTS:
                writer.wait_for_commits(writer.committed + 20)  # always new work
                crashed = run(point, overrides)
                assert crashed.returncode in (0, EXIT_CODE), crashed.describe()
                if crashed.returncode == EXIT_CODE:
                    assert crashed.result is None, "the run printed a result after its fail point"
                    deaths[point] += 1
                else:
                    survived[point] += 1
                # a run that finishes, in this process (it is the same code without a fail point)
                writer.wait_for_commits(writer.committed + 20)
                finished.append(pipeline.capture(**overrides))
    finally:
        writer.stop()

    missed = [p for p in POINTS if deaths[p] == 0]
    assert not missed, f"no run died at {missed}: died {dict(deaths)}, finished anyway {dict(survived)}"
    assert writer.committed > 200 and writer.rolled_back > 10 and writer.kinds["savepoint"] > 5, writer.kinds
    assert any(r.idle for r in finished) and any(not r.idle for r in finished), finished

    drained = pipeline.drain()
    assert drained[-1].changes == 0
    changes = check_changelog(
        pipeline.hook, database.conninfo, pipeline.ref_slot, settings.changelog_uri, pipeline.state()
    )
    assert Counter(c.op for c in changes).keys() == {"I", "U", "D"}
    assert any(c.op == "U" and c.old_key is not None for c in changes), "no key update was captured"
    print(
        f"\n{writer.committed} transactions committed, {writer.rolled_back} rolled back "
        f"({dict(writer.kinds)}); {len(changes)} changes; deaths {dict(deaths)}, "
        f"finished despite the point {dict(survived)}; {len(drained)} drain run(s); "
        f"{len(pipeline.state().segments)} segments in state"
    )


def _worker_sessions(database: Database, slot: str) -> bool:
    """Whether a session of a worker still holds the capture lock or the slot."""
    rows = database.execute(
        "SELECT (SELECT count(*) FROM pg_stat_activity WHERE application_name = %s)"
        " + (SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s AND active)",
        (HOLDER, slot),
    )
    return bool(rows[0][0])


# ---- 2. the server stops immediately after an advance -------------------------------------------


@pytest.fixture(scope="module")
def crash_cluster(pg_cluster: Cluster) -> Iterator[Cluster]:
    """A private cluster of this module's own, to stop with ``-m immediate``."""
    cluster = Cluster(root=pg_cluster.root.parent / f"test-pg-crash-{os.getpid()}", port=free_port())
    try:
        cluster.start()
        cluster.create_database("src")
        yield cluster
    finally:
        cluster.destroy()


@pytest.mark.slow
def test_capture_survives_an_immediate_server_stop(
    crash_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_CRASH", crash_cluster.url("src", with_password=True))
    conninfo = crash_cluster.conninfo("src")
    pipeline = make_pipeline("pgsync_crash", conninfo, "src", tmp_path / "changelog")
    writer = Writer(conninfo, seed=7)
    with psycopg.connect(conninfo) as conn:
        for _ in range(150):
            writer.transaction(conn)

    first = pipeline.capture(max_changes=200)
    assert first.changes > 0 and not first.idle and first.advanced_to is not None
    assert pipeline.confirmed() == first.advanced_to == pipeline.state().last_end_lsn

    # a transaction in flight when the server dies, and the immediate stop itself
    with contextlib.closing(psycopg.connect(conninfo)) as in_flight:
        in_flight.execute("INSERT INTO t VALUES (-1, 0, %s)", (f"{MARKER}-in-flight",))
        in_flight.execute("UPDATE t SET note = %s", (f"{MARKER}-in-flight",))
        crash_cluster.stop("immediate")
        crash_cluster.start()

    # PostgreSQL persists an advanced logical slot only at a checkpoint: the advance is
    # gone, so the next capture re-peeks what the state holds already
    after = pipeline.confirmed()
    assert after < first.advanced_to, f"the slot kept {after} (advanced to {first.advanced_to})"
    assert pipeline.state().last_end_lsn == first.advanced_to

    with psycopg.connect(conninfo) as conn:
        for _ in range(150):
            writer.transaction(conn)
    results = pipeline.drain()
    assert sum(r.changes for r in results) > 0
    changes = check_changelog(
        pipeline.hook, conninfo, pipeline.ref_slot, pipeline.settings.changelog_uri, pipeline.state()
    )
    assert writer.rolled_back > 0
    print(f"\n{len(changes)} changes; slot back from {first.advanced_to} to {after} after the stop")
