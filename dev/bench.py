"""Benchmarks of pgsync's data paths; the last line of each is its ratio to the physical limit.

dev/bench capture    changes/s of capture (peek -> durable segments -> advance) over
                     the server's own decoding rate of the same backlog
dev/bench baseline   rows/s of a baseline (Spark, snapshot -> durable lake base) over
                     rows/s of COPY (SELECT * FROM t) TO STDOUT of the same table
dev/bench apply      changes/s of apply (changelog -> PostgreSQL destination) over rows/s
                     of COPY FROM STDIN of as many rows; also the lake's apply and the
                     compaction of its base plus those changes
dev/bench freshness  seconds from commit until each destination has it, under ~1,000 tx/s,
                     on a real Airflow deployment, for cron and event-driven cdc runs
                     (dev/bench_freshness.py)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Any

import psycopg
from psycopg import sql

from pgcluster import REPO, Cluster, default_base_dir, server_user

BENCH = REPO / ".dev" / "bench"


def bench_cluster() -> Cluster:
    """A fresh private cluster for one benchmark, so nothing else retains WAL or competes."""
    cluster = Cluster(root=default_base_dir(server_user()) / "bench-pg", port=54339)
    cluster.destroy()
    cluster.start()
    return cluster


def bench_capture(changes: int) -> float:
    os.environ.setdefault("AIRFLOW_HOME", str(BENCH / "airflow"))
    from airflow_provider_pgsync.capture.run import CaptureSettings, capture
    from airflow_provider_pgsync.hooks.replication import PgReplicationHook
    from airflow_provider_pgsync.state.phases import Init
    from airflow_provider_pgsync.state.postgres_store import PostgresStateStore

    cluster = bench_cluster()
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


def bench_baseline(
    rows: int, partition_mb: float, spark_conf: dict[str, str], options: dict[str, str]
) -> float:
    os.environ.setdefault("AIRFLOW_HOME", str(BENCH / "airflow"))
    lake = BENCH / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    lake.mkdir(parents=True)
    os.environ["PGSYNC_LAKE"] = str(lake)
    from airflow_provider_pgsync.operators.baseline import PgBaselineOperator

    cluster = bench_cluster()
    db = "pgsync_bench_baseline"
    cluster.create_database(db)
    os.environ["AIRFLOW_CONN_PGSYNC_BENCH"] = cluster.url(db, with_password=True)
    with psycopg.connect(cluster.conninfo(db), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET autovacuum = off")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute(
            "CREATE TABLE bench_rows (id bigint PRIMARY KEY, customer int, amount double precision,"
            " created timestamptz, note text)"
        )
        started = time.monotonic()
        conn.execute(
            "INSERT INTO bench_rows SELECT g, g %% 100000, g * 0.37,"
            " timestamptz '2024-01-01' + g * interval '1 second',"
            " 'order note ' || md5(g::text) || ' ' || (g %% 997)"
            " FROM generate_series(1, %s) g",
            (rows,),
        )
        conn.execute("VACUUM (FREEZE, ANALYZE) bench_rows")
        size = conn.execute("SELECT pg_relation_size('bench_rows')").fetchone()
        assert size is not None
        print(
            f"table: {rows:,} rows, {size[0] / rows:.0f} bytes per row on disk, "
            f"{size[0] / 1e6:,.0f} MB, loaded in {time.monotonic() - started:.1f} s"
        )

        copy_times = []
        for _ in range(2):
            started = time.monotonic()
            with conn.cursor().copy("COPY (SELECT * FROM bench_rows) TO STDOUT") as copy:
                for _block in copy:
                    pass
            copy_times.append(time.monotonic() - started)
    copy_rate = rows / min(copy_times)
    print(f"COPY TO STDOUT: best {min(copy_times):.2f} s of {len(copy_times)}, {copy_rate:,.0f} rows/s")

    results = []
    for attempt in range(2):
        op = PgBaselineOperator(
            task_id="bench_baseline",
            pipeline="bench",
            table="public.bench_rows",
            postgres_conn_id="pgsync_bench",
            state_backend="postgres",
            rebaseline=True,
            target_partition_mb=partition_mb,
            progress_seconds=5,
            spark_conf=spark_conf,
            spark_submit_options=options,
        )
        results.append(op.execute({"ti": None}))  # type: ignore[typeddict-item]
        r = results[-1]
        print(
            f"baseline run {attempt + 1}: Spark session {r['session_seconds']:.1f} s, read+write+swap "
            f"{r['copy_seconds']:.2f} s (catalog swap {r['catalog_seconds']:.2f} s), "
            f"{r['partitions']} partitions, {r['rows']:,} rows"
        )
    best = min(results, key=lambda r: r["copy_seconds"])
    if best["rows"] != rows:
        raise SystemExit(f"the baseline wrote {best['rows']} rows, expected {rows}")
    ours_rate = rows / best["copy_seconds"]
    print(
        f"baseline: best {best['copy_seconds']:.2f} s of {len(results)} (from the start of reading to the "
        "durable base; Spark session and executors' Python workers start "
        f"{best['session_seconds']:.1f} s not included), "
        f"{ours_rate:,.0f} rows/s"
    )
    cluster.destroy()
    ratio = ours_rate / copy_rate
    print(f"baseline_ratio={ratio:.2f}")
    return ratio


def bench_apply(changes: int) -> float:
    """Apply ``changes`` (60 % updates, 20 % inserts, 20 % deletes of a table of as many rows)
    from the changelog to the PostgreSQL destination, against COPY of as many rows."""
    os.environ.setdefault("AIRFLOW_HOME", str(BENCH / "airflow"))
    from airflow_provider_pgsync.apply.run import apply_table
    from airflow_provider_pgsync.capture.run import CaptureSettings, capture
    from airflow_provider_pgsync.changelog.segments import Changelog
    from airflow_provider_pgsync.destinations.postgres import PostgresDestination
    from airflow_provider_pgsync.hooks.replication import PgReplicationHook
    from airflow_provider_pgsync.pgoutput.lsn import LSN
    from airflow_provider_pgsync.source.names import TableRef
    from airflow_provider_pgsync.state.phases import DataSync, Init, SyncDone
    from airflow_provider_pgsync.state.postgres_store import PostgresStateStore

    cluster = bench_cluster()
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
        copy_times = []
        for _ in range(2):
            out.execute("TRUNCATE bench_copy")
            t0 = time.monotonic()
            with out.cursor().copy("COPY bench_copy FROM STDIN") as copy:
                for block in base:
                    copy.write(block)
            copy_times.append(time.monotonic() - t0)
        copy_rate = rows / min(copy_times)
        print(f"COPY FROM STDIN of {rows:,} rows: best {min(copy_times):.2f} s of 2, {copy_rate:,.0f} rows/s")

        apply_times = []
        for _ in range(2):
            # the destination creates its table; the base is loaded into it as a baseline would
            out.execute("DROP SCHEMA IF EXISTS pgsync CASCADE")
            out.execute("DROP TABLE IF EXISTS bench")
            setup = PostgresDestination(cluster.conninfo(dst), name="bench")
            setup.open_table(TableRef.parse("public.bench"), state.table("public.bench").columns, 0)
            setup.close()
            with out.cursor().copy("COPY bench FROM STDIN") as copy:
                for block in base:
                    copy.write(block)
            out.execute("VACUUM ANALYZE bench")
            destination = PostgresDestination(cluster.conninfo(dst), name="bench")
            t0 = time.monotonic()
            applied = apply_table(Changelog(changelog_uri), state, state.table("public.bench"), destination)
            apply_times.append(time.monotonic() - t0)
            destination.close()
            assert applied.applied == changes, applied
            print(
                f"apply run: {apply_times[-1]:.2f} s, {applied.applied:,} changes, table {applied.phase.kind}"
            )
        sums = [
            c.execute("SELECT count(*), sum(hashtext(bench::text)) FROM bench").fetchone()
            for c in (conn, out)
        ]
        if sums[0] != sums[1]:
            raise SystemExit(f"the destination differs from the source: {sums[1]} != {sums[0]}")
    ours_rate = changes / min(apply_times)
    print(
        f"apply (changelog -> destination, best of 2): {min(apply_times):.2f} s, {ours_rate:,.0f} changes/s"
    )
    bench_lake(cluster, state, changelog_uri, rows, changes)
    cluster.destroy()
    ratio = ours_rate / copy_rate
    print(f"apply_ratio={ratio:.2f}")
    return ratio


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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dev/bench", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["capture", "baseline", "apply", "freshness"])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--partition-mb", type=float, default=256)
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration of the baseline job (repeatable)",
    )
    parser.add_argument("--driver-memory", help="spark-submit --driver-memory of the baseline job")
    parser.add_argument("--minutes", type=float, default=10, help="freshness: minutes of load per phase")
    parser.add_argument("--rate", type=float, default=1000, help="freshness: target transactions/s")
    parser.add_argument("--writers", type=int, default=4, help="freshness: writer threads")
    parser.add_argument("--sample-every", type=int, default=100, help="freshness: 1 commit in N is probed")
    parser.add_argument(
        "--phases", default="cron,event", help="freshness: the phases to run, in order: cron, event"
    )
    parser.add_argument("--cron", help="freshness: the cron phase's cdc schedule (YAML; '* * * * *')")
    parser.add_argument(
        "--event", help="freshness: the event-driven cdc schedule (YAML; {on_changes: 1000, max_wait: 60s})"
    )
    args = parser.parse_args(argv)
    if args.what == "freshness":
        from bench_freshness import CRON, EVENTS, bench_freshness

        schedules = {"cron": ("cron", args.cron or CRON), "event": ("event-driven", args.event or EVENTS)}
        phases = [schedules[p.strip()] for p in args.phases.split(",")]
        return bench_freshness(args.minutes, args.rate, args.writers, args.sample_every, phases)
    if args.what == "capture":
        bench_capture(args.changes)
    if args.what == "apply":
        bench_apply(args.changes)
    if args.what == "baseline":
        conf = dict(item.split("=", 1) for item in args.spark_conf)
        options = {"driver_memory": args.driver_memory} if args.driver_memory else {}
        bench_baseline(args.rows, args.partition_mb, conf, options)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
