"""The baseline's JSON projections (``typemap.spark.json_select``) run on a real PostgreSQL:
composites and arrays of composites as JSON whose strings are their fields' output text."""

from __future__ import annotations

import json
from typing import Any

from psycopg import sql

from airflow_provider_pgsync.hooks.catalog import table_columns
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.text_output import TEXT_OUTPUT
from airflow_provider_pgsync.typemap.spark import REFUSED, array_refusal, json_select, spark_read
from tests.conftest import Database

ODD = 'we{ird} "name" \\ it\'s'
WIDE = 60  # json_build_object takes 50 fields at most: a wider composite takes another road


def projected(database: Database, table: str) -> dict[str, list[Any]]:
    """Each column of ``table`` as the baseline projects it, by id, parsed from its JSON."""
    out: dict[str, list[Any]] = {}
    with database.connect() as conn, conn.transaction():
        for statement in TEXT_OUTPUT:
            conn.execute(statement)
        for name, pgtype in table_columns(conn, TableRef("public", table), None):
            read = spark_read(name, pgtype)
            query = sql.SQL("SELECT {} FROM {} ORDER BY id").format(
                sql.SQL(read.select).format(col=sql.Identifier(name)), sql.Identifier(table)
            )
            values = [r[0] for r in conn.execute(query)]
            out[name] = [json.loads(v) if read.convert == "json" and v is not None else v for v in values]
    return out


def test_composites_hold_their_fields_output_text(database: Database) -> None:
    database.execute(
        """
        CREATE TYPE inner_t AS (__ODD__ text, x xml, d date, j jsonb);
        CREATE TYPE outer_t AS (at timestamptz, ok boolean, n integer, inn inner_t, inns inner_t[],
                                xs xml[], ds date[]);
        CREATE TYPE wide_t AS (__WIDE__, at timestamp);
        CREATE TABLE t (id integer PRIMARY KEY, o outer_t, os outer_t[], grid inner_t[][], w wide_t);
        INSERT INTO t VALUES
          (1, ROW('2024-01-01 10:00:00.5+02', true, 7,
                  ROW('v', '<?xml version="1.0"?><a/>', '0044-03-15 BC', '{"k": [1, 2.50]}'),
                  ARRAY[ROW('w', '<b/>', 'infinity', 'null')::inner_t, NULL,
                        ROW(NULL, NULL, NULL, NULL)::inner_t],
                  '{"<?xml version=\\"1.0\\"?><c/>",NULL}', '{2024-02-29,-infinity}'),
              ARRAY[ROW('-infinity', false, NULL, NULL, '{}', '{}', NULL)::outer_t],
              '{{"(q,<z/>,2020-01-01,)"}}',
              ROW(__WIDE_VALUES__, '2000-01-01 00:00:00.000001')),
          (2, ROW(NULL, NULL, NULL, NULL, NULL, NULL, NULL), '{}', '{}', NULL),
          (3, NULL, NULL, NULL, ROW(__WIDE_NULLS__));
        """.replace("__ODD__", sql.Identifier(ODD).as_string())
        .replace("__WIDE__", ", ".join(f"f{i} text" for i in range(WIDE - 1)))
        .replace("__WIDE_VALUES__", ", ".join(f"'v{i}'" for i in range(WIDE - 1)))
        .replace("__WIDE_NULLS__", ", ".join("NULL" for _ in range(WIDE)))
    )
    got = projected(database, "t")

    inner = {ODD: "v", "x": "<a/>", "d": "0044-03-15 BC", "j": '{"k": [1, 2.50]}'}
    inners = [{ODD: "w", "x": "<b/>", "d": "infinity", "j": "null"}, None, dict.fromkeys(inner)]
    first = {
        "at": "2024-01-01 08:00:00.5+00",  # timestamptz's output under UTC, not to_json's ISO 8601
        "ok": True,
        "n": 7,
        "inn": inner,
        "inns": inners,
        "xs": ["<c/>", None],  # the output function drops the declaration, a cast to text keeps it
        "ds": ["2024-02-29", "-infinity"],
    }
    empty_outer = {"at": "-infinity", "ok": False, "n": None, "inn": None, "inns": [], "xs": [], "ds": None}
    assert got["o"] == [first, dict.fromkeys(first), None]
    assert got["os"] == [[empty_outer], [], None]
    # two dimensions declared: to_json's nesting (ISO dates are the same text)
    assert got["grid"] == [[[{ODD: "q", "x": "<z/>", "d": "2020-01-01", "j": None}]], [], None]
    wide_row = {f"f{i}": f"v{i}" for i in range(WIDE - 1)} | {"at": "2000-01-01 00:00:00.000001"}
    assert got["w"] == [wide_row, None, dict.fromkeys(wide_row)]


def test_scalars_whose_cast_differs_read_as_their_output(database: Database) -> None:
    database.execute("""
        CREATE DOMAIN doc AS xml;
        CREATE TABLE s (id integer PRIMARY KEY, x xml, dx doc, i inet, c cidr, ch "char", xa xml[]);
        INSERT INTO s VALUES
          (1, '<?xml version="1.0"?><a>1</a>', '<?xml version="1.0"?><b/>', '10.0.0.1', '10.0.0.0/8', 'q',
           '{"<?xml version=\\"1.0\\"?><a/>",NULL}'),
          (2, NULL, NULL, NULL, NULL, NULL, NULL);
    """)
    got = projected(database, "s")
    assert got["x"] == ["<a>1</a>", None]
    assert got["dx"] == ["<b/>", None]
    assert got["i"] == ["10.0.0.1", None]
    assert got["c"] == ["10.0.0.0/8", None]
    assert got["ch"] == ["q", None]
    assert got["xa"] == [["<a/>", None], None]


def test_arrays_the_lake_cannot_hold_are_refused_by_the_projection(database: Database) -> None:
    """A non-empty array with other dimensions than declared, or a lower bound other than 1,
    reads as ``REFUSED`` and the refusal's message after the column's name (the Spark job adds
    it and fails); every other value reads as the same JSON text as without the check."""
    database.execute("""
        CREATE TYPE tagged AS (n integer, tags text[]);
        CREATE TYPE boxed AS (label text, grid integer[][], inner_tags tagged);
        CREATE TABLE r (id integer PRIMARY KEY, tags text[], nums bigint[], grid integer[][],
                        xs xml[], o tagged, bs boxed[]);
        INSERT INTO r VALUES
          (1, '{{"a b","\\"q\\""},{NULL,"NULL"}}', '[-3:-1]={7,NULL,-9223372036854775808}', '{1,2}',
           '[0:0]={<a/>}', ROW(1, '[2:3]={x,y}'), ARRAY[ROW('b', '{{1}}', ROW(2, '{{z}}'))::boxed]),
          (2, '{"a b",NULL}', '{7,NULL,-9223372036854775808}', '[1:1][0:0]={{1}}',
           '{<a/>,NULL}', ROW(1, '{x,y}'), ARRAY[NULL, ROW('b', '{1}', NULL)::boxed]),
          (3, '{}', '{}', '{}', '{}', ROW(NULL, '{}'), '{}'),
          (4, NULL, NULL, NULL, NULL, NULL, NULL),
          (5, '[1:1]={x}', '{1}', '{{1,2},{3,4}}', NULL, ROW(3, NULL),
           ARRAY[ROW('c', '{}', ROW(4, '{w}'))::boxed]);
    """)
    got = raw_projection(database, "r")

    def refused(path: str, dims: str, declared: int) -> str:
        return REFUSED + array_refusal(path, dims, declared)

    assert got["tags"] == [
        refused("", "[1:2][1:2]", 1),
        '["a b",null]',
        "[]",
        None,
        '["x"]',
    ]
    assert got["nums"] == [refused("", "[-3:-1]", 1), "[7,null,-9223372036854775808]", "[]", None, "[1]"]
    assert got["grid"] == [refused("", "[1:2]", 2), refused("", "[1:1][0:0]", 2), "[]", None, "[[1,2],[3,4]]"]
    assert got["xs"] == [refused("", "[0:0]", 1), '["<a/>",null]', "[]", None, None]
    assert got["o"][0] == refused(", field 'tags'", "[2:3]", 1)
    assert [json.loads(v) if v else v for v in got["o"][1:]] == [
        {"n": 1, "tags": ["x", "y"]},
        {"n": None, "tags": []},
        None,
        {"n": 3, "tags": None},
    ]
    # its grid has the two dimensions declared; the tags of its inner_tags do not
    assert got["bs"][0] == refused(", field 'inner_tags', field 'tags'", "[1:1][1:1]", 1)
    assert got["bs"][1] == refused(", field 'grid'", "[1:1]", 2)
    assert [json.loads(v) if v else v for v in got["bs"][2:]] == [
        [],
        None,
        [{"label": "c", "grid": [], "inner_tags": {"n": 4, "tags": ["w"]}}],
    ]
    # every value that is not refused reads as the JSON without the check
    for column, unchecked in [
        ("tags", "to_json({col}::text[])::text"),
        ("nums", "to_json({col})::text"),
        ("grid", "to_json({col})::text"),
        ("xs", "to_json({col})::text"),
        ("o", None),
        ("bs", None),
    ]:
        plain = raw_projection(database, "r", unchecked=unchecked, only=column)[column]
        assert [v for v in got[column] if not (v or "").startswith(REFUSED)] == [
            p for v, p in zip(got[column], plain, strict=True) if not (v or "").startswith(REFUSED)
        ], column


def raw_projection(
    database: Database, table: str, *, unchecked: str | None = None, only: str | None = None
) -> dict[str, list[Any]]:
    """Each column of ``table`` (or ``only``) as the baseline projects it, the texts by id;
    with ``unchecked``, that projection instead (None: ``json_select``'s, without the check)."""
    out: dict[str, list[Any]] = {}
    with database.connect() as conn, conn.transaction():
        for statement in TEXT_OUTPUT:
            conn.execute(statement)
        for name, pgtype in table_columns(conn, TableRef("public", table), None):
            if name == "id" or (only is not None and name != only):
                continue
            select = spark_read(name, pgtype).select
            if only is not None:
                select = unchecked or json_select("{col}", pgtype) + "::text"
            query = sql.SQL("SELECT {} FROM {} ORDER BY id").format(
                sql.SQL(select).format(col=sql.Identifier(name)), sql.Identifier(table)
            )
            out[name] = [r[0] for r in conn.execute(query)]
    return out
