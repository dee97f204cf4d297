"""The replica gets the source's types: enums, enum arrays, domains with their checks,
composites (and arrays of them), citext and hstore when the replica has the extensions (text
and a warning when not), and generated columns computed by the replica; through a baseline
and then capture and apply, including a label added to an enum and a column added with a
new enum type, a column dropped with a generated column reading it, a generated column
added later."""

from __future__ import annotations

import logging

import psycopg
import pytest
from psycopg import sql

from airflow_provider_pgsync.destinations.pg_typedefs import SourceCatalog
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.phases import DataSync, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline
from tests.conftest import Database
from tests.support.replica import apply_into, column_names, rows

EXTENSIONS = ["CREATE EXTENSION citext", "CREATE EXTENSION hstore"]
DDL = [
    *EXTENSIONS,
    "CREATE SCHEMA kinds",
    "CREATE TYPE kinds.mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN kinds.posint AS integer NOT NULL CHECK (VALUE > 0) CHECK (VALUE < 1000000)",
    "CREATE TYPE kinds.pair AS (m kinds.mood, amount numeric(6,2), tags text[])",
    "CREATE TABLE things (id bigint PRIMARY KEY, m kinds.mood, ms kinds.mood[], d kinds.posint,"
    " doubled integer GENERATED ALWAYS AS (d * 2) STORED, p kinds.pair, ps kinds.pair[], ci citext,"
    " h hstore, note text, loud text GENERATED ALWAYS AS (upper(note) || '!') STORED)",
]
TABLE = TableRef("public", "things")
ROWS = """INSERT INTO things (id, m, ms, d, p, ps, ci, h, note)
    SELECT g, (ARRAY['sad', 'ok', 'happy'])[mod(g, 3) + 1]::kinds.mood,
    ARRAY['ok', NULL, 'happy']::kinds.mood[], g, ROW('happy', g / 3.0, ARRAY['a b', NULL])::kinds.pair,
    ARRAY[ROW('sad', 1.5, NULL)::kinds.pair, NULL], 'MiXed ' || g, hstore('k', g::text) || hstore('n', NULL),
    'note ' || g FROM generate_series(1, 20) g"""


def types(database: Database, table: str = "things") -> dict[str, str]:
    found = database.execute(
        "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
        (table,),
    )
    return {str(n): str(t) for n, t in found}


def generated(database: Database) -> dict[str, str]:
    found = database.execute(
        "SELECT a.attname::text, pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a"
        " JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
        " WHERE a.attrelid = 'things'::regclass AND a.attgenerated = 's'"
    )
    return {str(n): str(e) for n, e in found}


def baseline(database: Database, replica: Database) -> SyncDone:
    """A baseline as PgBaselineOperator makes it: the staging table prepared with the source's
    catalog read in the snapshot's transaction, filled by COPY of the replicated columns, swapped in."""
    source = database.connect(autocommit=False)
    try:
        source.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        row = source.execute(
            "SELECT pg_export_snapshot(), pg_snapshot_xmin(s)::text::bigint,"
            " pg_snapshot_xmax(s)::text::bigint, ARRAY(SELECT pg_snapshot_xip(s)::text::bigint),"
            " pg_current_wal_insert_lsn()::text"
            " FROM pg_current_snapshot() s"
        ).fetchone()
        assert row is not None
        columns = column_infos(source, TABLE)
        names = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
        destination = PostgresDestination(replica.conninfo, name="replica", source=SourceCatalog(conn=source))
        try:
            staging = destination.prepare_baseline(TABLE, columns, "v1")
            with (
                replica.connect() as out,
                out.cursor().copy(
                    sql.SQL("COPY {} ({}) FROM STDIN").format(TableRef.parse(staging).identifier, names)
                ) as sink,
                source.cursor().copy(
                    sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT").format(names, TABLE.identifier)
                ) as data,
            ):
                for block in data:
                    sink.write(block)
            destination.finish_baseline(TABLE, staging, "v1", columns)
        finally:
            destination.close()
        return SyncDone(row[0], LSN.parse(row[4]), row[1], row[2], tuple(row[3]))
    finally:
        source.close()


@pytest.mark.parametrize("with_extensions", [True, False], ids=["extensions", "no-extensions"])
def test_the_replica_has_the_sources_types_after_baseline_and_cdc(
    make_pipeline: MakePipeline,
    database: Database,
    replica: Database,
    caplog: pytest.LogCaptureFixture,
    with_extensions: bool,
) -> None:
    caplog.set_level(logging.WARNING)
    if with_extensions:
        for statement in EXTENSIONS:
            replica.execute(statement)
    pipeline = make_pipeline(DDL, [str(TABLE)])
    database.execute(ROWS)
    writer = database.connect(autocommit=False)  # in flight while the snapshot is taken
    writer.execute("UPDATE things SET m = 'happy', h = h || hstore('w', '1') WHERE id = 1")

    done = baseline(database, replica)

    writer.commit()
    writer.close()
    database.transaction(
        "UPDATE things SET ms = ms || 'sad'::kinds.mood, p.amount = 7.25, ci = 'UPPER' WHERE id <= 5",
        "UPDATE things SET d = d + 100, note = 'changed' WHERE id BETWEEN 6 AND 8",
        "DELETE FROM things WHERE id = 9",
        "INSERT INTO things (id, m, d, ps, ci, h) VALUES (100, 'ok', 3, '{}', 'Hello', 'a=>b')",
    )
    pipeline.capture_until_idle()
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(str(TABLE), DataSync()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(str(TABLE), done))

    def apply() -> dict[str, object]:
        source = SourceCatalog(connect=database.connect)
        return apply_into(pipeline, PostgresDestination(replica.conninfo, name="replica", source=source))

    assert apply() == {str(TABLE): Ready()}

    source_types = types(database)
    expected = dict(source_types) if with_extensions else {**source_types, "ci": "text", "h": "text"}
    assert types(replica) == expected
    assert types(replica)["ms"] == "kinds.mood[]" and types(replica)["ps"] == "kinds.pair[]"
    assert column_names(replica, "things") == column_names(database, "things")
    assert generated(replica) == generated(database)
    assert rows(replica, "things") == rows(database, "things")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if with_extensions:
        assert not warned, warned
    else:
        for column, extension in (("ci", "citext"), ("h", "hstore")):
            assert any(
                f"column {column} of table public.things is created as text" in w
                and f"CREATE EXTENSION {extension}" in w
                for w in warned
            ), warned
    # the domain's checks and NOT NULL hold in the replica
    for bad in ("-1", "NULL", "1000000"):
        with pytest.raises((psycopg.errors.CheckViolation, psycopg.errors.NotNullViolation)):
            replica.execute(f"INSERT INTO things (id, d) VALUES (-1, {bad})")  # noqa: S608 (constants)

    # a label added to the enum and used; a column added with a type made after the baseline
    database.execute("ALTER TYPE kinds.mood ADD VALUE 'ecstatic' AFTER 'ok'")
    database.execute("UPDATE things SET m = 'ecstatic', ms = '{ecstatic,NULL}' WHERE id = 2")
    database.execute("CREATE TYPE kinds.level AS ENUM ('low', 'high')")
    database.transaction(
        "ALTER TABLE things ADD COLUMN lv kinds.level, ADD COLUMN lvs kinds.level[]",
        "UPDATE things SET lv = 'high', lvs = '{low,high}' WHERE id <= 3",
    )
    database.execute("INSERT INTO things (id, d, lv) VALUES (101, 5, 'low')")
    pipeline.capture_until_idle()

    assert apply() == {str(TABLE): Ready()}

    assert replica.execute("SELECT enum_range(NULL::kinds.mood)::text") == [("{sad,ok,ecstatic,happy}",)]
    assert types(replica)["lv"] == "kinds.level" and types(replica)["lvs"] == "kinds.level[]"
    fallback = {} if with_extensions else {"ci": "text", "h": "text"}
    assert types(replica) == {**types(database), **fallback}
    assert rows(replica, "things") == rows(database, "things")

    # a column dropped with the generated column that reads it (CASCADE in the source)
    database.execute("ALTER TABLE things DROP COLUMN note CASCADE")
    database.execute("UPDATE things SET ci = 'after drop' WHERE id = 1")
    pipeline.capture_until_idle()

    assert apply() == {str(TABLE): Ready()}

    assert column_names(replica, "things") == column_names(database, "things")
    assert "loud" not in column_names(replica, "things") and "doubled" in column_names(replica, "things")
    assert rows(replica, "things") == rows(database, "things")

    # a generated column added to the source later: no change carries it, apply adds it
    database.execute("ALTER TABLE things ADD COLUMN tripled bigint GENERATED ALWAYS AS (d * 3) STORED")
    database.execute("UPDATE things SET d = 77 WHERE id = 3")
    pipeline.capture_until_idle()

    assert apply() == {str(TABLE): Ready()}

    assert column_names(replica, "things") == column_names(database, "things")
    assert generated(replica) == generated(database)
    assert rows(replica, "things") == rows(database, "things")
