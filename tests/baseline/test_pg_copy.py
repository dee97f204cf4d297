"""A baseline partition copied into a PostgreSQL destination's staging table (no Spark): every
type as text, the exported snapshot, a retried task, a failed one."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from airflow_provider_pgsync.baseline.partitions import ctid_predicates
from airflow_provider_pgsync.baseline.pg_copy import Sink, copy_partition, partition_sql, staged_rows
from airflow_provider_pgsync.baseline.plan import base_query
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.source.publication import published_table
from airflow_provider_pgsync.typemap.spark import ColumnRead
from tests.apply.test_apply_postgres import rows
from tests.conftest import Database

TYPES_DDL = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN posint AS integer CHECK (VALUE > 0)",
    "CREATE TYPE pair AS (a int, b text)",
    "CREATE TABLE typed (id bigint PRIMARY KEY, m mood, d posint, n numeric(12,3), u numeric, f float8,"
    " r real, ts timestamptz, t timestamp, dt date, tt timetz, iv interval, b bytea, j jsonb, js json,"
    " a int[], a2 text[], ch char(4), vc varchar(5), bo boolean, ip inet, ci cidr, mac macaddr,"
    " mo money, bi bit(4), vb varbit, uu uuid, p pair, big text)",
    "ALTER TABLE typed ALTER COLUMN big SET STORAGE EXTERNAL",
    """INSERT INTO typed VALUES
     (1, 'happy', 7, 12.345, 'NaN', 'NaN', '-Infinity', 'infinity', '2024-02-29 23:59:59.999999',
      '0044-03-15 BC', '10:00:00.5+05:30', '1 year 2 mons -3 days 04:05:06.789', '\\x00ff10',
      '{"a": [1, null, "é"]}', '{"b" : 1}', '{1,NULL,3}', '{{"a b","c\\"d"},{NULL,""}}',
      'ab', 'tab\t', true, '10.0.0.1', '10.1.0.0/16', '08:00:2b:01:02:03', '12.34', '1010', '10101',
      'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '(1,"x, y")',
      repeat('toast me ', 5000)),
     (2, NULL, NULL, NULL, '1e-20', 0.1, 3.4e38, '-infinity', NULL, NULL, NULL, NULL, '\\x', '[]', 'null',
      '{}', '{}', NULL, '', false, '::1', '::/0', NULL, NULL, NULL, '', NULL, '(,)', E'line\\nbreak\\\\')""",
    "INSERT INTO typed (id, n, big) SELECT g, g / 7.0, md5(g::text) FROM generate_series(3, 2000) g",
]


def _snapshot(database: Database) -> tuple[psycopg.Connection[Any], tuple[str, ...]]:
    """An open exported snapshot of ``database`` and the session statements that join it."""
    holder = database.connect(autocommit=False)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    row = holder.execute("SELECT pg_export_snapshot()").fetchone()
    assert row is not None
    session = (
        "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
        sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(row[0])).as_string(None),
    )
    return holder, session


def _plan(database: Database, table: str) -> tuple[list[str], list[str], Any]:
    """``(partition queries, column names, column infos)`` of ``table`` in 3 ctid ranges."""
    spec = published_table(table)
    with database.connect() as conn:
        columns = column_infos(conn, spec.table)
        reads = [ColumnRead(c.name, "{col}", "native", "string") for c in columns]
        query = base_query(spec, reads).as_string(conn)
        [(blocks,)] = conn.execute("SELECT pg_relation_size(%s::regclass) / 8192", (table,)).fetchall()
    names = [c.name for c in columns]
    return [partition_sql(query, names, p) for p in ctid_predicates(int(blocks), 3)], names, columns


def test_partitions_copy_every_type_as_the_snapshot_sees_it(database: Database, replica: Database) -> None:
    for statement in TYPES_DDL:
        database.execute(statement)
    queries, names, columns = _plan(database, "public.typed")
    assert len(queries) == 3
    holder, session = _snapshot(database)
    expected = rows(database, "public.typed")
    # after the snapshot: not in the base
    database.execute("UPDATE typed SET big = 'changed', m = 'sad' WHERE id = 1")
    database.execute("DELETE FROM typed WHERE id = 2")
    destination = PostgresDestination(replica.conninfo, name="replica")
    staging = destination.prepare_baseline(published_table("public.typed").table, columns, "v1")
    sink = Sink("replica", replica.conninfo, staging, destination.baseline_parts, tuple(names))

    counts = [copy_partition(database.conninfo, session, q, [sink], i) for i, q in enumerate(queries)]

    assert sum(counts) == 2000 and all(counts)
    assert copy_partition(database.conninfo, session, queries[1], [sink], 1) == 0, "a retried task"
    assert staged_rows(sink, 3) == 2000
    destination.finish_baseline(published_table("public.typed").table, staging, "v1", columns)
    destination.close()
    holder.close()
    assert rows(replica, "public.typed") == expected
    typed = replica.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'typed'::regclass"
        " AND attname IN ('m', 'd', 'n', 'p') ORDER BY attnum"
    )
    assert typed == [("text",), ("text",), ("numeric(12,3)",), ("text",)]
    assert replica.execute("SELECT length(big), j -> 'a' ->> 2 FROM typed WHERE id = 1") == [(45000, "é")]


def test_a_failed_partition_leaves_nothing_and_is_missing(database: Database, replica: Database) -> None:
    database.execute("CREATE TABLE plain (id int PRIMARY KEY, v text)")
    database.execute("INSERT INTO plain SELECT g, 'v' || g FROM generate_series(1, 500) g")
    queries, names, columns = _plan(database, "public.plain")
    holder, session = _snapshot(database)
    destination = PostgresDestination(replica.conninfo, name="replica")
    staging = destination.prepare_baseline(published_table("public.plain").table, columns, "v1")
    sink = Sink("replica", replica.conninfo, staging, destination.baseline_parts, tuple(names))
    # a second destination whose staging table refuses the rows: the first takes none either
    other = PostgresDestination(replica.conninfo, name="other", control_schema="other")
    refusing = other.prepare_baseline(published_table("public.plain").table, columns, "v1")
    replica.execute(f"ALTER TABLE {refusing} ADD CHECK (v <> 'v3')")
    bad = Sink("other", replica.conninfo, refusing, other.baseline_parts, tuple(names))

    with pytest.raises(psycopg.errors.CheckViolation):
        copy_partition(database.conninfo, session, queries[0], [sink, bad], 0)

    assert replica.execute(f"SELECT count(*) FROM {staging}") == [(0,)]  # noqa: S608
    with pytest.raises(RuntimeError, match="0 of 1 partitions"):
        staged_rows(sink, 1)
    assert copy_partition(database.conninfo, session, queries[0], [sink], 0) > 0, "the retry copies it"
    destination.discard_baseline(staging)
    other.discard_baseline(refusing)
    destination.close()
    other.close()
    holder.close()
