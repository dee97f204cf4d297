"""The baseline hand-off under concurrent writes (DESIGN §2 rule 5), on local and local-cluster Spark.

A writer thread commits small transactions (inserts, updates, key updates, deletes and a
few rollbacks) from before the baseline until after it, so many of them commit while the
Spark job reads the table in parallel ctid ranges. Two things must hold exactly:

1. the base is the table as of the exported snapshot, row for row: the expected rows are
   read by a second connection that joins the snapshot while the operator still holds it
   (a subclass of the operator reads them at the start of ``_run_job``);
2. base + captured changes, each applied iff its transaction is not visible in the
   snapshot (``applies_after_baseline``), replays to the source's current rows, with no
   conflict (no insert of a present key, no update or delete of a missing one), while
   applying every captured change conflicts (the base already holds the earlier ones).
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from airflow_provider_pgsync.baseline.handoff import applies_after_baseline
from airflow_provider_pgsync.baseline.spec import BaselineJobSpec, BaselineResult
from airflow_provider_pgsync.capture.run import CaptureResult, CaptureSettings, capture
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.state.model import Init, PipelineState, SyncDone
from tests.baseline.conftest import PIPELINE, pipeline_state, read_base
from tests.capture.conftest import Change, read_changes
from tests.conftest import Database

TABLE, KEY = "t", "public.t"
ROWS = 200_000
COLUMNS = ("id", "grp", "val", "n")
DDL = "CREATE TABLE t (id int PRIMARY KEY, grp int NOT NULL, val text, n bigint)"
LOAD = "INSERT INTO t SELECT g, g %% 100, md5(g::text), g::bigint * 1000 FROM generate_series(1, %s) g"
PUBLICATION = "pgsync_pub"
FIRST_NEW_ID = 1_000_001
WRITES_BEFORE = 20  # writer commits before the baseline starts
WRITES_AFTER = 20  # writer commits after the Spark job ended
WAIT_SECONDS = 60.0
OPERATIONS = {"insert": 30, "update": 30, "update_key": 15, "update_range": 5, "delete": 20}
"""The writer's statements and their weights."""

Row = tuple[int, int, str | None, int | None]


# ---- the writer ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WriterCommit:
    """One committed writer transaction: its 64-bit xid, rows it touched, when COMMIT returned."""

    xid: int
    rows: int
    at: float


@dataclass
class Writer:
    """Commits small random transactions on its own connection until ``stop`` is set."""

    conninfo: str
    seed: int
    stop: threading.Event = field(default_factory=threading.Event)
    commits: list[WriterCommit] = field(default_factory=list)
    rollbacks: int = 0
    ops: Counter[str] = field(default_factory=lambda: Counter(dict.fromkeys(OPERATIONS, 0)))
    error: BaseException | None = None
    _next_id: int = FIRST_NEW_ID
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="baseline-writer", daemon=True)
        self._thread.start()

    def finish(self) -> None:
        """Stop the writer and wait for it; re-raise what stopped it early, if anything."""
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT_SECONDS)
            assert not self._thread.is_alive(), f"the writer did not stop; {self.summary()}"
        if self.error is not None:
            raise AssertionError(f"the writer failed; {self.summary()}") from self.error

    def commits_after(self, moment: float) -> int:
        return sum(1 for c in list(self.commits) if c.at > moment)

    def summary(self) -> str:
        return (
            f"writer seed {self.seed}: {len(self.commits)} commits, {self.rollbacks} rollbacks, "
            f"operations {dict(self.ops)}"
        )

    def _run(self) -> None:
        rng = random.Random(self.seed)
        try:
            with psycopg.connect(self.conninfo, autocommit=False) as conn:
                while not self.stop.is_set():
                    row = conn.execute("SELECT txid_current()").fetchone()
                    assert row is not None
                    touched = sum(self._operation(conn, rng) for _ in range(rng.randint(1, 4)))
                    if rng.random() < 0.05:
                        conn.rollback()
                        self.rollbacks += 1
                    else:
                        conn.commit()
                        self.commits.append(WriterCommit(int(row[0]), touched, time.monotonic()))
                    self.stop.wait(0.005)  # pacing only
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def _operation(self, conn: psycopg.Connection[Any], rng: random.Random) -> int:
        """One random statement; the number of rows it touched."""
        [kind] = rng.choices(list(OPERATIONS), list(OPERATIONS.values()))
        target = self._target(rng)
        self.ops[kind] += 1
        if kind == "insert":
            new = self._new_id()
            cur = conn.execute(
                "INSERT INTO t VALUES (%s, %s, %s, %s)",
                (new, rng.randrange(100), None if rng.random() < 0.2 else f"w{rng.randrange(10**6)}", new),
            )
        elif kind == "update":
            cur = conn.execute(
                "UPDATE t SET val = %s, n = n + 1 WHERE id = %s",
                (None if rng.random() < 0.1 else f"u{rng.randrange(10**6)}", target),
            )
        elif kind == "update_key":
            cur = conn.execute("UPDATE t SET id = %s, grp = grp + 1 WHERE id = %s", (self._new_id(), target))
        elif kind == "update_range":
            cur = conn.execute("UPDATE t SET grp = grp + 1 WHERE id BETWEEN %s AND %s", (target, target + 3))
        else:
            cur = conn.execute("DELETE FROM t WHERE id = %s", (target,))
        return max(cur.rowcount, 0)

    def _target(self, rng: random.Random) -> int:
        """An existing-looking id: half the time one of the writer's own, else one of the load."""
        if self._next_id > FIRST_NEW_ID and rng.random() < 0.5:
            return rng.randrange(FIRST_NEW_ID, self._next_id)
        return rng.randint(1, ROWS)

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1


# ---- the operator, reading the snapshot's rows while it holds the snapshot ------------------


class SnapshotReadingBaseline(PgBaselineOperator):
    """PgBaselineOperator that reads the table in the exported snapshot just before the Spark job."""

    def __init__(self, *, snapshot_conninfo: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.snapshot_conninfo = snapshot_conninfo
        self.snapshot_id: str | None = None
        self.snapshot_rows: list[Row] | None = None
        self.job_started: float | None = None
        self.job_ended: float | None = None
        self.xid_at_start: int | None = None
        self.xid_at_end: int | None = None

    def _run_job(self, spec: BaselineJobSpec) -> BaselineResult:
        match = re.search(r"SET TRANSACTION SNAPSHOT '([^']+)'", spec.session_init)
        assert match is not None, f"no snapshot in the session init: {spec.session_init}"
        self.snapshot_id = match[1]
        with psycopg.connect(self.snapshot_conninfo, autocommit=True) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(self.snapshot_id)))
            self.snapshot_rows = _typed(conn.execute(_select_all()).fetchall())
            conn.execute("COMMIT")
            self.xid_at_start = _new_xid(conn)
        self.job_started = time.monotonic()
        try:
            return super()._run_job(spec)
        finally:
            self.job_ended = time.monotonic()
            with psycopg.connect(self.snapshot_conninfo, autocommit=True) as conn:
                self.xid_at_end = _new_xid(conn)


def _new_xid(conn: psycopg.Connection[Any]) -> int:
    """A freshly assigned transaction id (64 bits): transactions that begin later have higher ones."""
    row = conn.execute("SELECT txid_current()").fetchone()
    assert row is not None
    return int(row[0])


# ---- replay --------------------------------------------------------------------------------


@dataclass
class Replay:
    """Base + changes: the resulting rows, which transactions were applied or skipped, conflicts."""

    rows: dict[int, Row]
    applied: set[int] = field(default_factory=set)
    skipped: set[int] = field(default_factory=set)
    conflicts: list[str] = field(default_factory=list)


def replay(base: Iterable[Row], changes: Sequence[Change], applies: Callable[[int], bool]) -> Replay:
    """Apply ``changes`` in (commit LSN, seq) order on ``base``, each iff ``applies(xid)``.

    Every operation is also checked strictly: an insert of a present key, or an update or
    delete of a missing one, is recorded as a conflict (and then applied as an upsert or a
    no-op delete).
    """
    out = Replay({row[0]: row for row in base})
    rows = out.rows
    for change in sorted(changes, key=lambda c: (c["_commit_lsn"], c["_seq"])):
        xid = int(change["_xid"])
        if not applies(xid):
            out.skipped.add(xid)
            continue
        out.applied.add(xid)
        op, where = change["_op"], f"xid {xid} at {change['_commit_lsn']}/{change['_seq']}"
        assert not change["_unchanged"], f"unexpected unchanged TOAST in {change}"
        if op == "T":
            rows.clear()
        elif op == "I":
            new = _change_row(change)
            if new[0] in rows:
                out.conflicts.append(f"{where}: insert of present key {new[0]}")
            rows[new[0]] = new
        elif op == "U":
            old = int(change["_old_key_id"] if change["_old_key_id"] is not None else change["id"])
            new = _change_row(change)
            if old not in rows:
                out.conflicts.append(f"{where}: update of missing key {old}")
            rows.pop(old, None)
            if new[0] != old and new[0] in rows:
                out.conflicts.append(f"{where}: key update onto present key {new[0]}")
            rows[new[0]] = new
        elif op == "D":
            old = int(change["_old_key_id"])
            if old not in rows:
                out.conflicts.append(f"{where}: delete of missing key {old}")
            rows.pop(old, None)
        else:
            raise AssertionError(f"unknown operation {op!r} in {change}")
    return out


def _change_row(change: Change) -> Row:
    """The new row of a change (the changelog holds values as the source prints them)."""
    val, n = change["val"], change["n"]
    return (int(change["id"]), int(change["grp"]), val, None if n is None else int(n))


def _typed(rows: Iterable[tuple[Any, ...]]) -> list[Row]:
    return [(int(r[0]), int(r[1]), r[2], None if r[3] is None else int(r[3])) for r in rows]


def _select_all() -> sql.Composed:
    return sql.SQL("SELECT {} FROM {} ORDER BY id").format(
        sql.SQL(", ").join(map(sql.Identifier, COLUMNS)), sql.Identifier(TABLE)
    )


def _wait_for(what: str, check: Callable[[], bool], writer: Writer) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not check():
        if writer.error is not None or time.monotonic() > deadline:
            writer.stop.set()
            pytest.fail(f"gave up waiting for {what}: {writer.summary()}; writer error: {writer.error!r}")
        time.sleep(0.02)


def _job_log(capfd: pytest.CaptureFixture[str]) -> str:
    """The Spark job's own log lines from the task log so far (printed again for the report)."""
    out, err = capfd.readouterr()
    lines = [line for line in (out + err).splitlines() if "pgsync baseline:" in line]
    print("\n".join(lines))
    return "\n".join(lines)


def _capture_until_idle(hook: PgReplicationHook, settings: CaptureSettings) -> list[CaptureResult]:
    store = PostgresStateStore(hook)
    results: list[CaptureResult] = []
    while not results or not results[-1].idle:
        assert len(results) < 100, "capture was not idle after 100 runs"
        results.append(capture(hook, store, settings))
    return results


# ---- the test ------------------------------------------------------------------------------

LOCAL_CLUSTER = "local-cluster[2,1,1024]"


@pytest.mark.slow
@pytest.mark.parametrize(
    "master",
    [pytest.param("local[*]", id="local"), pytest.param(LOCAL_CLUSTER, id="local-cluster")],
)
def test_baseline_is_the_snapshot_and_hands_off_exactly(
    master: str,
    database: Database,
    source_conn_id: str,
    lake: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    spark_kwargs: dict[str, Any] = {}
    if master == LOCAL_CLUSTER:
        monkeypatch.setenv(
            "AIRFLOW_CONN_SPARK_LOCAL_CLUSTER", f'{{"conn_type": "spark", "host": "{LOCAL_CLUSTER}"}}'
        )
        spark_kwargs["spark_conn_id"] = "spark_local_cluster"

    # 1. the table, then publication, slot and state (table in Init), as setup leaves them
    database.execute(DDL)
    database.execute(LOAD, (ROWS,))
    database.execute("VACUUM ANALYZE t")
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    hook.ensure_publication(PUBLICATION, [TABLE])
    slot = f"s_{database.name}"
    creation = hook.ensure_slot(slot)
    assert creation.created and creation.consistent_point is not None
    PostgresStateStore(hook).save(
        PipelineState(PIPELINE).with_slot(slot, creation.consistent_point).with_table_phase(KEY, Init())
    )

    # 2. the writer, running from before the baseline until after it
    seed = int(os.environ.get("PGSYNC_TEST_SEED", random.randrange(2**32)))
    writer = Writer(database.conninfo, seed)
    print(f"writer seed {seed} (set PGSYNC_TEST_SEED to repeat)")
    writer.start()
    try:
        _wait_for(f"{WRITES_BEFORE} writer commits", lambda: len(writer.commits) >= WRITES_BEFORE, writer)
        operator = SnapshotReadingBaseline(
            task_id="baseline",
            pipeline=PIPELINE,
            table=TABLE,
            postgres_conn_id=source_conn_id,
            state_backend="postgres",
            progress_seconds=2,
            target_partition_mb=2,
            snapshot_conninfo=database.conninfo,
            **spark_kwargs,
        )
        result = operator.execute({"ti": None})  # type: ignore[typeddict-item]
        assert operator.job_ended is not None
        job_ended = operator.job_ended
        _wait_for(
            f"{WRITES_AFTER} writer commits after the job",
            lambda: writer.commits_after(job_ended) >= WRITES_AFTER,
            writer,
        )
    finally:
        writer.finish()
    context = writer.summary()
    print(context)

    # the job ran on the asked master, in several partitions, while the writer committed
    job_log = _job_log(capfd)
    assert f"(master {master}," in job_log, f"the job's log does not name master {master}"
    assert result["partitions"] >= 4, result
    assert operator.job_started is not None
    during_job = [c for c in writer.commits if operator.job_started < c.at < job_ended]
    assert len(during_job) > 0, f"no writer transaction committed during the Spark job; {context}"
    # the same by xids: transactions that began during the job (the writer runs one at a
    # time, so all of them but the last also committed during it)
    assert operator.xid_at_start is not None and operator.xid_at_end is not None
    began_in_job = [c for c in writer.commits if operator.xid_at_start < c.xid < operator.xid_at_end]
    assert len(began_in_job) >= 2, f"{len(began_in_job)} writer transactions began during the job; {context}"

    # 3. the base is the table as of the exported snapshot, row for row
    state = pipeline_state(source_conn_id)
    done = state.table(KEY).phase
    assert isinstance(done, SyncDone), done
    assert operator.snapshot_id == result["snapshot"] == done.snapshot
    assert operator.snapshot_rows is not None
    expected_base = operator.snapshot_rows
    base = read_base(result)
    assert base.column_names == list(COLUMNS)
    base_rows = _typed(tuple(row.values()) for row in sorted(base.to_pylist(), key=lambda r: r["id"]))
    assert result["rows"] == len(base_rows), result
    assert len(base_rows) == len(expected_base), (
        f"base has {len(base_rows)} rows, snapshot {len(expected_base)}; {context}"
    )
    mismatches = [(b, e) for b, e in zip(base_rows, expected_base, strict=True) if b != e]
    assert not mismatches, (
        f"{len(mismatches)} base rows differ from the snapshot, e.g. {mismatches[:5]}; {context}"
    )
    # every transaction that began after the snapshot is invisible in it: the rule applies it
    later = [c.xid for c in writer.commits if c.xid > operator.xid_at_start]
    assert later and all(applies_after_baseline(xid, done) for xid in later), f"{done}; {context}"
    assert all(applies_after_baseline(xid & 0xFFFFFFFF, done) for xid in later), f"{done}; {context}"

    # 4. capture everything and replay it on the base by the visibility rule
    settings = CaptureSettings(
        pipeline=PIPELINE,
        slot_name=slot,
        publication_name=PUBLICATION,
        changelog_uri=str(tmp_path / "changelog"),
    )
    _capture_until_idle(hook, settings)
    changes = read_changes(settings.changelog_uri, KEY, pipeline_state(source_conn_id).segments)
    captured = {int(c["_xid"]) for c in changes}
    writer_xids = {c.xid & 0xFFFFFFFF for c in writer.commits if c.rows > 0}
    assert captured == writer_xids, (
        f"captured transactions differ from the writer's: {len(captured - writer_xids)} unexpected, "
        f"{len(writer_xids - captured)} missing; {context}"
    )

    ruled = replay(base_rows, changes, lambda xid: applies_after_baseline(xid, done))
    with database.connect() as conn:
        now = _typed(conn.execute(_select_all()).fetchall())
    assert now != expected_base, f"the writer changed nothing after the snapshot; {context}"
    assert not ruled.conflicts, f"{len(ruled.conflicts)} conflicts, e.g. {ruled.conflicts[:5]}; {context}"
    replayed = sorted(ruled.rows.values())
    wrong = len(set(replayed) ^ set(now))
    assert replayed == now, f"replay differs from the source in {wrong} rows; {done}; {context}"
    # both sides of the rule ran: earlier transactions skipped, later ones applied
    assert ruled.skipped and ruled.applied, (len(ruled.skipped), len(ruled.applied), context)
    assert ruled.skipped.isdisjoint(ruled.applied)

    # without the rule the replay conflicts: the base already holds the earlier changes
    naive = replay(base_rows, changes, lambda xid: True)
    assert naive.conflicts, f"applying every change did not conflict with the base; {context}"
    print(
        f"{master}: {result['partitions']} partitions, {len(during_job)} commits during the job "
        f"({len(began_in_job)} began in it), "
        f"{len(ruled.skipped)} transactions skipped, {len(ruled.applied)} applied, "
        f"{len(naive.conflicts)} conflicts without the rule"
    )
