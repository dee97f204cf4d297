"""Randomised end to end into both built-in destinations: a seeded workload of inserts,
updates, key updates, deletes, truncates and TOASTed values in multi-statement transactions
over three tables (one without a key, REPLICA IDENTITY FULL), partly concurrent with the
baseline; after capture and apply the PostgreSQL replica, and the lake's views before and
after compaction, hold exactly the source's rows."""

# The statements are built from the generator's integers only.
# ruff: noqa: S608

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from airflow_provider_pgsync.operators.compact import PgCompactOperator
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.phases import DataSync, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.apply.lake import apply_lake, baseline, lake_session, sort_rows, spark_sql, view_query
from tests.capture.conftest import MakePipeline
from tests.conftest import Database
from tests.support.replica import apply_all, copy_base, rows

DDL = [
    "CREATE TABLE docs (id int PRIMARY KEY, v text, doc text, n numeric)",
    "ALTER TABLE docs ALTER COLUMN doc SET STORAGE EXTERNAL",
    "CREATE TABLE pairs (k1 int, k2 text, v int, PRIMARY KEY (k1, k2))",
    "CREATE TABLE bag (x int, y text)",
    "ALTER TABLE bag REPLICA IDENTITY FULL",
]
TABLES = ["public.docs", "public.pairs", "public.bag"]


class Workload:
    """Random statements of a seed; ids grow, so a key update never collides."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.next_id = 1

    def statement(self, *, truncate: bool) -> str:
        rng, n = self.rng, self.next_id
        choice = rng.randrange(14 if truncate else 13)
        self.next_id += 3
        r = rng.randrange(7)
        return [
            f"INSERT INTO docs VALUES ({n}, 'v{n}', repeat(md5('{n}'), 300), {n}.5),"
            f" ({n + 1}, 'w{n}', NULL, NULL), ({n + 2}, '', 'short', 'NaN')",
            f"UPDATE docs SET v = 'u{n}' WHERE id % 7 = {r}",  # doc goes as unchanged TOAST
            f"UPDATE docs SET doc = repeat('z', 9000) || '{n}' WHERE id % 11 = {r}",
            f"UPDATE docs SET id = id + 1000000, v = 'moved' WHERE id % 5 = {r} AND id < 1000000",
            f"DELETE FROM docs WHERE id % 13 = {r}",
            f"INSERT INTO pairs SELECT {n} + g, 'k' || g, g FROM generate_series(0, 2) g",
            f"UPDATE pairs SET v = v + {n} WHERE k1 % 3 = {r % 3}",
            f"UPDATE pairs SET k2 = k2 || 'x' WHERE k1 % 5 = {r % 5}",
            f"DELETE FROM pairs WHERE k1 % 9 = {r}",
            f"INSERT INTO bag VALUES ({r}, 'dup'), ({r}, 'dup'), ({n}, NULL)",
            f"UPDATE bag SET y = 'y{n}' WHERE x % 3 = {r % 3}",
            f"DELETE FROM bag WHERE x % 4 = {r % 4}",
            f"UPDATE docs SET n = n + 1, v = v || '+' WHERE id % 3 = {r % 3}",
            "TRUNCATE pairs" if rng.random() < 0.5 else "TRUNCATE bag",
        ][choice]

    def transaction(self, *, truncate: bool = True) -> list[str]:
        """A transaction; a lock wait fails it instead of hanging the test."""
        statements = [self.statement(truncate=truncate) for _ in range(self.rng.randint(1, 4))]
        return ["SET LOCAL lock_timeout = '30s'", *statements]

    def pending(self) -> list[str]:
        """A transaction left open across the snapshot: it writes only rows of its own, so the
        transactions that commit meanwhile never wait for its locks."""
        n = self.next_id
        self.next_id += 3
        return [
            f"INSERT INTO docs VALUES ({n}, 'p{n}', repeat(md5('{n}'), 300), 1), ({n + 1}, 'q{n}', NULL, 2)",
            f"UPDATE docs SET v = 'pending' WHERE id = {n}",
            f"DELETE FROM docs WHERE id = {n + 1}",
            f"INSERT INTO pairs VALUES ({n}, 'p', 1)",
            f"INSERT INTO bag VALUES ({n}, 'pending')",
        ]


@pytest.mark.parametrize("seed", [11, 2026, 90210])
def test_random_workload_reaches_the_replica_exactly(
    seed: int, make_pipeline: MakePipeline, database: Database, replica: Database
) -> None:
    work = Workload(seed)
    pipeline = make_pipeline(DDL, TABLES)
    for _ in range(15):  # before the baseline
        database.transaction(*work.transaction())
    pending = database.connect(autocommit=False)  # in progress while the snapshot is taken
    for statement in work.pending():
        pending.execute(statement)  # type: ignore[arg-type]
    source = database.connect(autocommit=False)
    source.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    snap = source.execute(
        "SELECT pg_export_snapshot(), pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,"
        " ARRAY(SELECT pg_snapshot_xip(s)::text::bigint), pg_current_wal_insert_lsn()::text"
        " FROM pg_current_snapshot() s"
    ).fetchone()
    assert snap is not None
    done = SyncDone(snap[0], LSN.parse(snap[4]), snap[1], snap[2], tuple(snap[3]))
    for _ in range(10):  # while the baseline reads; a TRUNCATE would wait for `pending`
        database.transaction(*work.transaction(truncate=False))
    pending.commit()
    pending.close()
    pipeline.capture_until_idle()

    from airflow_provider_pgsync.destinations.postgres import PostgresDestination

    destination = PostgresDestination(replica.conninfo, name="replica")
    for table in TABLES:
        destination.open_table(TableRef.parse(table), pipeline.state().table(table).columns, 0)
        copy_base(source, replica, table)
    destination.close()
    source.close()
    for table in TABLES:
        update_state(pipeline.store, pipeline.name, lambda s, t=table: s.with_table_phase(t, DataSync()))
        update_state(pipeline.store, pipeline.name, lambda s, t=table: s.with_table_phase(t, done))

    for round_ in range(3):
        phases = apply_all(pipeline, replica)
        assert phases == dict.fromkeys(TABLES, Ready()), f"seed {seed}, round {round_}: {phases}"
        for table in TABLES:
            assert rows(replica, table) == rows(database, table), f"seed {seed}, round {round_}: {table}"
        for _ in range(10):
            database.transaction(*work.transaction())
        pipeline.capture_until_idle()


# Each seed runs five Spark applications (about two minutes here): make test runs one;
# PGSYNC_LAKE_SEEDS=7,2027,... runs more
LAKE_SEEDS = [int(s) for s in os.environ.get("PGSYNC_LAKE_SEEDS", "7").split(",")]


@pytest.mark.parametrize("seed", LAKE_SEEDS)
def test_random_workload_reaches_the_lake_exactly(
    seed: int, make_pipeline: MakePipeline, database: Database, source_conn_id: str, lake: Path
) -> None:
    work = Workload(seed)
    pipeline = make_pipeline(DDL, TABLES)
    for _ in range(15):
        database.transaction(*work.transaction())
    pending = database.connect(autocommit=False)  # in progress across every table's snapshot
    for statement in work.pending():
        pending.execute(statement)  # type: ignore[arg-type]

    def write() -> None:  # while the baselines take their snapshots and read
        for _ in range(12):
            database.transaction(*work.transaction(truncate=False))

    baseline(pipeline, source_conn_id, TABLES, meanwhile=write)  # real ones, a snapshot each
    pending.commit()
    pending.close()
    for round_ in range(2):  # apply, compact with the operator (spark-submit), apply again
        pipeline.capture_until_idle()
        phases = apply_lake(pipeline, lake)
        assert phases == dict.fromkeys(TABLES, Ready()), f"seed {seed}: {phases}"
        if round_ == 0:
            compacted = PgCompactOperator(task_id="compact", tables=TABLES).execute({})  # type: ignore[arg-type]
            assert all(r["segments"] > 0 for r in compacted), f"seed {seed}: {compacted}"
        for _ in range(10):
            database.transaction(*work.transaction())
    pipeline.capture_until_idle()
    apply_lake(pipeline, lake)

    # the views by merge on read, then after a compaction, then after a second one in a row
    queries = [{"sql": view_query(database, t)} for t in TABLES]
    steps = [*queries, {"compact": TABLES}, {"files": True}, *queries, {"compact": TABLES}, {"files": True}]
    found = lake_session(lake, steps)
    n = len(TABLES)
    on_read, folded, files, compacted_views, again, files_again = (
        found[:n],
        found[n],
        found[n + 1],
        found[n + 2 : 2 * n + 2],
        found[2 * n + 2],
        found[2 * n + 3],
    )
    for table, merged, after in zip(TABLES, on_read, compacted_views, strict=True):
        expected = rows(database, table)
        assert sort_rows(merged) == expected, f"seed {seed}: {table} (merge on read)"
        assert sort_rows(after) == expected, f"seed {seed}: {table} (after compaction)"
    assert all(r.get("segments", 0) > 0 for r in folded), f"seed {seed}: {folded}"
    assert [r.get("segments") for r in again] == [0] * n, f"seed {seed}: {again}"
    assert files_again == files, f"seed {seed}: a second compaction in a row changed files"
    if seed == LAKE_SEEDS[0]:  # the view is what spark-sql reads
        count = spark_sql(lake, "SELECT count(*), count(DISTINCT id) FROM pgsync.public__docs")
        with database.connect() as conn:
            expected_count = conn.execute("SELECT count(*), count(DISTINCT id) FROM docs").fetchone()
        assert count == [str(v) for v in expected_count or ()], f"seed {seed}"
