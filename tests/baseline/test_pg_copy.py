"""A baseline partition copied into a PostgreSQL destination's staging table (no Spark): every
type as text, the exported snapshot, a retried task; a destination that refuses the rows, cannot
be reached or dies mid-stream is left out (nothing of the partition in it, the partition not
recorded there) while the others take every row; a failed read of the source fails them all."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from airflow_provider_pgsync.baseline.partitions import ctid_predicates
from airflow_provider_pgsync.baseline.pg_copy import (
    PartitionCopy,
    Sink,
    copy_partition,
    partition_sql,
    staged_rows,
)
from airflow_provider_pgsync.baseline.plan import base_query
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.source.publication import published_table
from airflow_provider_pgsync.typemap.spark import ColumnRead
from tests.conftest import Database, free_port
from tests.support.replica import rows

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

    copies = [copy_partition(database.conninfo, session, q, [sink], i) for i, q in enumerate(queries)]

    assert sum(c.rows for c in copies) == 2000 and all(c.rows for c in copies)
    assert all(c.failed == {} for c in copies)
    assert copy_partition(database.conninfo, session, queries[1], [sink], 1) == PartitionCopy(0), "a retry"
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


def _sinks(replica: Database, columns: Any, names: list[str], *which: str) -> list[tuple[Any, Sink]]:
    """A destination per name of ``which`` in ``replica`` (control schema of the same name),
    each with a staging table of ``public.plain``: ``(destination, sink)``."""
    made = []
    for name in which:
        destination = PostgresDestination(replica.conninfo, name=name, control_schema=name)
        staging = destination.prepare_baseline(published_table("public.plain").table, columns, "v1")
        made.append(
            (destination, Sink(name, replica.conninfo, staging, destination.baseline_parts, tuple(names)))
        )
    return made


def _held(replica: Database, sink: Sink) -> tuple[object, object]:
    """``(rows in the staging table, partitions recorded)`` of ``sink``."""
    [(rows,)] = replica.execute(f"SELECT count(*) FROM {sink.staging}")  # noqa: S608
    [(parts,)] = replica.execute(f"SELECT count(*) FROM {sink.parts} WHERE staging = %s", (sink.staging,))  # noqa: S608
    return rows, parts


def _plain(database: Database, rows: int) -> tuple[list[str], list[str], Any]:
    database.execute("CREATE TABLE plain (id int PRIMARY KEY, v text)")
    database.execute(
        "INSERT INTO plain SELECT g, 'v' || g || repeat('x', 100) FROM generate_series(1, %s) g", (rows,)
    )
    return _plan(database, "public.plain")


def test_a_destination_that_refuses_rows_is_left_out_and_the_others_take_them(
    database: Database, replica: Database
) -> None:
    queries, names, columns = _plain(database, 500)
    holder, session = _snapshot(database)
    (good_dest, good), (other_dest, bad) = _sinks(replica, columns, names, "replica", "other")
    replica.execute(f"ALTER TABLE {bad.staging} ADD CONSTRAINT no_v3 CHECK (v NOT LIKE 'v3x%%')")

    copied = copy_partition(database.conninfo, session, queries[0], [good, bad], 0)

    assert copied.rows > 0 and list(copied.failed) == ["other"]
    assert copied.failed["other"].startswith("CheckViolation: ")
    assert 'violates check constraint "no_v3"' in copied.failed["other"]
    assert _held(replica, good) == (copied.rows, 1)
    assert _held(replica, bad) == (0, 0), "the refusing destination holds a part of the partition"
    with pytest.raises(RuntimeError, match="0 of 1 partitions"):
        staged_rows(bad, 1)

    # once the cause is gone, the partition is copied into the one that lacks it, once
    replica.execute(f"ALTER TABLE {bad.staging} DROP CONSTRAINT no_v3")
    again = copy_partition(database.conninfo, session, queries[0], [good, bad], 0)
    assert again == PartitionCopy(copied.rows)
    assert _held(replica, good) == _held(replica, bad) == (copied.rows, 1)
    for destination, sink in ((good_dest, good), (other_dest, bad)):
        destination.discard_baseline(sink.staging)
        destination.close()
    holder.close()


def test_an_unreachable_or_dying_destination_is_left_out(database: Database, replica: Database) -> None:
    """One destination cannot be reached; another's server process dies part way through the
    rows (its writes fail, not only its end): the third takes every row."""
    queries, names, columns = _plain(database, 20_000)
    holder, session = _snapshot(database)
    (good_dest, good), (dying_dest, dying) = _sinks(replica, columns, names, "replica", "dying")
    replica.execute(
        "CREATE FUNCTION public.die() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " IF NEW.id = 100 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF; RETURN NEW; END $$"
    )
    replica.execute(
        f"CREATE TRIGGER die BEFORE INSERT ON {dying.staging} FOR EACH ROW EXECUTE FUNCTION public.die()"
    )
    unreachable = Sink(
        "gone", f"host=127.0.0.1 port={free_port()} dbname=x connect_timeout=5", "a.b", "c.d", ("id",)
    )
    every = sum(int(r[0]) for r in database.execute("SELECT count(*) FROM plain"))

    copied = [
        copy_partition(database.conninfo, session, q, [unreachable, dying, good], i)
        for i, q in enumerate(queries)
    ]

    assert sum(c.rows for c in copied) == every
    assert all(set(c.failed) == {"gone", "dying"} for c in copied[:1]), copied[0].failed
    assert copied[0].failed["gone"].startswith("OperationalError: ")
    assert "terminat" in copied[0].failed["dying"] or "closed" in copied[0].failed["dying"], copied[0].failed
    assert staged_rows(good, len(queries)) == every
    assert _held(replica, dying)[1] < len(queries), "the dying destination recorded every partition"

    # every destination of a partition gone: the source's COPY is cancelled, nothing is recorded
    alone = copy_partition(database.conninfo, session, queries[0], [unreachable], 0)
    assert alone.rows == 0 and list(alone.failed) == ["gone"]
    for destination, sink in ((good_dest, good), (dying_dest, dying)):
        destination.discard_baseline(sink.staging)
        destination.close()
    holder.close()


def test_a_failed_read_of_the_source_fails_every_destination(database: Database, replica: Database) -> None:
    queries, names, columns = _plain(database, 500)
    holder, session = _snapshot(database)
    (destination, sink), (other, second) = _sinks(replica, columns, names, "replica", "other")

    with pytest.raises(psycopg.errors.UndefinedColumn):
        copy_partition(
            database.conninfo, session, queries[0].replace('"v"', '"no_such"', 1), [sink, second], 0
        )

    assert _held(replica, sink) == _held(replica, second) == (0, 0)
    for made, staged in ((destination, sink), (other, second)):
        made.discard_baseline(staged.staging)
        made.close()
    holder.close()
