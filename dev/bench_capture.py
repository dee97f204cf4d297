"""`dev/bench capture`: changes/s of capture (peek -> durable segments -> advance) over the
server's own decoding rate of the same backlog."""

from __future__ import annotations

import os
import shutil
import time

import psycopg
from bench import BENCH, bench_cluster
from psycopg import sql


def bench_capture(changes: int) -> float:
    os.environ.setdefault("AIRFLOW_HOME", str(BENCH / "airflow"))
    from airflow_provider_pgsync.capture.run import CaptureSettings, capture
    from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
    from airflow_provider_pgsync.hooks.replication import PgReplicationHook
    from airflow_provider_pgsync.state.phases import Init

    cluster = bench_cluster("bench-capture")
    db = "pgsync_bench_capture"
    cluster.create_database(db)
    single, bulk = changes // 2, changes // 2 // 1000
    print(f"backlog: {single:,} single-row transactions + {bulk:,} transactions of 1,000 rows, 5 columns")
    started = time.monotonic()
    with psycopg.connect(cluster.conninfo(db), autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE bench (id bigint PRIMARY KEY, qty int, label text, price double precision,"
            " at timestamptz) WITH (autovacuum_enabled = false)"  # no vacuum competing for the CPUs
        )
        conn.execute("CREATE PUBLICATION bench_pub FOR TABLE bench")
        conn.execute("SELECT pg_create_logical_replication_slot('bench_slot', 'pgoutput')")
        # a second slot at the same position, so our capture is timed twice too (best of 2)
        conn.execute("SELECT pg_copy_logical_replication_slot('bench_slot', 'bench_slot_2')")
        conn.execute(  # one transaction per row: DO blocks may COMMIT
            sql.SQL(
                "DO $$ BEGIN FOR i IN 1..{} LOOP"
                " INSERT INTO bench VALUES (i, i % 1000, 'item ' || i, i * 0.25, now()); COMMIT;"
                " END LOOP; END $$"
            ).format(sql.Literal(single))
        )
        conn.execute(
            sql.SQL(
                "DO $$ BEGIN FOR j IN 0..{} LOOP"
                " INSERT INTO bench SELECT {} + j * 1000 + g, g, 'bulk ' || g, g * 0.5, now()"
                " FROM generate_series(1, 1000) g; COMMIT; END LOOP; END $$"
            ).format(sql.Literal(bulk - 1), sql.Literal(single))
        )
        print(f"backlog built in {time.monotonic() - started:.1f} s")
        raw = []
        for _ in range(2):
            t0 = time.monotonic()
            conn.execute(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('bench_slot', NULL, NULL,"
                " 'proto_version', '2', 'publication_names', 'bench_pub')"
            )
            raw.append(time.monotonic() - t0)
    raw_rate = changes / min(raw)
    print(f"server decode (count(*) of a peek, best of 2): {min(raw):.2f} s, {raw_rate:,.0f} changes/s")

    os.environ["AIRFLOW_CONN_PGSYNC_BENCH"] = cluster.url(db, with_password=True)
    hook = PgReplicationHook(postgres_conn_id="pgsync_bench")
    store = PostgresStateStore(hook)
    timings = []
    for run, slot in enumerate(("bench_slot", "bench_slot_2"), start=1):
        pipeline = f"bench{run}"
        store.save(store.load(pipeline).with_table_phase("public.bench", Init()))
        changelog = BENCH / f"changelog{run}"
        shutil.rmtree(changelog, ignore_errors=True)
        settings = CaptureSettings(
            pipeline=pipeline,
            slot_name=slot,
            publication_name="bench_pub",
            changelog_uri=str(changelog),
            max_changes=4 * changes,
        )
        t0 = time.monotonic()
        result = capture(hook, store, settings)
        timings.append(time.monotonic() - t0)
        assert result.changes == changes, result
        print(f"capture run {run}: {timings[-1]:.2f} s, {len(result.segments)} segment(s)")
    ours = min(timings)
    ours_rate = changes / ours
    print(
        f"capture (peek -> segments -> state -> advance, best of 2): {ours:.2f} s, {ours_rate:,.0f} changes/s"
    )
    cluster.destroy()
    ratio = ours_rate / raw_rate
    print(f"capture_ratio={ratio:.2f}")
    return ratio
