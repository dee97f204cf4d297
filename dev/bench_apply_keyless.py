"""`dev/bench apply --keyless`: changes/s of apply (changelog -> PostgreSQL destination) of a
table without a key (REPLICA IDENTITY FULL, identical rows in pairs, NULLs) over rows/s of
COPY FROM STDIN of as many rows."""

from __future__ import annotations

import os
import shutil
import time

import psycopg
from bench import BENCH, bench_cluster
from bench_apply import copy_limit, timed_applies

TABLE = "bench_keyless"  # also spelled out in the statements
# every value twice: the table holds identical rows in pairs; a label in 7 is NULL
INSERT = (
    "INSERT INTO bench_keyless SELECT g / 2, (g / 2) %% 1000,"
    " CASE WHEN (g / 2) %% 7 = 0 THEN NULL ELSE 'item ' || (g / 2) END,"
    " (g / 2) * 0.25, timestamptz '2024-01-01 00:00:00+00' + (g / 2) * interval '1 second'"
    " FROM generate_series(%s::bigint, %s::bigint) g"
)


def bench_apply_keyless(changes: int) -> float:
    """Apply about ``changes`` changes (80 % inserts, 10 % updates, 10 % deletes of one of two
    identical rows) to a table of as many rows, from the changelog to the PostgreSQL
    destination, against COPY of as many rows; the destination must equal the source as a
    multiset."""
    os.environ.setdefault("AIRFLOW_HOME", str(BENCH / "airflow"))
    from airflow_provider_pgsync.capture.run import CaptureSettings, capture
    from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
    from airflow_provider_pgsync.hooks.replication import PgReplicationHook
    from airflow_provider_pgsync.pgoutput.lsn import LSN
    from airflow_provider_pgsync.state.phases import DataSync, Init, SyncDone

    cluster = bench_cluster("bench-keyless")
    src, dst = "pgsync_bench_src", "pgsync_bench_dst"
    cluster.create_database(src)
    cluster.create_database(dst)
    rows = changes
    key = "public.bench_keyless"
    ddl = (
        "CREATE TABLE bench_keyless (id bigint, qty int, label text, price double precision, at timestamptz)"
        " WITH (autovacuum_enabled = false)"
    )
    started = time.monotonic()
    with (
        psycopg.connect(cluster.conninfo(src), autocommit=True) as conn,
        psycopg.connect(cluster.conninfo(dst), autocommit=True) as out,
    ):
        conn.execute(ddl)
        conn.execute("ALTER TABLE bench_keyless REPLICA IDENTITY FULL")
        conn.execute(INSERT, (0, rows - 1))
        conn.execute("VACUUM (FREEZE, ANALYZE) bench_keyless")
        conn.execute("CREATE PUBLICATION bench_pub FOR TABLE bench_keyless")
        conn.execute("SELECT pg_create_logical_replication_slot('bench_slot', 'pgoutput')")
        snap = conn.execute(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text"
        ).fetchone()
        assert snap is not None
        with conn.cursor().copy("COPY bench_keyless TO STDOUT") as copy:
            base = [bytes(block) for block in copy]
        total = _workload(conn, rows)
        print(
            f"table of {rows:,} rows (in identical pairs) and {total:,} changes built in "
            f"{time.monotonic() - started:.1f} s"
        )

        os.environ["AIRFLOW_CONN_PGSYNC_BENCH"] = cluster.url(src, with_password=True)
        hook = PgReplicationHook(postgres_conn_id="pgsync_bench")
        store = PostgresStateStore(hook)
        store.save(store.load("bench").with_slot("bench_slot", None).with_table_phase(key, Init()))
        changelog_uri = str(BENCH / "changelog-apply-keyless")
        shutil.rmtree(changelog_uri, ignore_errors=True)
        settings = CaptureSettings("bench", "bench_slot", "bench_pub", changelog_uri, max_changes=4 * total)
        result = capture(hook, store, settings)
        assert result.changes == total, result
        # the base is the table before the workload: every captured transaction applies
        done = SyncDone("00000003-00000002-1", LSN.parse(str(snap[1])), int(snap[0]), int(snap[0]))
        state = store.save(store.load("bench").with_table_phase(key, DataSync()).with_table_phase(key, done))

        out.execute(ddl.replace(TABLE, "bench_keyless_copy", 1))
        copy_rate = copy_limit(out, "bench_keyless_copy", base, rows)
        best = timed_applies(cluster.conninfo(dst), out, key, state, changelog_uri, base, total)
        # as multisets: the count and the sum of a hash of each row's text
        query = "SELECT count(*), sum(hashtext(b::text)), sum(hashtext(b::text || 'x')) FROM bench_keyless b"
        sums = [c.execute(query).fetchone() for c in (conn, out)]
        if sums[0] != sums[1]:
            raise SystemExit(f"the destination differs from the source: {sums[1]} != {sums[0]}")
        print(f"destination equals the source: {sums[0][0]:,} rows")  # type: ignore[index]
    cluster.destroy()
    ours_rate = total / best
    print(f"apply of a keyless table (best of 2): {best:.2f} s, {ours_rate:,.0f} changes/s")
    ratio = ours_rate / copy_rate
    print(f"apply_keyless_ratio={ratio:.2f}")
    return ratio


def _workload(conn: psycopg.Connection[tuple[object, ...]], rows: int) -> int:
    """Ten transactions over the base's ids in ten slices: as many new rows (pairs) as 8 % of
    the base, both rows of a pair updated for 1 id in 10, one row of a pair deleted for 2 ids
    in 10, and some new rows updated and deleted in the transaction that inserted them.
    Returns the number of changes."""
    chunks, ids, total = 10, rows // 2, 0
    for c in range(chunks):
        lo, hi = c * ids // chunks, (c + 1) * ids // chunks
        first_new = rows + 2 * c * (rows * 8 // 100)
        with conn.transaction():
            total += conn.execute(
                INSERT,
                (first_new, first_new + rows * 8 // 100 - 1),
            ).rowcount
            total += conn.execute(
                "UPDATE bench_keyless SET qty = qty + 1, label = label || ' u'"
                " WHERE id >= %s AND id < %s AND id %% 10 = 0",
                (lo, hi),
            ).rowcount
            total += conn.execute(
                "DELETE FROM bench_keyless WHERE ctid = ANY(ARRAY(SELECT min(ctid) FROM bench_keyless"
                " WHERE id >= %s AND id < %s AND id %% 10 IN (1, 2) GROUP BY id))",
                (lo, hi),
            ).rowcount
            new = (first_new // 2, (first_new + rows * 8 // 100) // 2)
            total += conn.execute(
                "UPDATE bench_keyless SET price = -price WHERE id >= %s AND id < %s AND id %% 97 = 0",
                new,
            ).rowcount
            total += conn.execute(
                "DELETE FROM bench_keyless WHERE id >= %s AND id < %s AND id %% 89 = 0",
                new,
            ).rowcount
    return total
