"""Retention: what each destination phase still needs (pure), and the apply operator deleting
what every destination is done with on real servers, keeping what a stopped one needs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.changelog.retention import expired_files, unneeded_segments, watermark_lsn
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.state.model import PipelineState, SegmentInfo
from airflow_provider_pgsync.state.phases import DataSync, Errored, Init, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline, Pipeline, make_pipeline  # noqa: F401 (the fixture)
from tests.conftest import Database, MakeReplica
from tests.support.replica import empty_baseline, rows

T = "public.t"
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _segment(n: int, *, xids: tuple[int, int] = (100, 110), version: int = 0) -> SegmentInfo:
    return SegmentInfo(f"{T}/s{n}", T, version, LSN(n * 100), LSN(n * 100 + 50), xids[0], xids[1], 10)


def _state(segments: list[SegmentInfo], **phases: Any) -> PipelineState:
    state = PipelineState("p", segments=segments).with_table_phase(T, Init())
    for name, (phase, watermark) in phases.items():
        if not isinstance(phase, Init):
            state = state.with_destination_phase(T, name, DataSync("L"))
        if isinstance(phase, SyncDone | Ready | Errored):
            state = state.with_destination_phase(T, name, SyncDone("s", LSN(150), 200, 210, lineage="L"))
        if isinstance(phase, Ready | Errored):
            state = state.with_destination_phase(T, name, Ready())
        if isinstance(phase, Errored):
            state = state.with_destination_phase(T, name, phase)
        state = state.with_destination_watermark(T, name, watermark)
    return state


def _gone(state: PipelineState, names: list[str]) -> list[int]:
    return [int(s.path.rsplit("s", 1)[1]) for s in unneeded_segments(state, names)]


def test_each_phase_keeps_what_it_still_reads() -> None:
    segs = [_segment(1), _segment(2, xids=(205, 212)), _segment(3, xids=(300, 301)), _segment(4)]
    # Ready at segment 3's last commit: it may still be part-way through that transaction
    ready = (Ready(), f"{LSN(350)}/4")
    assert _gone(_state(segs, lake=ready), ["lake"]) == [1, 2]
    # the slowest destination decides; one that never reported a watermark keeps everything
    assert _gone(_state(segs, lake=ready, pg=(Ready(), f"{LSN(250)}/1")), ["lake", "pg"]) == [1]
    assert _gone(_state(segs, lake=ready, pg=(Ready(), None)), ["lake", "pg"]) == []
    # a hand-off without a watermark yet reads the segments that may hold xids >= its xmin (200)
    handoff = (SyncDone("s", LSN(150), 200, 210, lineage="L"), None)
    assert _gone(_state(segs, lake=ready, pg=handoff), ["lake", "pg"]) == [1]
    # a running baseline keeps everything; Init and Errored for good keep nothing
    assert _gone(_state(segs, lake=ready, pg=(DataSync("L"), None)), ["lake", "pg"]) == []
    assert _gone(_state(segs, lake=ready, pg=(Init(), None)), ["lake", "pg"]) == [1, 2]
    for_good = Errored("lost rows", "rebaseline", retry="none")
    assert _gone(_state(segs, lake=ready, pg=(for_good, f"{LSN(150)}/1")), ["lake", "pg"]) == [1, 2]
    # an Errored destination that will resume keeps what it reads from its watermark
    resumable = Errored("down", "start it", retry="manual")
    assert _gone(_state(segs, lake=ready, pg=(resumable, f"{LSN(150)}/1")), ["lake", "pg"]) == []
    assert _gone(_state(segs, lake=ready, pg=(resumable, f"{LSN(200)}/1")), ["lake", "pg"]) == [1]
    assert _gone(_state(segs), []) == []  # no destination known: nothing goes


def test_a_pending_backfill_keeps_what_its_snapshot_did_not_see() -> None:
    from airflow_provider_pgsync.state.model import Backfill

    segs = [_segment(1), _segment(2, xids=(205, 212))]
    state = _state(segs, lake=(Ready(), f"{LSN(900)}/1"))
    backfill = Backfill("b1", "", "s", LSN(100), 204, 210, (), {"lake": "/x"})
    assert _gone(state.with_backfill(T, backfill), ["lake"]) == [1]


def test_files_go_once_unlisted_passed_and_older_than_the_retention() -> None:
    state = _state([_segment(3)], lake=(Ready(), None))
    state = PipelineState.from_json({**state.to_json(), "last_end_lsn": str(LSN(350))})
    old, young = NOW - timedelta(days=8), NOW - timedelta(hours=1)
    files = [
        (f"{T}/s3", 300, old),  # listed: a destination needs it
        ("public.t/v0000/a.parquet", 100, old),  # done with and old: goes
        ("public.t/v0000/b.parquet", 200, young),  # done with, kept for the retention
        ("public.t/v0000/c.parquet", 400, old),  # after last_end_lsn: a capture is writing it
    ]
    week = timedelta(days=7)
    assert expired_files(files, state, now=NOW, retention=week) == ["public.t/v0000/a.parquet"]
    zero = timedelta(0)
    assert expired_files(files, state, now=NOW, retention=zero) == [
        "public.t/v0000/a.parquet",
        "public.t/v0000/b.parquet",
    ]
    assert expired_files(files, PipelineState("p"), now=NOW, retention=zero) == []  # nothing captured


def test_watermark_text() -> None:
    assert watermark_lsn("0/16B3748/3") == LSN.parse("0/16B3748")
    assert watermark_lsn(None) is None and watermark_lsn("nonsense") is None


@pytest.fixture
def replicas(make_replica: MakeReplica) -> list[Database]:
    return [make_replica("fast"), make_replica("slow")]


def _apply(pipeline: Pipeline, source_conn_id: str, names: list[str], retention: float = 0) -> None:
    op = PgApplyOperator(
        task_id="apply",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        destinations=[{"kind": "postgres", "conn_id": f"pgsync_{n}", "name": n} for n in names],
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
        retention=retention,
    )
    op.execute(context={})  # type: ignore[arg-type]


def _segment_files(pipeline: Pipeline) -> set[str]:
    root = Path(pipeline.settings.changelog_uri)
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet")}


def test_a_stopped_destination_keeps_what_it_needs_and_the_state_stays_flat(
    database: Database,
    replicas: list[Database],
    make_pipeline: MakePipeline,  # noqa: F811
    source_conn_id: str,
) -> None:
    fast, slow = replicas
    pipeline = make_pipeline(["CREATE TABLE t (id int PRIMARY KEY, n int)"], ["t"])
    xmax, lsn = database.execute(
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text"
    )[0]
    done = SyncDone("00000003-00000002-1", LSN.parse(str(lsn)), int(str(xmax)), int(str(xmax)), lineage="L")

    def handed_off(state: PipelineState) -> PipelineState:
        for name in ("fast", "slow"):
            state = state.with_destination_phase(T, name, DataSync("L"))
            state = state.with_destination_phase(T, name, done)
        return state

    for name, replica in zip(("fast", "slow"), replicas, strict=True):
        empty_baseline(database, replica, name, T, "L")

    update_state(pipeline.store, pipeline.name, handed_off)
    sizes = []
    for i in range(40):  # both destinations keep up: the state and the changelog stay small
        database.execute("INSERT INTO t VALUES (%s, 0) ON CONFLICT (id) DO UPDATE SET n = t.n + 1", (i % 7,))
        pipeline.capture()
        _apply(pipeline, source_conn_id, ["fast", "slow"])
        sizes.append(len(str(pipeline.state().to_json())))
    assert max(sizes[5:]) <= sizes[5] + 64, sizes  # flat, whatever the number of runs
    assert len(pipeline.state().segments) <= 1 and len(_segment_files(pipeline)) <= 1

    # "slow" stops being applied (its runs are not asked for): what it has not applied stays
    for i in range(10):
        database.execute("UPDATE t SET n = n + 100 WHERE id = %s", (i % 7,))
        pipeline.capture()
        _apply(pipeline, source_conn_id, ["fast"])
    kept = pipeline.state().segments
    assert len(kept) >= 10 and {s.path for s in kept} <= _segment_files(pipeline)
    root = Path(pipeline.settings.changelog_uri)
    retained = Changelog(pipeline.settings.changelog_uri).retained_bytes()
    assert (
        retained == sum((root / f).stat().st_size for f in _segment_files(pipeline)) > 0
    )  # the status page's figure
    assert rows(fast, T) == rows(database, T)

    _apply(pipeline, source_conn_id, ["fast", "slow"])  # it catches up: everything it needed was there
    assert rows(slow, T) == rows(database, T)
    assert len(pipeline.state().segments) <= 1 and len(_segment_files(pipeline)) <= 1

    # a retention of a day: the state still lists only what is needed, the files stay
    for i in range(5):
        database.execute("UPDATE t SET n = n + 1 WHERE id = %s", (i,))
        pipeline.capture()
        _apply(pipeline, source_conn_id, ["fast", "slow"], retention=86_400)
    assert len(pipeline.state().segments) <= 1 and len(_segment_files(pipeline)) >= 5
    _apply(pipeline, source_conn_id, ["fast", "slow"])  # the retention over: they go
    assert len(_segment_files(pipeline)) <= 1
