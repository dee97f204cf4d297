"""ACCEPTANCE (DESIGN §2 rule 3): writes to unpublished tables never make the slot retain WAL.

What capture controls is the slot's confirmed position: every idle run advances it to
the peek's ``upto_lsn``. The server moves the slot's ``restart_lsn`` (what it retains)
only up to a running-transactions record (``xl_running_xacts``) behind the confirmed
position. PostgreSQL writes one at every checkpoint and from the background writer at
most every 15 seconds; PostgreSQL 16+ also on demand (``pg_log_standby_snapshot()``).
The first test stands in for the background writer with a ``CHECKPOINT`` per round and
shows capture releases the WAL at every such point; the second uses nothing but
captures and waits (polling, with a deadline) for the background writer's next record.
"""

from __future__ import annotations

from tests.capture.conftest import MakePipeline, Pipeline, wait_for

MB = 2**20
ROUNDS = 20
DDL = [
    "CREATE TABLE published (id int PRIMARY KEY)",
    "CREATE TABLE unpublished (id bigint GENERATED ALWAYS AS IDENTITY, pad text)",
]
ONE_MB = "INSERT INTO unpublished (pad) SELECT repeat(md5(g::text), 30) FROM generate_series(1, 1000) g"


def _rounds(pipeline: Pipeline, *, checkpoint: bool) -> list[int]:
    """ROUNDS times: ~1 MB into the unpublished table, capture; the slot's retained bytes after each."""
    start = pipeline.slot_info()
    assert start.restart_lsn is not None and start.confirmed_flush_lsn is not None
    retained: list[int] = []
    for _ in range(ROUNDS):
        pipeline.database.execute(ONE_MB)
        if checkpoint:
            pipeline.database.execute("CHECKPOINT")  # logs xl_running_xacts, as the bgwriter does
        result = pipeline.capture()
        assert (result.changes, result.transactions, result.segments, result.idle) == (0, 0, (), True)
        info = pipeline.slot_info()
        assert result.advanced_to is not None
        assert info.confirmed_flush_lsn == pipeline.state().last_end_lsn == result.advanced_to
        assert info.retained_bytes is not None
        retained.append(info.retained_bytes)

    end = pipeline.slot_info()
    assert end.confirmed_flush_lsn is not None and end.restart_lsn is not None
    wal_written = end.confirmed_flush_lsn - start.confirmed_flush_lsn
    assert wal_written > (ROUNDS - 1) * MB, f"the test wrote only {wal_written:,} bytes of WAL"
    assert pipeline.state().segments == ()
    assert pipeline.changes("published") == []
    if checkpoint:
        assert end.restart_lsn > start.restart_lsn, f"restart_lsn stayed at {start.restart_lsn}"
    return retained


def test_idle_captures_release_wal_at_every_snapshot_point(make_pipeline: MakePipeline) -> None:
    pipeline = make_pipeline(DDL, ["published"])

    retained = _rounds(pipeline, checkpoint=True)

    assert max(retained) < 4 * MB, f"the slot retained {[f'{r / MB:.1f} MB' for r in retained]}"


def test_idle_captures_release_wal_without_help(make_pipeline: MakePipeline) -> None:
    """Nothing but captures: once the background writer has logged its next running-transactions
    record (at most 15 s after WAL was written), the next idle capture releases the WAL."""
    pipeline = make_pipeline(DDL, ["published"])
    start = pipeline.slot_info().restart_lsn
    _rounds(pipeline, checkpoint=False)

    def released() -> bool:
        result = pipeline.capture()
        assert (result.changes, result.segments) == (0, ())
        retained = pipeline.slot_info().retained_bytes
        return retained is not None and retained < 4 * MB

    wait_for("an idle capture to release the WAL of the unpublished writes", released, timeout=60, step=0.5)
    end = pipeline.slot_info().restart_lsn
    assert start is not None and end is not None and end > start
