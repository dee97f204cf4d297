"""`dev/bench baseline`: rows/s of a baseline (Spark, snapshot -> durable lake base) over rows/s
of COPY (SELECT * FROM t) TO STDOUT of the same table; also the PostgreSQL destination's
baseline (into a replica database of the same server) as ``baseline_pg_ratio``."""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import psycopg
from bench import BENCH, bench_cluster


def bench_baseline(
    rows: int, partition_mb: float, spark_conf: dict[str, str], options: dict[str, str]
) -> float:
    os.environ.setdefault("AIRFLOW_HOME", str(BENCH / "airflow"))
    lake = BENCH / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    lake.mkdir(parents=True)
    os.environ["PGSYNC_LAKE"] = str(lake)
    cluster = bench_cluster("bench-baseline")
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

    # a baseline needs its pipeline's slot, the same one for every run (the state remembers it);
    # dropped at the end, so it retains no WAL
    from airflow_provider_pgsync.hooks.replication import PgReplicationHook

    hook = PgReplicationHook(postgres_conn_id="pgsync_bench")
    hook.ensure_slot("bench_baseline_slot")
    try:
        return _lake_and_postgres(cluster, rows, copy_rate, partition_mb, spark_conf, options)
    finally:
        hook.drop_slot("bench_baseline_slot")
        cluster.destroy()


def _lake_and_postgres(
    cluster: Any,
    rows: int,
    copy_rate: float,
    partition_mb: float,
    spark_conf: dict[str, str],
    options: dict[str, str],
) -> float:
    results = _runs(partition_mb, spark_conf, options, [{"kind": "lake"}])
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

    replica = "pgsync_bench_replica"
    cluster.create_database(replica)
    os.environ["AIRFLOW_CONN_PGSYNC_BENCH_REPLICA"] = cluster.url(replica, with_password=True)
    replicas = _runs(
        partition_mb, spark_conf, options, [{"kind": "postgres", "conn_id": "pgsync_bench_replica"}]
    )
    pg_best = min(replicas, key=lambda r: r["copy_seconds"] + r["finish_seconds"])
    pg_seconds = pg_best["copy_seconds"] + pg_best["finish_seconds"]
    with psycopg.connect(cluster.conninfo(replica), autocommit=True) as conn:
        count = conn.execute("SELECT count(*) FROM public.bench_rows").fetchone()
    if count is None or count[0] != rows:
        raise SystemExit(f"the PostgreSQL destination holds {count} rows, expected {rows}")
    print(
        f"baseline into PostgreSQL: best {pg_seconds:.2f} s of {len(replicas)} (copy "
        f"{pg_best['copy_seconds']:.2f} s, then key, analyze and swap {pg_best['finish_seconds']:.2f} s), "
        f"{rows / pg_seconds:,.0f} rows/s"
    )
    print(f"baseline_pg_ratio={rows / pg_seconds / copy_rate:.2f}")
    ratio = ours_rate / copy_rate
    print(f"baseline_ratio={ratio:.2f}")  # the bar: stays the last line
    return ratio


def _runs(
    partition_mb: float,
    spark_conf: dict[str, str],
    options: dict[str, str],
    destinations: list[dict[str, str]],
) -> list[dict[str, Any]]:
    """Two baselines of the bench table into ``destinations``; the operator's results."""
    from airflow_provider_pgsync.operators.baseline import PgBaselineOperator

    results = []
    for attempt in range(2):
        op = PgBaselineOperator(
            task_id="bench_baseline",
            pipeline="bench",
            table="public.bench_rows",
            slot_name="bench_baseline_slot",
            postgres_conn_id="pgsync_bench",
            destinations=destinations,
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
            f"baseline into {destinations[0]['kind']}, run {attempt + 1}: Spark session "
            f"{r['session_seconds']:.1f} s, read+write+swap {r['copy_seconds']:.2f} s (catalog swap "
            f"{r['catalog_seconds']:.2f} s, then {r['finish_seconds']:.2f} s), "
            f"{r['partitions']} partitions, {r['rows']:,} rows"
        )
    return results
