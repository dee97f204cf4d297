"""64-bit xids in the changelog against a real server whose xid counter is moved with pg_resetwal.

A private cluster (not the session's: its WAL and xid counter are reset) is driven through:

1. transactions captured at small xids into segments, the slot advanced past them, then the
   next xid moved forward by more than 2^31 in steps (every database frozen before each
   ``pg_resetwal -x``), and a new snapshot taken: the old segment's changes are visible in it
   (already in a base taken from it) and ``may_hold_unseen`` says the segment is not needed,
   where widening their 32-bit xids against the snapshot would put them after it;
2. the next xid moved to just below 2^32, a baseline snapshot taken with a transaction in
   progress, then transactions across the epoch wrap, captured (in place and in the decoding
   worker process): every ``_xid`` equals the writing transaction's ``pg_current_xact_id()``
   and the visibility rule against the snapshot is exact.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from airflow_provider_pgsync.apply.run import _after_baseline
from airflow_provider_pgsync.baseline.handoff import not_visible, visible_in_snapshot, widen_xid
from airflow_provider_pgsync.capture.run import CaptureSettings, capture
from airflow_provider_pgsync.changelog.prune import may_hold_unseen
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.snapshot import parse_snapshot
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.state.model import Init, PipelineState, SegmentInfo
from airflow_provider_pgsync.state.phases import SyncDone
from pgcluster import Cluster, default_base_dir, server_user
from tests.conftest import free_port

FULL, HALF, MASK = 1 << 32, 1 << 31, (1 << 32) - 1
CLOG_XACTS_PER_SEGMENT = 1 << 20  # 32 pages of 8 kB, 2 bits a transaction
CLOG_SEGMENT_BYTES = 32 * 8192
DB, TABLE, PUBLICATION, CONN_ID = "xid64", "public.t", "pgsync_pub", "pgsync_xid64"


@pytest.fixture
def wrap_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """A private cluster with one database ``xid64`` holding table t(id, xid), and an Airflow
    connection to it."""
    cluster = Cluster(root=default_base_dir(server_user()) / f"test-pg-xid64-{os.getpid()}", port=free_port())
    try:
        cluster.start()
        cluster.create_database(DB)
        with psycopg.connect(cluster.conninfo(DB), autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY, xid bigint NOT NULL)")
        monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", cluster.url(DB, with_password=True))
        yield cluster
    finally:
        cluster.destroy()


def next_xid(cluster: Cluster) -> int:
    """The server's next 64-bit xid (no transaction id is assigned to ask)."""
    with psycopg.connect(cluster.conninfo(DB), autocommit=True) as conn:
        row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
    assert row is not None
    return int(row[0])


def freeze_every_database(cluster: Cluster) -> None:
    with psycopg.connect(cluster.conninfo("postgres"), autocommit=True) as conn:
        conn.execute("ALTER DATABASE template0 WITH ALLOW_CONNECTIONS true")
        names = [str(r[0]) for r in conn.execute("SELECT datname FROM pg_database").fetchall()]
    for name in names:
        with psycopg.connect(cluster.conninfo(name), autocommit=True) as conn:
            conn.execute("VACUUM FREEZE")


def move_next_xid(cluster: Cluster, target: int) -> None:
    """Freeze every database, stop, ``pg_resetwal -x`` (and ``-e``) to 64-bit ``target``, start.

    The pg_xact segment of the new xid must exist (pg_resetwal's documentation): a zero-filled
    one is created. The server's wraparound protection needs every step below 2^31.
    """
    assert 0 < target - next_xid(cluster) < HALF - 10_000_000
    freeze_every_database(cluster)
    cluster.stop()
    clog = cluster.datadir / "pg_xact" / f"{(target & MASK) // CLOG_XACTS_PER_SEGMENT:04X}"
    if not clog.exists():
        clog.write_bytes(bytes(CLOG_SEGMENT_BYTES))
        if cluster.user is not None:
            os.chown(clog, *_ids(cluster.datadir))
    result = cluster._run(
        ["pg_resetwal", "-e", str(target >> 32), "-x", str(target & MASK), "-D", str(cluster.datadir)],
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    cluster.start()
    assert next_xid(cluster) == target
    freeze_every_database(cluster)  # the databases' frozen xids catch up with the new counter


def _ids(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid


@dataclass
class Pipeline:
    hook: PgReplicationHook
    store: PostgresStateStore
    settings: CaptureSettings

    def capture_until_idle(self, **overrides: Any) -> None:
        import dataclasses

        for _ in range(50):
            if capture(self.hook, self.store, dataclasses.replace(self.settings, **overrides)).idle:
                return
        pytest.fail("capture was not idle after 50 runs")

    def segments(self) -> list[SegmentInfo]:
        return [s for s in self.store.load(self.settings.pipeline).segments if s.table == TABLE]

    def changes(self, segments: list[SegmentInfo], reference: int | None = None) -> pa.Table:
        log = Changelog(self.settings.changelog_uri)
        return pa.Table.from_batches(
            [b for _, b in log.read_changes(TABLE, segments, xid_reference=reference)]
        )


def make_pipeline(name: str, changelog: Path) -> Pipeline:
    hook = PgReplicationHook(postgres_conn_id=CONN_ID)
    hook.ensure_publication(PUBLICATION, [TABLE])
    creation = hook.ensure_slot(name)
    assert creation.consistent_point is not None
    store = PostgresStateStore(hook)
    store.save(PipelineState(name).with_slot(name, creation.consistent_point).with_table_phase(TABLE, Init()))
    settings = CaptureSettings(
        pipeline=name, slot_name=name, publication_name=PUBLICATION, changelog_uri=str(changelog)
    )
    return Pipeline(hook, store, settings)


def write(conn: psycopg.Connection[Any], row_id: int) -> int:
    """One committed transaction inserting row ``row_id`` with its own 64-bit xid; that xid."""
    row = conn.execute(
        "INSERT INTO t VALUES (%s, pg_current_xact_id()::text::bigint) RETURNING xid", (row_id,)
    ).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def catalog_xmin(cluster: Cluster, slot: str) -> int:
    with psycopg.connect(cluster.conninfo(DB), autocommit=True) as conn:
        row = conn.execute(
            "SELECT catalog_xmin::text::bigint FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    assert row is not None and row[0] is not None
    return int(row[0])


def snapshot(cluster: Cluster) -> SyncDone:
    with psycopg.connect(cluster.conninfo(DB), autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    xmin, xmax, xip = parse_snapshot(str(row[0]))
    return SyncDone("00000003-00000002-1", LSN.parse(str(row[1])), xmin, xmax, xip)


def test_xids_are_64_bit_across_epochs_and_for_an_old_changelog(
    wrap_cluster: Cluster, tmp_path: Path
) -> None:
    cluster = wrap_cluster

    # ---- 1. an old changelog: captured, slot advanced past it, then > 2^31 xids later
    old = make_pipeline("p_old", tmp_path / "old")
    with psycopg.connect(cluster.conninfo(DB)) as conn:
        old_xids = [write(conn, k) for k in range(5)]
    with psycopg.connect(cluster.conninfo(DB), autocommit=True) as admin:
        for _ in range(3):  # a running-xacts record past the writes lets the slot's catalog_xmin move
            admin.execute("CHECKPOINT")
            old.capture_until_idle()
            if catalog_xmin(cluster, "p_old") > max(old_xids):
                break
    assert catalog_xmin(cluster, "p_old") > max(old_xids), (
        "capture did not move the slot past its transactions"
    )
    old_segments = old.segments()
    assert old_segments and all(s.xid_bits == 64 for s in old_segments)
    assert old.changes(old_segments).column("_xid").to_pylist() == old_xids
    # pg_resetwal removes the WAL the slot would decode from: a slot cannot live through it
    assert old.hook.drop_slot("p_old")

    for target in (1_500_000_000, 3_000_000_000):
        move_next_xid(cluster, target)
    rebaseline = snapshot(cluster)
    assert rebaseline.xmin - max(old_xids) > HALF
    [seg_old] = old_segments
    assert not may_hold_unseen(seg_old, rebaseline.xmin)
    changes = old.changes(old_segments, reference=rebaseline.xmax)
    assert changes.column("_xid").to_pylist() == old_xids
    assert not not_visible(changes.column("_xid"), rebaseline.xmin, rebaseline.xmax, rebaseline.xip).any()
    for batch in changes.to_batches():
        assert _after_baseline(batch, rebaseline).num_rows == 0  # all in a base taken from the snapshot
    # what 32-bit xids widened against the new snapshot would have said: after it, re-applied
    assert all(
        not visible_in_snapshot(widen_xid(x & MASK, rebaseline.xmax), *_parts(rebaseline)) for x in old_xids
    )

    # ---- 2. the epoch wraps between a baseline snapshot and the capture
    move_next_xid(cluster, FULL - 300)
    pipeline = make_pipeline("p_wrap", tmp_path / "wrap")
    with psycopg.connect(cluster.conninfo(DB)) as conn, psycopg.connect(cluster.conninfo(DB)) as running:
        before = [write(conn, 100 + k) for k in range(2)]
        in_progress = int(
            running.execute(
                "INSERT INTO t VALUES (99, pg_current_xact_id()::text::bigint) RETURNING xid"
            ).fetchone()[0]  # type: ignore[index]
        )
        before.append(write(conn, 102))  # committed after the running one began: it goes in xip
        baseline = snapshot(cluster)
        after = [write(conn, 1000 + k) for k in range(200)]
        pipeline.capture_until_idle(max_changes=50)  # in place, peeks cut by the change limit
        after += [write(conn, 2000 + k) for k in range(200)]
        running.commit()
    pipeline.capture_until_idle(worker_from_bytes=1)  # decoded in the worker process
    assert in_progress in baseline.xip and baseline.xmax < FULL
    assert max(before) < FULL <= max(after), "the writes did not cross the epoch boundary"

    segments = pipeline.segments()
    assert all(s.xid_bits == 64 for s in segments)
    assert min(s.min_xid for s in segments) < FULL <= max(s.max_xid for s in segments)
    changes = pipeline.changes(segments)
    xids = changes.column("_xid").to_pylist()
    assert xids == [int(x) for x in changes.column("xid").to_pylist()]  # pg_current_xact_id() of the writer
    assert sorted(xids) == sorted([*before, in_progress, *after])
    unseen = not_visible(changes.column("_xid"), *_parts(baseline)).tolist()
    assert unseen == [x not in before for x in xids]
    kept = pa.concat_tables(
        pa.Table.from_batches([_after_baseline(b, baseline)]) for b in changes.to_batches()
    )
    assert sorted(kept.column("_xid").to_pylist()) == sorted([in_progress, *after])
    assert [may_hold_unseen(s, baseline.xmin) for s in segments] == [
        s.max_xid >= baseline.xmin for s in segments
    ]
    assert any(may_hold_unseen(s, baseline.xmin) for s in segments)


def _parts(done: SyncDone) -> tuple[int, int, tuple[int, ...]]:
    return done.xmin, done.xmax, done.xip
