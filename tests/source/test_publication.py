"""Tests of publication table entries and the SQL they render to (on a real connection)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.publication import (
    PublishedTable,
    normalise_filter,
    published_table,
    published_tables,
    table_list_sql,
)
from tests.conftest import Database

ORDERS = TableRef("public", "orders")


# ---- published_table -------------------------------------------------------------------------


def test_entry_forms() -> None:
    assert published_table("Orders") == PublishedTable(ORDERS)
    assert published_table('"Sales"."Big Orders"') == PublishedTable(TableRef("Sales", "Big Orders"))
    assert published_table(ORDERS) == PublishedTable(ORDERS)
    same = PublishedTable(ORDERS, ("id",), "id > 1")
    assert published_table(same) is same
    assert published_table({"table": "shop.orders", "columns": ["id", "Total"], "row_filter": "id > 1"}) == (
        PublishedTable(TableRef("shop", "orders"), ("id", "Total"), "id > 1")
    )
    assert published_table({"table": ORDERS, "columns": ("id",)}) == PublishedTable(ORDERS, ("id",))
    assert published_table({"table": "orders", "columns": None, "row_filter": None}) == PublishedTable(ORDERS)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"table": "orders", "colums": ["id"]},
            "has unknown keys ['colums']; allowed: table, columns, row_filter",
        ),
        ({"columns": ["id"]}, "needs a 'table' key ('schema.table')"),
        ({"table": "orders", "columns": "id"}, "table 'orders': 'columns' must be a list of column names"),
        (
            {"table": "orders", "columns": ["id", ""]},
            "table 'orders': 'columns' must be a list of column names",
        ),
        (
            {"table": "orders", "columns": ["id", 3]},
            "table 'orders': 'columns' must be a list of column names",
        ),
        ({"table": "orders", "columns": []}, "table public.orders: an empty column list publishes nothing"),
        ({"table": "orders", "row_filter": "  "}, "table public.orders: the row filter is empty; omit it"),
        ({"table": "a.b.c"}, "table name 'a.b.c' has 3 dotted parts"),
        ({"table": 42}, "table entry {'table': 42}: 'table' must be 'schema.table' or a TableRef"),
        ({"table": "orders", "row_filter": 5}, "table public.orders: the row filter must be a string, not 5"),
        ("orders;", "has unexpected ';'"),
        (42, "cannot read table entry 42; give 'schema.table' or a mapping"),
        (None, "cannot read table entry None"),
    ],
)
def test_bad_entries(spec: Any, message: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        published_table(spec)
    assert message in str(excinfo.value)


def test_published_tables_keeps_order() -> None:
    assert published_tables(["b", {"table": "a", "columns": ["x"]}]) == (
        PublishedTable(TableRef("public", "b")),
        PublishedTable(TableRef("public", "a"), ("x",)),
    )


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ("orders", "tables must be a list of table entries, not 'orders'"),
        ({"table": "orders"}, "tables must be a list of table entries, not {'table': 'orders'}"),
        ([], "no tables given: list at least one 'schema.table'"),
        (["orders", "public.ORDERS"], "table public.orders is listed twice"),
        (["orders", {"table": "orders", "columns": ["id"]}], "table public.orders is listed twice"),
    ],
)
def test_bad_table_lists(specs: Any, message: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        published_tables(specs)
    assert message in str(excinfo.value)


def test_same_name_in_other_case_when_quoted_is_another_table() -> None:
    tables = published_tables(["orders", '"Orders"'])
    assert [t.table for t in tables] == [ORDERS, TableRef("public", "Orders")]


# ---- normalise_filter ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "normal"),
    [
        (None, None),
        ("id > 1", "id > 1"),
        ("(id > 1)", "id > 1"),
        ("  ((id  >\n 1)) ", "id > 1"),
        ("(a > 1) AND (b < 2)", "(a > 1) AND (b < 2)"),
        ("((a > 1) AND (b < 2))", "(a > 1) AND (b < 2)"),
    ],
)
def test_normalise_filter(expr: str | None, normal: str | None) -> None:
    assert normalise_filter(expr) == normal


# ---- table_list_sql against a real connection ----------------------------------------------------


@pytest.fixture
def conn(database: Database) -> Iterator[psycopg.Connection[Any]]:
    with database.connect() as connection:
        yield connection


def test_table_list_sql_renders_quoted_identifiers(conn: psycopg.Connection[Any]) -> None:
    tables = published_tables(
        [
            "orders",
            {"table": '"Sales"."Odd ""Name""; DROP TABLE x;--"', "columns": ["id", "Total Due"]},
            {"table": "s.t", "row_filter": "id > 10 AND region = 'eu'"},
            {"table": "s.u", "columns": ["a"], "row_filter": "a IS NOT NULL"},
        ]
    )
    assert table_list_sql(tables).as_string(conn) == (
        'TABLE "public"."orders", '
        'TABLE "Sales"."Odd ""Name""; DROP TABLE x;--" ("id", "Total Due"), '
        'TABLE "s"."t" WHERE (id > 10 AND region = \'eu\'), '
        'TABLE "s"."u" ("a") WHERE (a IS NOT NULL)'
    )


def test_table_list_sql_is_accepted_by_the_server(database: Database, conn: psycopg.Connection[Any]) -> None:
    database.execute('CREATE SCHEMA "Sales"')
    database.execute(
        'CREATE TABLE "Sales"."Odd ""Name""; DROP TABLE x;--" (id int PRIMARY KEY, "Total Due" int)'
    )
    database.execute("CREATE TABLE orders (id int PRIMARY KEY, region text)")
    tables = published_tables(
        [
            {"table": '"Sales"."Odd ""Name""; DROP TABLE x;--"', "columns": ["id", "Total Due"]},
            {"table": "orders", "row_filter": "region = 'eu'"},
        ]
    )
    conn.execute(psycopg.sql.SQL("CREATE PUBLICATION p FOR {}").format(table_list_sql(tables)))
    rows = conn.execute(
        "SELECT schemaname::text, tablename::text, attnames::text[], rowfilter"
        " FROM pg_publication_tables WHERE pubname = 'p' ORDER BY 1, 2"
    ).fetchall()
    assert rows == [
        ("Sales", 'Odd "Name"; DROP TABLE x;--', ["id", "Total Due"], None),
        ("public", "orders", ["id", "region"], "(region = 'eu'::text)"),
    ]
