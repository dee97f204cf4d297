"""The replica's types against real databases: user types reused when the same, an enum given
the source's new labels, a different definition refused naming the type, types the replica
cannot make (and any without the source's catalog) as text with a warning, generated columns
left out with a warning when the replica cannot compute them."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psycopg
import pytest

from airflow_provider_pgsync.destinations.pg_typedefs import GeneratedColumn, SourceCatalog, place_generated
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.source.names import TableRef
from tests.conftest import Database, MakeReplica

SOURCE = [
    "CREATE SCHEMA kinds",
    "CREATE TYPE kinds.mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN kinds.posint AS integer CHECK (VALUE > 0)",
    "CREATE TYPE kinds.span AS RANGE (subtype = float8)",
    "CREATE FUNCTION twice(integer) RETURNS integer IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2'",
    "CREATE TABLE t (id integer PRIMARY KEY, m kinds.mood, d kinds.posint, s kinds.span, b integer,"
    " g integer GENERATED ALWAYS AS (twice(id)) STORED, h integer GENERATED ALWAYS AS (b + 1) STORED)",
    "CREATE TABLE u (id integer PRIMARY KEY, m kinds.mood[])",
]
T, U = TableRef("public", "t"), TableRef("public", "u")


def _gen(name: str, *uses: str) -> GeneratedColumn:
    return GeneratedColumn(name, 23, -1, "1", uses)


def test_generated_columns_follow_their_column_and_need_what_they_read() -> None:
    source = [
        ("g0", _gen("g0")),
        ("a", None),
        ("g1", _gen("g1", "a")),
        ("g2", _gen("g2", "a", "b")),
        ("b", None),
        ("c", None),
        ("g3", _gen("g3", "c")),
        ("x", None),
        ("g4", _gen("g4", "x")),
    ]
    placed, left_out = place_generated(["a", "b", "c", "new"], source)
    names = [p if isinstance(p, str) else p.name for p in placed]
    assert names == ["g0", "a", "g1", "g2", "b", "c", "g3", "new"]
    assert [g.name for g in left_out] == ["g4"]  # x is not replicated
    assert place_generated(["a"], []) == (["a"], [])


@pytest.fixture
def source(database: Database) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    for statement in SOURCE:
        database.execute(statement)
    with database.connect() as conn:
        yield conn


def _types(database: Database, table: str) -> dict[str, str]:
    found = database.execute(
        "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
        (table,),
    )
    return {str(n): str(t) for n, t in found}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_types_are_made_reused_brought_up_to_date_or_refused(
    source: psycopg.Connection[tuple[object, ...]],
    replica: Database,
    make_replica: MakeReplica,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    replica.execute("CREATE SCHEMA kinds")
    replica.execute("CREATE TYPE kinds.mood AS ENUM ('ok')")  # made earlier, before labels were added
    replica.execute(SOURCE[4])  # the function twice() the generated column g calls
    destination = PostgresDestination(replica.conninfo, name="replica", source=SourceCatalog(conn=source))
    try:
        destination.open_table(T, column_infos(source, T), 0)
        destination.open_table(U, column_infos(source, U), 0)  # the same enum: reused
    finally:
        destination.close()

    assert replica.execute("SELECT enum_range(NULL::kinds.mood)::text") == [("{sad,ok,happy}",)]
    assert _types(replica, "t") == {
        "id": "integer",
        "m": "kinds.mood",
        "d": "kinds.posint",
        "s": "text",  # a range type is not recreated
        "b": "integer",
        "g": "integer",
        "h": "integer",
    }
    assert _types(replica, "u") == {"id": "integer", "m": "kinds.mood[]"}
    replica.execute("INSERT INTO t (id, b) VALUES (3, 10)")
    assert replica.execute("SELECT g, h FROM t") == [(6, 11)]  # computed by the replica
    with pytest.raises(psycopg.errors.CheckViolation):
        replica.execute("INSERT INTO t (id, d) VALUES (4, 0)")
    warned = _warnings(caplog)
    assert len(warned) == 1 and "column s of table public.t is created as text" in warned[0], warned
    assert "kinds.span (a range type)" in warned[0]

    # a replica whose type of that name is another one: refused, naming the type and the remedy
    other = make_replica("other")
    other.execute("CREATE SCHEMA kinds")
    other.execute("CREATE DOMAIN kinds.posint AS bigint")
    destination = PostgresDestination(other.conninfo, name="other", source=SourceCatalog(conn=source))
    try:
        with pytest.raises(DestinationError, match=r"type kinds\.posint exists .* DROP TYPE kinds\.posint"):
            destination.open_table(T, column_infos(source, T), 0)
    finally:
        destination.close()
    assert other.execute("SELECT to_regclass('t')::text") == [(None,)]


def test_without_the_function_or_the_source_catalog_the_replica_warns(
    source: psycopg.Connection[tuple[object, ...]], replica: Database, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    columns = [c for c in column_infos(source, T) if c.name != "b"]  # b is not replicated
    destination = PostgresDestination(replica.conninfo, name="replica", source=SourceCatalog(conn=source))
    try:
        destination.open_table(T, columns, 0)  # no function twice() in the replica
    finally:
        destination.close()
    assert list(_types(replica, "t")) == ["id", "m", "d", "s"]
    warned = "\n".join(_warnings(caplog))
    assert "generated column h of table public.t is left out" in warned and "(b)" in warned
    assert "created without its generated column(s) g" in warned and "twice" in warned

    caplog.clear()
    destination = PostgresDestination(replica.conninfo, name="replica")  # no source catalog
    try:
        destination.open_table(U, column_infos(source, U), 0)
    finally:
        destination.close()
    assert _types(replica, "u") == {"id": "integer", "m": "text"}
    assert any("column m of table public.u is created as text" in w for w in _warnings(caplog))
