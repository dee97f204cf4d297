"""COPY's text format written from Arrow (``pg_copy_text.py``): what a real server reads back is
each value as given, whatever characters it holds, NULL only where the value is missing."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from airflow_provider_pgsync.destinations.pg_copy_text import copy_rows, copy_text
from tests.conftest import Database

# values made of the characters the format gives a meaning to, and others
_CHARS = st.sampled_from(["\\", "\t", "\n", "\r", "N", ".", '"', ",", "'", "x", "é", "€", "😀", " "])
_VALUE = st.one_of(st.none(), st.text(_CHARS, max_size=6), st.sampled_from(["\\N", "\\.", "", "\\\\N"]))
_ROWS = st.lists(st.tuples(_VALUE, _VALUE), max_size=40)

TABLE = sql.Identifier("copied")


@pytest.fixture
def conn(database: Database) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with database.connect() as c:
        yield c


def test_the_text_of_a_few_rows() -> None:
    rows = pa.table({"a": ["1", None, "tab\there"], "b": ["back\\slash", "\\N", "line\nbreak\r"]})
    assert b"".join(copy_text(rows)) == (b"1\tback\\\\slash\n\\N\t\\\\N\ntab\\there\tline\\nbreak\\r\n")


def test_no_rows_no_text() -> None:
    assert b"".join(copy_text(pa.table({"a": pa.array([], pa.string())}))) == b""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_ROWS, cut=st.integers(0, 40))
def test_any_values_come_back_as_they_were(
    conn: psycopg.Connection[tuple[object, ...]], rows: list, cut: int
) -> None:
    """Rows in two chunks (the first possibly empty, the second a slice of a larger array)."""
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(TABLE))
    conn.execute(sql.SQL("CREATE TABLE {} (i int, a text, b text)").format(TABLE))
    cut = min(cut, len(rows))
    columns = {
        "i": [str(n) for n in range(len(rows))],
        "a": [r[0] for r in rows],
        "b": [r[1] for r in rows],
    }
    whole = pa.table(
        {name: pa.array(["pad", *values, "pad"], pa.string()) for name, values in columns.items()}
    )
    first, second = whole.slice(1, cut), whole.slice(1 + cut, len(rows) - cut)
    table = pa.Table.from_batches([*first.to_batches(), *second.to_batches()], schema=whole.schema)
    copy_rows(conn, TABLE, ["i", "a", "b"], table)
    found = conn.execute(sql.SQL("SELECT a, b FROM {} ORDER BY i").format(TABLE)).fetchall()
    assert found == [tuple(r) for r in rows]


def test_typed_columns_read_their_text(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Texts of types whose output holds backslashes, quotes and newlines come back the same."""
    texts = {
        "bytea": "\\x00ff5c0a",
        "text[]": '{"back\\\\slash","tab\there","new\nline",NULL,"\\"quoted\\""}',
        "json": '{"k": "a\\\\b\\n",\n\t"t": 1}',  # whitespace kept as written
        "jsonb": '{"k": "a\\\\b"}',
        "numeric": "NaN",
        "timestamptz": "2024-02-29 12:34:56.123456+00",
        "point": "(1.5,-2)",
    }
    names = [f"c{i}" for i in range(len(texts))]
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute(
        sql.SQL("CREATE TABLE {} ({})").format(
            TABLE,
            sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t))
                for n, t in zip(names, texts, strict=True)
            ),
        )
    )
    copy_rows(conn, TABLE, names, pa.table({n: [v] for n, v in zip(names, texts.values(), strict=True)}))
    found = conn.execute(
        sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in names), TABLE
        )
    ).fetchone()
    assert found == tuple(texts.values())


def test_columns_that_are_not_strings(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    conn.execute(sql.SQL("CREATE TABLE {} (n bigint, f boolean, s text)").format(TABLE))
    rows = pa.table(
        {"n": pa.array([1, None, -7], pa.int64()), "f": [True, False, None], "s": ["a", "", None]}
    )
    copy_rows(conn, TABLE, ["n", "f", "s"], rows)
    assert conn.execute(sql.SQL("SELECT n, f, s FROM {} ORDER BY n NULLS LAST").format(TABLE)).fetchall() == [
        (-7, None, None),
        (1, True, "a"),
        (None, False, ""),
    ]
