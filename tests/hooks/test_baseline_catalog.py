"""The baseline's catalog reads and exported snapshot against a real PostgreSQL server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from airflow_provider_pgsync.baseline.handoff import visible_in_snapshot
from airflow_provider_pgsync.baseline.partitions import ctid_predicates
from airflow_provider_pgsync.baseline.plan import base_query
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.adapters import register_lsn
from airflow_provider_pgsync.hooks.catalog import relation_size, table_columns
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.snapshot import BaselineSnapshot, export_snapshot, parse_snapshot
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.publication import PublishedTable
from airflow_provider_pgsync.typemap.pgtypes import PgType
from airflow_provider_pgsync.typemap.spark import (
    DATE_MAX_DAYS,
    DATE_MIN_DAYS,
    REFUSED,
    TIMESTAMP_MAX_MICROS,
    TIMESTAMP_MIN_MICROS,
    spark_reads,
)
from tests.conftest import Database

ORDERS = TableRef("public", "Orders")

SETUP = """
CREATE SCHEMA "Odd Schema";
CREATE TYPE "Odd Schema".color AS ENUM ('red', 'green');
CREATE DOMAIN money2 AS numeric(10,2);
CREATE DOMAIN positive_money AS money2 CHECK (VALUE > 0);
CREATE DOMAIN int_list AS int[];
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TYPE "Item" AS (sku text, "Qty" int, price numeric(8,3), tags text[]);
CREATE TABLE "Orders" (
    id bigint PRIMARY KEY,
    amount money2,
    ids int_list,
    grid int[][],
    labels text[],
    feeling mood,
    item "Item",
    items "Item"[],
    total numeric GENERATED ALWAYS AS (amount * 2) STORED,
    gone int,
    small numeric(5,-2),
    "Mixed Case" text,
    price positive_money,
    amounts money2[],
    moods mood[],
    color "Odd Schema".color,
    plain numeric,
    day date,
    at timestamptz,
    ts timestamp(3),
    code char(5),
    prices numeric(6,2)[][]
);
ALTER TABLE "Orders" DROP COLUMN gone;
"""

INT4 = PgType("integer", "int4")
TEXT = PgType("text", "text")
MONEY2 = PgType("money2", "numeric", precision=10, scale=2)
MOOD = PgType("mood", "public.mood", "e")
PRICE = PgType("numeric(6,2)", "numeric", precision=6, scale=2)
TEXT_ARRAY_IN_TYPE = PgType("text[]", "array", "a", element=TEXT, ndims=1)
ITEM = PgType(
    '"Item"',
    "public.Item",
    "c",
    fields=(
        ("sku", TEXT),
        ("Qty", INT4),
        ("price", PgType("numeric(8,3)", "numeric", precision=8, scale=3)),
        ("tags", TEXT_ARRAY_IN_TYPE),
    ),
)

EXPECTED: list[tuple[str, PgType]] = [
    ("id", PgType("bigint", "int8")),
    ("amount", MONEY2),
    ("ids", PgType("int_list", "array", "a", element=INT4, ndims=1)),
    ("grid", PgType("integer[]", "array", "a", element=INT4, ndims=2)),
    ("labels", PgType("text[]", "array", "a", element=TEXT, ndims=1)),
    ("feeling", MOOD),
    ("item", ITEM),
    ("items", PgType('"Item"[]', "array", "a", element=ITEM, ndims=1)),
    ("small", PgType("numeric(5,-2)", "numeric", precision=5, scale=-2)),
    ("Mixed Case", TEXT),
    ("price", PgType("positive_money", "numeric", precision=10, scale=2)),
    ("amounts", PgType("money2[]", "array", "a", element=MONEY2, ndims=1)),
    ("moods", PgType("mood[]", "array", "a", element=MOOD, ndims=1)),
    ("color", PgType('"Odd Schema".color', "Odd Schema.color", "e")),
    ("plain", PgType("numeric", "numeric")),
    ("day", PgType("date", "date")),
    ("at", PgType("timestamp with time zone", "timestamptz")),
    ("ts", PgType("timestamp(3) without time zone", "timestamp")),
    ("code", PgType("character(5)", "bpchar")),
    ("prices", PgType("numeric(6,2)[]", "array", "a", element=PRICE, ndims=2)),
]


@pytest.fixture
def orders(database: Database) -> Database:
    with database.connect() as conn:
        conn.execute(SETUP)
    return database


# ---- table_columns ----------------------------------------------------------------------------


def test_table_columns_types(orders: Database) -> None:
    with orders.connect() as conn:
        columns = table_columns(conn, ORDERS)
    assert [name for name, _ in columns] == [name for name, _ in EXPECTED]  # no 'total', no 'gone'
    for (name, got), (_, expected) in zip(columns, EXPECTED, strict=True):
        assert got == expected, name


def test_table_columns_spark_types(orders: Database) -> None:
    with orders.connect() as conn:
        reads = {r.name: r for r in spark_reads(table_columns(conn, ORDERS), str(ORDERS))}
    assert {name: r.spark_type for name, r in reads.items()} == {
        "id": "bigint",
        "amount": "decimal(10,2)",
        "ids": "array<int>",
        "grid": "array<array<int>>",
        "labels": "array<string>",
        "feeling": "string",
        "item": "string",  # "Item" holds a numeric: its PostgreSQL text
        "items": "array<string>",
        "small": "string",
        "Mixed Case": "string",
        "price": "decimal(10,2)",
        "amounts": "array<string>",
        "moods": "array<string>",
        "color": "string",
        "plain": "string",
        "day": "date",
        "at": "timestamp",
        "ts": "timestamp_ntz",
        "code": "string",
        "prices": "array<array<string>>",
    }
    selects = {name: _json_part(r.select) for name, r in reads.items()}
    assert {name for name, select in selects.items() if select == "to_json({col})::text"} == {"ids", "grid"}
    assert {name for name, select in selects.items() if select == "to_json({col}::text[])::text"} == {
        "labels",
        "items",
        "amounts",
        "moods",
        "prices",
    }
    assert (selects["item"], selects["code"]) == ("{col}::text", "{col}")


def test_table_columns_subset_in_table_order(orders: Database) -> None:
    with orders.connect() as conn:
        columns = table_columns(conn, ORDERS, ["labels", "Mixed Case", "id"])
    assert [name for name, _ in columns] == ["id", "labels", "Mixed Case"]
    assert dict(columns)["labels"] == dict(EXPECTED)["labels"]


@pytest.mark.parametrize("missing", ["nope", "mixed case", "gone", "total"])
def test_table_columns_missing_column(orders: Database, missing: str) -> None:
    with orders.connect() as conn, pytest.raises(ConfigError) as info:
        table_columns(conn, ORDERS, ["id", missing])
    assert repr(missing) in str(info.value)
    assert str(ORDERS) in str(info.value)


def test_table_columns_missing_table(orders: Database) -> None:
    with orders.connect() as conn:
        with pytest.raises(ConfigError, match="does not exist") as info:
            table_columns(conn, TableRef("public", "orders"))  # unquoted: a different table
        assert "public.orders" in str(info.value)
        with pytest.raises(ConfigError, match="does not exist"):
            relation_size(conn, TableRef("nowhere", "Orders"))


def test_hstore(database: Database) -> None:
    available = database.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'hstore'")
    if not available:
        pytest.skip("the hstore extension is not installed on this server")
    with database.connect() as conn:
        conn.execute("CREATE SCHEMA ext")
        conn.execute("CREATE EXTENSION hstore SCHEMA ext")
        conn.execute("CREATE TABLE h (id int, attrs ext.hstore, many ext.hstore[])")
        columns = table_columns(conn, TableRef("public", "h"))
    hstore = PgType("ext.hstore", "hstore")
    assert columns == [
        ("id", INT4),
        ("attrs", hstore),
        ("many", PgType("ext.hstore[]", "array", "a", element=hstore, ndims=1)),
    ]
    reads = spark_reads(columns, "public.h")
    assert [(_json_part(r.select), r.spark_type) for r in reads] == [
        ("{col}", "int"),
        ("to_json({col})::text", "map<string,string>"),
        ("to_json({col}::text[])::text", "array<string>"),
    ]
    with database.connect() as conn:
        conn.execute(
            """INSERT INTO h VALUES (1, 'a=>1, b=>NULL', ARRAY['a=>1', '"x y"=>NULL', NULL]::ext.hstore[])"""
        )
        query = base_query(PublishedTable(TableRef("public", "h")), reads)
        row = conn.execute(sql.SQL("SELECT id, attrs, many FROM {}").format(query)).fetchone()
    assert row is not None
    assert json.loads(str(row[1])) == {"a": "1", "b": None}
    assert json.loads(str(row[2])) == ['"a"=>"1"', '"x y"=>NULL', None]  # each element's hstore text


# ---- the reads on the server ------------------------------------------------------------------

ROW = """
INSERT INTO "Orders" (id, amount, ids, grid, labels, feeling, item, items, small, "Mixed Case",
                      price, amounts, moods, color, plain, day, at, ts, code, prices)
VALUES (%s, 12.34, '{1,NULL,3}', '{{1,2},{3,NULL}}', '{a,NULL,"b c"}', 'ok',
        ROW('x-1', 2, 1.5, '{t}'),
        ARRAY[ROW('y', NULL, NULL, NULL)::"Item", ROW('z "q"', 3, 0.12345678, '{u,"v w"}')::"Item"],
        12345, 'mc', 1.25, '{1.50,NULL}', '{sad,happy}', 'red', 'NaN', %s, %s, %s,
        'ab', '{{1.5,NULL},{2,3}}')
"""


def test_reads_run_on_the_server(orders: Database) -> None:
    values = [
        (1, "1970-01-02", "1970-01-01 00:00:01.5+00", "1970-01-01 00:00:00.001"),
        (2, "infinity", "infinity", "infinity"),
        (3, "-infinity", "-infinity", "-infinity"),
        (4, "2024-02-29", "2024-02-29 12:00:00+02", "1969-12-31 23:59:59.999"),
        (5, None, None, None),
    ]
    with orders.connect() as conn:
        for row in values:
            conn.execute(ROW, row)
        columns = table_columns(conn, ORDERS)
        reads = spark_reads(columns, str(ORDERS))
        query = base_query(PublishedTable(ORDERS, row_filter="id <> 5 AND labels @> '{a}'"), reads)
        rows = conn.execute(sql.SQL("SELECT * FROM {} ORDER BY id").format(query)).fetchall()
    names = ["__pgsync_ctid", *(r.name for r in reads)]
    got = [dict(zip(names, row, strict=True)) for row in rows]
    assert [r["id"] for r in got] == [1, 2, 3, 4]  # the row filter left out id 5
    first = got[0]
    assert first["amount"] == "12.34" and first["price"] == "1.25"
    assert first["small"] == "12300"  # numeric(5,-2) rounds to hundreds
    assert first["plain"] == "NaN"
    assert first["ids"] == "[1,null,3]"
    assert first["grid"] == "[[1,2],[3,null]]"
    assert first["labels"] == '["a",null,"b c"]'
    assert first["item"] == "(x-1,2,1.500,{t})"  # every digit of the numeric field, as text
    assert json.loads(str(first["items"])) == ["(y,,,)", '("z ""q""",3,0.123,"{u,""v w""}")']
    assert first["amounts"] == '["1.50",null]'  # numerics as their text, not JSON numbers
    assert first["prices"] == '[["1.50",null],["2.00","3.00"]]'
    assert first["moods"] == '["sad","happy"]'
    assert first["code"] == "ab   "  # char(5) keeps its padding
    assert first["feeling"] == "ok" and first["color"] == "red" and first["Mixed Case"] == "mc"
    assert [(r["day"], r["at"], r["ts"]) for r in got] == [
        (1, 1_500_000, 1_000),
        (DATE_MAX_DAYS, TIMESTAMP_MAX_MICROS, TIMESTAMP_MAX_MICROS),
        (DATE_MIN_DAYS, TIMESTAMP_MIN_MICROS, TIMESTAMP_MIN_MICROS),
        (19782, 1_709_200_800_000_000, -1_000),
    ]


def test_ctid_partitions_read_every_row_once(database: Database) -> None:
    database.execute("CREATE TABLE wide (id int, pad text)")
    database.execute("INSERT INTO wide SELECT g, repeat('x', 500) FROM generate_series(1, 2000) g")
    table = PublishedTable(TableRef("public", "wide"))
    with database.connect() as conn:
        size, block_size, _ = relation_size(conn, table.table)
        reads = spark_reads(table_columns(conn, table.table, ["id"]), "public.wide")
        query = base_query(table, reads)
        blocks = size // block_size
        predicates = ctid_predicates(blocks - 5, 7)  # the table grew after its size was read
        seen: list[int] = []
        for predicate in predicates:
            part = conn.execute(
                sql.SQL("SELECT id FROM {} WHERE {}").format(query, sql.SQL(predicate))
            ).fetchall()
            assert part, predicate
            seen += [int(row[0]) for row in part]  # type: ignore[call-overload]
    assert len(predicates) == 7
    assert sorted(seen) == list(range(1, 2001))


# ---- relation_size ----------------------------------------------------------------------------


def test_relation_size(database: Database) -> None:
    # no autovacuum: it could analyse the table while the test looks at its row estimate
    database.execute("CREATE TABLE sized (id int, pad text) WITH (autovacuum_enabled = false)")
    empty = TableRef("public", "sized")
    with database.connect() as conn:
        assert relation_size(conn, empty) == (0, 8192, 0.0)
    database.execute("INSERT INTO sized SELECT g, repeat('y', 100) FROM generate_series(1, 1000) g")
    with database.connect() as conn:
        size, block_size, rows = relation_size(conn, empty)
        assert block_size == 8192
        assert size > 0 and size % block_size == 0
        assert (size,) == conn.execute("SELECT pg_relation_size('sized')").fetchone()
        assert rows == 0.0  # never analysed: reltuples is -1, reported as 0
        conn.execute("ANALYZE sized")
        assert relation_size(conn, empty)[2] == 1000.0


# ---- export_snapshot --------------------------------------------------------------------------


@pytest.fixture
def snapshot_table(database: Database) -> TableRef:
    database.execute("CREATE TABLE snap (id int PRIMARY KEY)")
    database.execute("INSERT INTO snap VALUES (1), (2), (3)")
    return TableRef("public", "snap")


@pytest.fixture
def open_writer(
    database: Database, snapshot_table: TableRef
) -> Iterator[tuple[psycopg.Connection[Any], int]]:
    """A transaction that inserted id 100 and is still open; its xid."""
    with database.connect(autocommit=False) as writer:
        writer.execute("INSERT INTO snap VALUES (100)")
        row = writer.execute("SELECT txid_current()").fetchone()
        assert row is not None
        yield writer, int(row[0])  # type: ignore[call-overload]


def lsn_now(database: Database) -> LSN:
    return LSN.parse(str(database.execute("SELECT pg_current_wal_insert_lsn()")[0][0]))


def locks_of(database: Database, pid: int, table: TableRef) -> list[tuple[object, ...]]:
    return database.execute(
        "SELECT mode, granted FROM pg_locks WHERE pid = %s AND relation = %s::regclass",
        (pid, str(table)),
    )


def ids_in_snapshot(database: Database, snapshot: str) -> tuple[list[int], str]:
    """The ids of ``snap`` a new REPEATABLE READ transaction sees after joining ``snapshot``,
    and that transaction's pg_current_snapshot()."""
    with database.connect(autocommit=False) as reader:
        reader.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        reader.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
        ids = [int(r[0]) for r in reader.execute("SELECT id FROM snap ORDER BY id")]  # type: ignore[call-overload]
        current = reader.execute("SELECT pg_current_snapshot()::text").fetchone()
        reader.rollback()
    assert current is not None
    return ids, str(current[0])


def test_export_snapshot(
    database: Database, snapshot_table: TableRef, open_writer: tuple[psycopg.Connection[Any], int]
) -> None:
    writer, writer_xid = open_writer
    # started after the writer and committed before the export: xmax passes the writer's xid,
    # so the writer is listed in xip (a running xid >= xmax is not)
    committed_xid = database.transaction("INSERT INTO snap VALUES (4)")
    assert committed_xid > writer_xid
    before = lsn_now(database)

    with database.connect(autocommit=False) as conn:
        register_lsn(conn.adapters)
        snap = export_snapshot(conn, snapshot_table)
        assert isinstance(snap, BaselineSnapshot)

        # the parts of the snapshot, against the concurrent transactions' xids
        assert writer_xid in snap.xip
        assert snap.xmin <= writer_xid < snap.xmax
        assert committed_xid < snap.xmax and committed_xid not in snap.xip
        assert visible_in_snapshot(committed_xid, snap.xmin, snap.xmax, snap.xip)
        assert not visible_in_snapshot(writer_xid, snap.xmin, snap.xmax, snap.xip)
        row = conn.execute("SELECT pg_current_snapshot()::text").fetchone()
        assert row is not None and parse_snapshot(str(row[0])) == (snap.xmin, snap.xmax, snap.xip)

        # the baseline LSN is an LSN taken at the export
        assert isinstance(snap.baseline_lsn, LSN)
        assert before <= snap.baseline_lsn <= lsn_now(database)

        # the transaction is REPEATABLE READ, read-only, and holds ACCESS SHARE on the table
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("repeatable read",)
        assert conn.execute("SHOW transaction_read_only").fetchone() == ("on",)
        pid = conn.info.backend_pid
        assert locks_of(database, pid, snapshot_table) == [("AccessShareLock", True)]

        # writes committed after the export are invisible to a transaction that joins it
        writer.commit()
        later_xid = database.transaction("INSERT INTO snap VALUES (5)")
        assert later_xid >= snap.xmax
        assert not visible_in_snapshot(later_xid, snap.xmin, snap.xmax, snap.xip)
        ids, reader_snapshot = ids_in_snapshot(database, snap.snapshot)
        assert ids == [1, 2, 3, 4]
        assert parse_snapshot(reader_snapshot) == (snap.xmin, snap.xmax, snap.xip)
        assert [r[0] for r in database.execute("SELECT id FROM snap ORDER BY id")] == [1, 2, 3, 4, 5, 100]
        assert [r[0] for r in conn.execute("SELECT id FROM snap ORDER BY id")] == [1, 2, 3, 4]

        # the lock keeps a table rewrite out until the transaction ends
        with database.connect(autocommit=False) as rewriter:
            rewriter.execute("SET LOCAL lock_timeout = '50ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                rewriter.execute("LOCK TABLE snap IN ACCESS EXCLUSIVE MODE")

        conn.rollback()
        assert locks_of(database, pid, snapshot_table) == []
        with database.connect(autocommit=False) as rewriter:
            rewriter.execute("SET LOCAL lock_timeout = '5s'")
            rewriter.execute("LOCK TABLE snap IN ACCESS EXCLUSIVE MODE")
            rewriter.rollback()


def test_export_snapshot_is_read_only(database: Database, snapshot_table: TableRef) -> None:
    with database.connect(autocommit=False) as conn:
        export_snapshot(conn, snapshot_table)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("INSERT INTO snap VALUES (9)")


def test_export_snapshot_never_reads_a_table_rewritten_after_it(
    database: Database, snapshot_table: TableRef
) -> None:
    with database.connect(autocommit=False) as alter, database.connect(autocommit=False) as conn:
        # a rewrite that has its ACCESS EXCLUSIVE lock but is not committed yet
        xid_row = alter.execute("SELECT txid_current()").fetchone()
        assert xid_row is not None
        alter_xid = int(xid_row[0])  # type: ignore[call-overload]
        alter.execute("ALTER TABLE snap ALTER COLUMN id TYPE bigint")
        alter_pid = alter.info.backend_pid
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["snapshot"] = export_snapshot(conn, snapshot_table)
            except BaseException as exc:
                outcome["error"] = exc

        exporter = threading.Thread(target=run)
        exporter.start()
        try:
            # wait (by condition, bounded) until the export is blocked behind the rewrite
            deadline = time.monotonic() + 30
            while not database.execute(
                "SELECT 1 WHERE %s = ANY (pg_blocking_pids(%s))", (alter_pid, conn.info.backend_pid)
            ):
                assert exporter.is_alive() and time.monotonic() < deadline, outcome
            alter.commit()
        finally:
            exporter.join(30)
        assert not exporter.is_alive()
        assert "error" not in outcome, outcome["error"]
        snap = outcome["snapshot"]
        # the lock waited for the rewrite, so the snapshot was taken after its commit
        assert visible_in_snapshot(alter_xid, snap.xmin, snap.xmax, snap.xip)
        ids = [row[0] for row in conn.execute("SELECT id FROM snap ORDER BY id")]
        assert ids == [1, 2, 3], "the baseline would silently read no rows"
        # and its catalog reads (table_columns) see the rewritten column type the rows have
        assert conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'snap'::regclass AND attname = 'id'"
        ).fetchone() == ("bigint",)
        assert locks_of(database, conn.info.backend_pid, snapshot_table) == [("AccessShareLock", True)]
        conn.rollback()


def test_export_snapshot_lsn_on_a_plain_connection(database: Database, snapshot_table: TableRef) -> None:
    before = lsn_now(database)
    with database.connect(autocommit=False) as conn:  # no register_lsn
        snap = export_snapshot(conn, snapshot_table)
    assert type(snap.baseline_lsn) is LSN
    assert before <= snap.baseline_lsn <= lsn_now(database)


@pytest.mark.parametrize(
    "table", [TableRef("public", "Snap"), TableRef("public", "nope")], ids=["case differs", "absent"]
)
def test_export_snapshot_missing_table(database: Database, snapshot_table: TableRef, table: TableRef) -> None:
    with (
        database.connect(autocommit=False) as conn,
        pytest.raises(ConfigError, match="does not exist") as info,
    ):
        export_snapshot(conn, table)
    assert str(table) in str(info.value)


def test_export_snapshot_table_of_a_missing_schema(database: Database) -> None:
    table = TableRef("nowhere", "snap")
    with (
        database.connect(autocommit=False) as conn,
        pytest.raises(ConfigError, match="does not exist") as info,
    ):
        export_snapshot(conn, table)
    assert str(table) in str(info.value)


def test_parse_snapshot() -> None:
    assert parse_snapshot("10:20:") == (10, 20, ())
    assert parse_snapshot("10:20:12,15") == (10, 20, (12, 15))
    big = (5 << 32) + 7
    assert parse_snapshot(f"{big}:{big + 3}:{big + 1}") == (big, big + 3, (big + 1,))


# ---- PgReplicationHook.baseline_snapshot ------------------------------------------------------


def test_hook_baseline_snapshot(
    database: Database,
    source_conn_id: str,
    snapshot_table: TableRef,
    open_writer: tuple[psycopg.Connection[Any], int],
) -> None:
    writer, writer_xid = open_writer
    # a transaction that started after the writer and completed: the snapshot's xmax passes
    # the writer's xid, which is therefore in xip (a running xid >= xmax is not listed)
    committed_xid = database.transaction("INSERT INTO snap VALUES (4)")
    assert committed_xid > writer_xid
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    with hook.baseline_snapshot(snapshot_table) as (snap, conn):
        assert isinstance(snap.baseline_lsn, LSN)
        assert writer_xid in snap.xip
        assert snap.xmin <= writer_xid < committed_xid < snap.xmax
        assert not visible_in_snapshot(writer_xid, snap.xmin, snap.xmax, snap.xip)
        assert visible_in_snapshot(committed_xid & 0xFFFFFFFF, snap.xmin, snap.xmax, snap.xip)
        pid = conn.info.backend_pid
        assert locks_of(database, pid, snapshot_table) == [("AccessShareLock", True)]
        # the catalog is readable in the snapshot's transaction
        assert table_columns(conn, snapshot_table) == [("id", INT4)]
        writer.commit()
        assert ids_in_snapshot(database, snap.snapshot)[0] == [1, 2, 3, 4]
        exported = snap.snapshot
    assert conn.closed
    assert locks_of(database, pid, snapshot_table) == []
    # the exported snapshot ended with its transaction
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        ids_in_snapshot(database, exported)


def test_hook_baseline_snapshot_released_on_error(
    database: Database, source_conn_id: str, snapshot_table: TableRef
) -> None:
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    with pytest.raises(RuntimeError, match="boom"), hook.baseline_snapshot(snapshot_table) as (_, conn):
        pid = conn.info.backend_pid
        raise RuntimeError("boom")
    assert conn.closed
    assert locks_of(database, pid, snapshot_table) == []


def _json_part(select: str) -> str:
    """A column's projection without the refusal of arrays the lake cannot hold around it
    (``typemap.spark.refusing_arrays``: ``COALESCE(<refusal>, <projection>)``)."""
    if not select.startswith(f"COALESCE(E'{REFUSED}'"):
        return select
    return select[select.rindex(", ") + 2 : -1]
