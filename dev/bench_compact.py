"""`dev/bench compact`: rows/s of a lake compaction (a base plus 60 % updates, 20 % inserts and
20 % deletes, folded into the next base) over rows/s of COPY FROM STDIN of as many rows as
the result holds; with ``--scenario few`` (or ``both``), the compactions of 1,000 changes on a
big base, with how many of its files they rewrote."""

from __future__ import annotations

import os
import random
import shutil
import time
from typing import Any

import psycopg
from bench import BENCH, bench_cluster

from pgcluster import Cluster

DDL = (
    "CREATE TABLE {name} (id bigint PRIMARY KEY, qty int, label text, price double precision,"
    " at timestamptz) WITH (autovacuum_enabled = false)"
)


class Lake:
    """A source table baselined into a lake, its changes captured and applied as segments."""

    def __init__(self, cluster: Cluster, name: str, rows: int) -> None:
        os.environ.setdefault("AIRFLOW_HOME", str(BENCH / "airflow"))
        from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
        from airflow_provider_pgsync.hooks.replication import PgReplicationHook
        from airflow_provider_pgsync.state.phases import Init

        self.cluster, self.db, self.rows = cluster, f"pgsync_bench_{name}", rows
        cluster.create_database(self.db)
        self.conn = psycopg.connect(cluster.conninfo(self.db), autocommit=True)
        started = time.monotonic()
        self.conn.execute(DDL.format(name="bench"))
        self.conn.execute(
            "INSERT INTO bench SELECT g, g %% 1000, 'item ' || g, g * 0.25, now()"
            " FROM generate_series(1, %s) g",
            (rows,),
        )
        self.conn.execute("VACUUM (FREEZE, ANALYZE) bench")
        self.conn.execute("CREATE PUBLICATION bench_pub FOR TABLE bench")
        self.conn.execute("SELECT pg_create_logical_replication_slot('bench_slot', 'pgoutput')")
        print(f"{name}: table of {rows:,} rows built in {time.monotonic() - started:.1f} s")
        os.environ["AIRFLOW_CONN_PGSYNC_BENCH"] = cluster.url(self.db, with_password=True)
        self.hook = PgReplicationHook(postgres_conn_id="pgsync_bench")
        self.store = PostgresStateStore(self.hook)
        self.store.save(
            self.store.load("bench").with_slot("bench_slot", None).with_table_phase("public.bench", Init())
        )
        warehouse = BENCH / f"lake-{name}"
        shutil.rmtree(warehouse, ignore_errors=True)
        self.config = {"kind": "lake", "warehouse": str(warehouse)}
        self.changelog = str(BENCH / f"changelog-{name}")
        shutil.rmtree(self.changelog, ignore_errors=True)

    def baseline(self) -> None:
        from airflow_provider_pgsync.operators.baseline import PgBaselineOperator

        started = time.monotonic()
        PgBaselineOperator(
            task_id="baseline",
            pipeline="bench",
            table="public.bench",
            postgres_conn_id="pgsync_bench",
            state_backend="postgres",
            destinations=[self.config],
            progress_seconds=60,
        ).execute({"ti": None})  # type: ignore[typeddict-item]
        print(f"baseline of {self.rows:,} rows into the lake: {time.monotonic() - started:.1f} s")

    def change(self, updates: list[int], deletes: list[int], inserts: range, chunks: int = 1) -> None:
        """Update, delete and insert those ids in ``chunks`` transactions."""
        for c in range(chunks):
            with self.conn.transaction():
                self.conn.execute(
                    "UPDATE bench SET qty = qty + 1, label = label || ' u' WHERE id = ANY(%s)",
                    (updates[c::chunks],),
                )
                self.conn.execute("DELETE FROM bench WHERE id = ANY(%s)", (deletes[c::chunks],))
                part = inserts[c::chunks]
                self.conn.execute(
                    "INSERT INTO bench SELECT g, g %% 1000, 'new ' || g, g * 0.5, now()"
                    " FROM unnest(%s::bigint[]) g",
                    (list(part),),
                )

    def capture_and_apply(self, expected: int) -> None:
        from airflow_provider_pgsync.apply.run import apply_table
        from airflow_provider_pgsync.capture.run import CaptureSettings, capture
        from airflow_provider_pgsync.changelog.segments import Changelog
        from airflow_provider_pgsync.destinations.lake import LakeDestination
        from airflow_provider_pgsync.destinations.lake_changes import LakeChanges

        started = time.monotonic()
        settings = CaptureSettings(
            "bench", "bench_slot", "bench_pub", self.changelog, max_changes=4 * expected
        )
        captured = capture(self.hook, self.store, settings)
        assert captured.changes == expected, captured
        state = self.store.load("bench")
        destination = LakeChanges(LakeDestination.from_config(self.config))
        applied = apply_table(Changelog(self.changelog), state, state.table("public.bench"), destination)
        assert applied.applied == expected, applied
        print(f"{expected:,} changes captured and applied to the lake: {time.monotonic() - started:.1f} s")

    def compact(self) -> tuple[dict[str, Any], float]:
        from airflow_provider_pgsync.operators.compact import PgCompactOperator

        started = time.monotonic()
        compact = PgCompactOperator(task_id="compact", tables=["public.bench"], destination=self.config)
        (result,) = compact.execute({})
        total = time.monotonic() - started
        count = self.conn.execute("SELECT count(*) FROM bench").fetchone()
        assert count is not None
        if result["rows"] != count[0]:
            raise SystemExit(f"the compacted base holds {result['rows']:,} rows, the source {count[0]:,}")
        return result, total

    def copy_rate(self) -> float:
        """Rows/s of COPY FROM STDIN of the table's current rows (best of 2)."""
        with self.conn.cursor().copy("COPY bench TO STDOUT") as copy:
            blocks = [bytes(block) for block in copy]
        self.conn.execute(DDL.format(name="IF NOT EXISTS bench_copy"))
        times = []
        for _ in range(2):
            self.conn.execute("TRUNCATE bench_copy")
            started = time.monotonic()
            with self.conn.cursor().copy("COPY bench_copy FROM STDIN") as copy:
                for block in blocks:
                    copy.write(block)
            times.append(time.monotonic() - started)
        self.conn.execute("DROP TABLE bench_copy")
        count = self.conn.execute("SELECT count(*) FROM bench").fetchone()
        assert count is not None
        rate = count[0] / min(times)
        print(f"COPY FROM STDIN of {count[0]:,} rows: best {min(times):.2f} s of 2, {rate:,.0f} rows/s")
        return rate

    def close(self) -> None:
        self.conn.close()


def describe(result: dict[str, Any], total: float) -> str:
    return (
        f"{result['seconds']:.1f} s in Spark (merged and written {result.get('write_seconds', 0):.1f} s, "
        f"swapped in {result.get('swap_seconds', 0):.1f} s; {total:.1f} s with the job's start), "
        f"{result['buckets_rewritten']} of {result['buckets']} buckets rewritten "
        f"({result['files_rewritten']} files, {result['rows_rewritten']:,} rows; "
        f"{result['files_kept']} files kept), "
        f"{result['rows']:,} rows in the new base"
    )


def bench_few(cluster: Cluster, rows: int, changes: int) -> None:
    """Two rounds of ``changes`` changes (60/20/20, random keys) on a ``rows``-row base: the first
    compaction lays the baseline's base out by key hash, the second rewrites what changed."""
    lake = Lake(cluster, "few", rows)
    lake.baseline()
    picked = random.Random(19).sample(range(1, rows + 1), 2 * changes)
    n_upd, n_del = changes * 3 // 5, changes // 5
    for round_ in range(2):
        ids = picked[round_ * changes : (round_ + 1) * changes]
        start = rows + round_ * changes + 1
        lake.change(ids[:n_upd], ids[n_upd : n_upd + n_del], range(start, start + changes - n_upd - n_del))
        lake.capture_and_apply(changes)
        result, total = lake.compact()
        what = "first (lays the base out)" if round_ == 0 else "second"
        print(f"few: {what} compaction of {changes:,} changes on {rows:,} rows: {describe(result, total)}")
    lake.close()


def bench_full(cluster: Cluster, changes: int) -> float:
    """A ``changes``-row base plus ``changes`` changes (60/20/20) compacted, twice: the first
    compaction after the baseline (it lays the base out by key hash) and the next one (a base
    laid out, as every later compaction finds it); the ratio to COPY of the second, the first's
    printed too."""
    rows = changes
    lake = Lake(cluster, "full", rows)
    lake.baseline()
    current = list(range(1, rows + 1))
    ratios = []
    for round_, what in enumerate(("first after the baseline", "next (a laid-out base)")):
        updates = [i for k, i in enumerate(current) if k % 5 < 3]
        deletes = [i for k, i in enumerate(current) if k % 5 == 3]
        new = range(rows * (round_ + 1) + 1, rows * (round_ + 1) + 1 + changes - len(updates) - len(deletes))
        lake.change(updates, deletes, new, chunks=10)
        lake.capture_and_apply(changes)
        copy_rate = lake.copy_rate()
        result, total = lake.compact()
        print(f"full: {what} compaction of a {rows:,}-row base plus {changes:,} changes:")
        print(f"  {describe(result, total)}")
        rate = result["rows"] / result["seconds"]
        print(f"compaction: {rate:,.0f} rows/s of the result (Spark session start not included)")
        ratios.append(rate / copy_rate)
        gone = set(deletes)
        current = [i for i in current if i not in gone] + list(new)
    lake.close()
    print(f"compact_first_ratio={ratios[0]:.2f} (the first compaction after a baseline)")
    return ratios[1]


def bench_compact(changes: int, rows: int, scenario: str, few_changes: int = 1000) -> float | None:
    cluster = bench_cluster("bench-compact")
    ratio = None
    try:
        if scenario in ("few", "both"):
            bench_few(cluster, rows, few_changes)
        if scenario in ("full", "both"):
            ratio = bench_full(cluster, changes)
    finally:
        cluster.destroy()
    if ratio is not None:
        print(f"compact_ratio={ratio:.2f}")
    return ratio
