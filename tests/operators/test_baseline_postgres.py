"""PgBaselineOperator into a lake and a PostgreSQL replica at once: real PostgreSQL, real
spark-submit on ``local[*]``; then capture and apply bring the replica exactly to the source.

Two Spark applications in all: the first baseline of a keyed table of many types, and the
rebaseline of a REPLICA IDENTITY FULL table with duplicate rows (its earlier replica table
made without Spark), each under a concurrent writer. A rebaseline whose spark-submit fails
(no Spark application) leaves the replica's table as it was and no staging table.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.errors import BaselineError
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.phases import Ready, SyncDone
from pgcluster import dev_password
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database
from tests.support.baseline_writer import writer
from tests.support.replica import apply_all, rows

DDL = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN posint AS integer CHECK (VALUE > 0)",
    "CREATE TABLE items (id bigint PRIMARY KEY, m mood, d posint, n numeric(12,3), u numeric,"
    " ts timestamptz, b bytea, j jsonb, a int[], f float8, iv interval, doc text,"
    " twice numeric GENERATED ALWAYS AS (n * 2) STORED)",
    "ALTER TABLE items ALTER COLUMN doc SET STORAGE EXTERNAL",
    "CREATE TABLE events (kind text, n int, payload jsonb)",
    "ALTER TABLE events REPLICA IDENTITY FULL",
]
TABLES = ["public.items", "public.events"]
ITEMS = """INSERT INTO items SELECT g, (ARRAY['sad', 'ok', 'happy', NULL])[g % 4 + 1]::mood,
    nullif(g % 50, 0), g / 7.0, CASE g % 5 WHEN 0 THEN 'NaN' WHEN 1 THEN NULL ELSE g * 1e-9 END,
    CASE g % 100 WHEN 0 THEN 'infinity'::timestamptz ELSE '2024-01-01 00:00+00'::timestamptz
    + g * interval '1 minute 0.5 second' END, decode(md5(g::text), 'hex'),
    jsonb_build_object('g', g, 'tag', 'é' || g), ARRAY[g, NULL, -g], g / 3.0, g * interval '1 hour',
    CASE WHEN g % 100 = 0 THEN repeat('toasted ', 3000) || g ELSE 'doc ' || g END
    FROM generate_series(1, 3000) g"""
EVENTS = """INSERT INTO events SELECT (ARRAY['a', 'b', 'c'])[g % 3 + 1], g % 10,
    CASE WHEN g % 7 = 0 THEN NULL ELSE jsonb_build_object('v', g % 10) END FROM generate_series(1, 600) g"""


def _run(pipeline: Pipeline, source_conn_id: str, table: str, destinations: list[Any], **kwargs: Any) -> Any:
    op = PgBaselineOperator(
        task_id="baseline",
        pipeline=pipeline.name,
        table=table,
        postgres_conn_id=source_conn_id,
        destinations=destinations,
        state_backend="postgres",
        target_partition_mb=0.1,
        progress_seconds=2,
        **kwargs,
    )
    return op.execute({"ti": None})  # type: ignore[typeddict-item]


def _staging_tables(replica: Database) -> list[object]:
    return replica.execute(
        "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'pgsync' AND starts_with(relname, 'baseline_v')"
    ) + replica.execute("SELECT staging FROM pgsync.baseline_parts")


@pytest.mark.slow
def test_baseline_into_lake_and_postgres_then_apply_reaches_the_source(
    make_pipeline: MakePipeline,
    database: Database,
    replica: Database,
    replica_conn_id: str,
    source_conn_id: str,
    lake: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipeline = make_pipeline(DDL, TABLES)
    database.transaction(ITEMS, EVENTS, "ANALYZE items", "ANALYZE events")
    postgres = {"kind": "postgres", "conn_id": replica_conn_id, "name": "replica", "fillfactor": 90}
    destinations = [{"kind": "lake"}, postgres]

    # a keyed table of many types: its first baseline, into both destinations in one Spark job
    with writer(database, "items") as committed:
        first = _run(pipeline, source_conn_id, "public.items", destinations)
    assert committed.done > 10, "the writer should commit while the job runs"
    lake_written, pg_written = first["written"]
    assert lake_written["kind"] == "lake" and Path(lake_written["location"]).name == first["lineage"]
    assert pg_written == {
        "kind": "postgres",
        "destination": "replica",
        "staging": pg_written["staging"],
        "rows": first["rows"],
    }
    assert pq.read_table(lake_written["location"]).num_rows == first["rows"] >= 2900
    assert first["partitions"] > 1
    assert replica.execute("SELECT count(*) FROM items") == [(first["rows"],)]
    # the source's enum and domain, and the generated column computed by the replica
    replica_types = replica.execute(
        "SELECT attname::text, format_type(atttypid, atttypmod), attgenerated::text FROM pg_attribute"
        " WHERE attrelid = 'items'::regclass AND attname IN ('m', 'd', 'twice') ORDER BY attnum"
    )
    assert replica_types == [("m", "mood", ""), ("d", "posint", ""), ("twice", "numeric", "s")]
    destination = PostgresDestination(replica.conninfo, name="replica")
    items = TableRef("public", "items")
    assert (destination.lineage(items), destination.watermark(items)) == (first["lineage"], None)
    assert isinstance(pipeline.state().table("public.items").phase, SyncDone)
    out, err = capfd.readouterr()
    log = "\n".join([out, err, caplog.text])
    assert re.search(r"public\.items: [\d,]+ rows read and written in .* copied into pgsync\.baseline_v", log)
    assert re.search(r"generated column\(s\) twice are not sent .* left out of lake .* in replica", log)
    submit = [line for line in log.splitlines() if "Spark-Submit cmd" in line]
    assert submit and dev_password() not in log, "the replica's password reached the log"

    # a REPLICA IDENTITY FULL table with duplicates, whose replica table is older: rebaselined
    events = TableRef("public", "events")
    with database.connect() as conn:
        columns = column_infos(conn, events)
    stale = destination.prepare_baseline(events, columns, "v-old")
    replica.execute(f"INSERT INTO {stale} VALUES ('old', 1, NULL)")  # noqa: S608 (our own name)
    destination.finish_baseline(events, stale, "v-old", columns)
    replica.execute("UPDATE pgsync.watermarks SET commit_lsn = 1, seq = 0 WHERE table_key = 'public.events'")
    seen: set[tuple[object, ...]] = set()
    stop = threading.Event()

    def read_replica() -> None:  # the replica's table during the rebaseline: old or new, never a part
        with replica.connect() as conn:
            while not stop.is_set():
                with conn.transaction():
                    seen.add(tuple(conn.execute("SELECT count(*) FROM events").fetchone() or ()))
                stop.wait(0.05)

    reader = threading.Thread(target=read_replica, daemon=True)
    reader.start()
    with writer(database, "events"):
        second = _run(pipeline, source_conn_id, "public.events", destinations, rebaseline=True)
    stop.set()
    reader.join(30)
    assert second["lineage"] != first["lineage"]
    assert seen <= {(1,), (second["rows"],)} and (1,) in seen, seen
    assert (destination.lineage(events), destination.watermark(events)) == (second["lineage"], None)
    assert replica.execute("SELECT count(*) FROM pg_constraint WHERE conrelid = 'events'::regclass") == [(0,)]
    assert replica.execute("SELECT count(*) FROM events WHERE kind = 'old'") == [(0,)]
    destination.close()
    assert _staging_tables(replica) == []

    # capture and apply: the replica equals the source, then keeps streaming
    pipeline.capture_until_idle()
    assert apply_all(pipeline, replica) == {"public.items": Ready(), "public.events": Ready()}
    for table in TABLES:
        assert rows(replica, table) == rows(database, table), table
    database.transaction("UPDATE items SET doc = doc || 'x', m = 'sad' WHERE id % 97 = 0")
    database.execute("DELETE FROM events WHERE kind = 'b'")
    pipeline.capture_until_idle()
    apply_all(pipeline, replica)
    for table in TABLES:
        assert rows(replica, table) == rows(database, table), table

    # a rebaseline whose job fails leaves the replica's table as it was, and no staging table
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_BROKEN", '{"conn_type": "spark", "host": "bogus"}')
    before = rows(replica, "public.items")
    with pytest.raises(BaselineError, match="did not run"):
        _run(
            pipeline,
            source_conn_id,
            "public.items",
            [postgres],
            rebaseline=True,
            spark_conn_id="spark_broken",
        )
    assert rows(replica, "public.items") == before
    check = PostgresDestination(replica.conninfo, name="replica")
    assert check.lineage(items) == first["lineage"] and check.watermark(items) is not None
    check.close()
    assert _staging_tables(replica) == []
