"""`dev/bench apply`: changes/s of apply (changelog -> PostgreSQL destination) over rows/s of
COPY FROM STDIN of as many rows; also the lake's apply and the compaction of its base plus
those changes."""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import psycopg
from bench import BENCH, bench_cluster
from psycopg import sql

from pgcluster import Cluster


def bench_apply(changes: int) -> float:
    """Apply ``changes`` (60 % updates, 20 % inserts, 20 % deletes of a table of as many rows)
    from the changelog to the PostgreSQL destination, against COPY of as many rows."""
    os.environ.setdefault("AIRFLOW_HOME", str(BENCH / "airflow"))
    from airflow_provider_pgsync.capture.run import CaptureSettings, capture
    from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
    from airflow_provider_pgsync.hooks.replication import PgReplicationHook
    from airflow_provider_pgsync.pgoutput.lsn import LSN
    from airflow_provider_pgsync.state.phases import DataSync, Init, SyncDone

    cluster = bench_cluster("bench-apply")
    src, dst = "pgsync_bench_src", "pgsync_bench_dst"
    cluster.create_database(src)
    cluster.create_database(dst)
    rows = changes
    ddl = (
        "CREATE TABLE bench (id bigint PRIMARY KEY, qty int, label text, price double precision,"
        " at timestamptz) WITH (autovacuum_enabled = false)"
    )
    started = time.monotonic()
    with (
        psycopg.connect(cluster.conninfo(src), autocommit=True) as conn,
        psycopg.connect(cluster.conninfo(dst), autocommit=True) as out,
    ):
        conn.execute(ddl)
        conn.execute(
            "INSERT INTO bench SELECT g, g %% 1000, 'item ' || g, g * 0.25, now()"
            " FROM generate_series(1, %s) g",
            (rows,),
        )
        conn.execute("VACUUM (FREEZE, ANALYZE) bench")
        conn.execute("CREATE PUBLICATION bench_pub FOR TABLE bench")
        conn.execute("SELECT pg_create_logical_replication_slot('bench_slot', 'pgoutput')")
        snap = conn.execute(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text"
        ).fetchone()
        assert snap is not None
        with conn.cursor().copy("COPY bench TO STDOUT") as copy:
            base = [bytes(block) for block in copy]
        # the workload: per chunk of ids, 60 % of the rows updated, 20 % deleted, 20 % as many new
        chunks = 10
        for c in range(chunks):
            lo, hi = c * rows // chunks + 1, (c + 1) * rows // chunks
            with conn.transaction():
                conn.execute(
                    "UPDATE bench SET qty = qty + 1, label = label || ' u' WHERE id BETWEEN %s AND %s"
                    " AND id %% 5 < 3",
                    (lo, hi),
                )
                conn.execute("DELETE FROM bench WHERE id BETWEEN %s AND %s AND id %% 5 = 3", (lo, hi))
                conn.execute(
                    "INSERT INTO bench SELECT %s + g, g %% 1000, 'new ' || g, g * 0.5, now()"
                    " FROM generate_series(1, %s) g",
                    (rows + lo - 1, (hi - lo + 1) // 5),
                )
        print(f"table of {rows:,} rows and {changes:,} changes built in {time.monotonic() - started:.1f} s")

        os.environ["AIRFLOW_CONN_PGSYNC_BENCH"] = cluster.url(src, with_password=True)
        hook = PgReplicationHook(postgres_conn_id="pgsync_bench")
        store = PostgresStateStore(hook)
        store.save(store.load("bench").with_slot("bench_slot", None).with_table_phase("public.bench", Init()))
        changelog_uri = str(BENCH / "changelog-apply")
        shutil.rmtree(changelog_uri, ignore_errors=True)
        settings = CaptureSettings("bench", "bench_slot", "bench_pub", changelog_uri, max_changes=4 * changes)
        result = capture(hook, store, settings)
        assert result.changes == changes, result
        # the base is the table before the workload: every captured transaction applies
        done = SyncDone("00000003-00000002-1", LSN.parse(str(snap[1])), int(snap[0]), int(snap[0]))
        state = store.save(
            store.load("bench")
            .with_table_phase("public.bench", DataSync())
            .with_table_phase("public.bench", done)
        )

        out.execute(ddl.replace("bench", "bench_copy", 1))
        copy_rate = copy_limit(out, "bench_copy", base, rows)
        best = timed_applies(cluster.conninfo(dst), out, "public.bench", state, changelog_uri, base, changes)
        sums = [
            c.execute("SELECT count(*), sum(hashtext(bench::text)) FROM bench").fetchone()
            for c in (conn, out)
        ]
        if sums[0] != sums[1]:
            raise SystemExit(f"the destination differs from the source: {sums[1]} != {sums[0]}")
    ours_rate = changes / best
    print(f"apply (changelog -> destination, best of 2): {best:.2f} s, {ours_rate:,.0f} changes/s")
    bench_lake(cluster, state, changelog_uri, rows, changes)
    cluster.destroy()
    ratio = ours_rate / copy_rate
    print(f"apply_ratio={ratio:.2f}")
    return ratio


def copy_limit(out: Any, table: str, base: list[bytes], rows: int) -> float:
    """The physical limit: rows/s of ``COPY FROM STDIN`` of the ``base`` blocks (``rows`` rows)
    into the empty ``table`` of connection ``out``, best of 2."""
    times = []
    for _ in range(2):
        out.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(table)))
        t0 = time.monotonic()
        with out.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(sql.Identifier(table))) as copy:
            for block in base:
                copy.write(block)
        times.append(time.monotonic() - t0)
    rate = rows / min(times)
    print(f"COPY FROM STDIN of {rows:,} rows: best {min(times):.2f} s of 2, {rate:,.0f} rows/s")
    return rate


def timed_applies(
    conninfo: str, out: Any, table: str, state: Any, changelog_uri: str, base: list[bytes], changes: int
) -> float:
    """Seconds of the best of 2 applies of ``changes`` to ``table`` in the PostgreSQL destination
    at ``conninfo``, each onto a fresh table the destination created and loaded with ``base``,
    as a baseline would."""
    from airflow_provider_pgsync.apply.run import apply_table
    from airflow_provider_pgsync.changelog.segments import Changelog
    from airflow_provider_pgsync.destinations.postgres import PostgresDestination
    from airflow_provider_pgsync.source.names import TableRef

    ref = TableRef.parse(table)
    times = []
    for _ in range(2):
        out.execute("DROP SCHEMA IF EXISTS pgsync CASCADE")
        out.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ref.identifier))
        setup = PostgresDestination(conninfo, name="bench")
        setup.open_table(ref, state.table(table).columns, 0)
        setup.close()
        with out.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(ref.identifier)) as copy:
            for block in base:
                copy.write(block)
        out.execute(sql.SQL("VACUUM ANALYZE {}").format(ref.identifier))
        destination = PostgresDestination(conninfo, name="bench")
        t0 = time.monotonic()
        applied = apply_table(Changelog(changelog_uri), state, state.table(table), destination)
        times.append(time.monotonic() - t0)
        destination.close()
        assert applied.applied == changes, applied
        print(f"apply run: {times[-1]:.2f} s, {applied.applied:,} changes, table {applied.phase.kind}")
    return min(times)


def bench_lake(cluster: Cluster, state: Any, changelog_uri: str, rows: int, changes: int) -> None:
    """The same changes applied to the lake over a baseline of the table, then compacted."""
    from airflow_provider_pgsync.apply.run import apply_table
    from airflow_provider_pgsync.changelog.segments import Changelog
    from airflow_provider_pgsync.destinations.lake import LakeDestination
    from airflow_provider_pgsync.destinations.lake_changes import LakeChanges
    from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
    from airflow_provider_pgsync.operators.compact import PgCompactOperator

    warehouse = BENCH / "lake-apply"
    shutil.rmtree(warehouse, ignore_errors=True)
    config = {"kind": "lake", "warehouse": str(warehouse)}
    # the base is the table after the changes: replaying them onto it ends in the same rows
    # (every record of the lake is a whole row or a key's deletion), as it must after a crash
    PgBaselineOperator(
        task_id="baseline",
        pipeline="bench",
        table="public.bench",
        postgres_conn_id="pgsync_bench",
        state_backend="postgres",
        rebaseline=True,
        destinations=[config],
        progress_seconds=30,
    ).execute({"ti": None})  # type: ignore[typeddict-item]
    destination = LakeChanges(LakeDestination.from_config(config))
    t0 = time.monotonic()
    applied = apply_table(Changelog(changelog_uri), state, state.table("public.bench"), destination)
    print(f"lake apply: {time.monotonic() - t0:.2f} s, {applied.applied:,} changes into lake segments")
    t0 = time.monotonic()
    compact = PgCompactOperator(task_id="compact", tables=["public.bench"], destination=config)
    (result,) = compact.execute({})
    total = time.monotonic() - t0
    print(
        f"lake compaction of a {rows:,}-row base plus {changes:,} changes: {result['seconds']:.1f} s"
        f" in Spark ({total:.1f} s with the job's start), {result['rows']:,} rows in the new base"
    )
