"""The PostgreSQL destination's baseline steps against a real database: a staging table
prepared, filled, swapped in atomically with its watermark reset, or discarded."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.destinations.postgres_baseline import staging_name
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo
from tests.conftest import Database
from tests.support.replica import rows

TABLE = TableRef("shop", "items")
COLUMNS = [
    ColumnInfo("id", 23, -1, True),  # integer
    ColumnInfo("price", 1700, (12 << 16 | 2) + 4, False),  # numeric(12,2)
    ColumnInfo("mood", 70000, -1, False),  # an enum of the source: text here
]
FIRST = "v20260101T000000Z-0123abcd"
SECOND = "v20260102T000000Z-89abcdef"


def _staging_tables(replica: Database) -> list[str]:
    found = replica.execute(
        "SELECT relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'pgsync' AND starts_with(relname, 'baseline_v') AND relkind = 'r' ORDER BY 1"
    )
    return [str(r[0]) for r in found]


def _fill(replica: Database, staging: str, *values: tuple[object, ...]) -> None:
    with replica.connect() as conn:
        insert = sql.SQL("INSERT INTO {} VALUES ({})")
        for row in values:
            marks = sql.SQL(", ").join(sql.Placeholder() for _ in row)
            conn.execute(insert.format(TableRef.parse(staging).identifier, marks), row)


def _count(replica: Database, table: str) -> int:
    with replica.connect() as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(TableRef.parse(table).identifier)
        ).fetchone()
    assert row is not None
    return int(row[0])


def _watermark(replica: Database, commit_lsn: int, seq: int) -> None:
    replica.execute(
        "INSERT INTO pgsync.watermarks (destination, table_key, commit_lsn, seq)"
        " VALUES ('replica', 'shop.items', %s, %s)"
        " ON CONFLICT (destination, table_key)"
        " DO UPDATE SET commit_lsn = EXCLUDED.commit_lsn, seq = EXCLUDED.seq",
        (commit_lsn, seq),
    )


def test_staging_table_name_fits_and_follows_the_lineage() -> None:
    assert staging_name(FIRST) == "baseline_v20260101t000000z_0123abcd"
    long = staging_name("x" * 200)
    assert len(long.encode()) + len("_pkey") <= 63 and long != staging_name("x" * 199)
    assert staging_name("A b") != staging_name("a_b")


def test_prepare_then_finish_swaps_the_table_in_with_a_reset_watermark(replica: Database) -> None:
    destination = PostgresDestination(replica.conninfo, name="replica", fillfactor=80)
    destination.open_table(TABLE, COLUMNS, 0)
    replica.execute("INSERT INTO shop.items VALUES (1, 1.00, 'old')")
    _watermark(replica, 99, 3)
    assert destination.watermark(TABLE) == (99, 3) and destination.lineage(TABLE) is None

    staging = destination.prepare_baseline(TABLE, COLUMNS, FIRST)
    assert staging == "pgsync.baseline_v20260101t000000z_0123abcd"
    _fill(replica, staging, (7, 1.5, "x"))
    assert destination.prepare_baseline(TABLE, COLUMNS, FIRST) == staging, "a retried attempt"
    assert _count(replica, staging) == 0, "made again, empty"
    described = replica.execute(
        "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attnum > 0 ORDER BY attnum",
        (staging,),
    )
    assert described == [("id", "integer"), ("price", "numeric(12,2)"), ("mood", "text")]
    assert replica.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (staging,)) == [
        (["fillfactor=80"],)
    ]
    assert replica.execute("SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass", (staging,)) == [
        (0,)
    ]
    _fill(replica, staging, (1, 10.5, "happy"), (2, None, None), (3, 0, ""))
    assert rows(replica, "shop.items") == [("1", "1.00", "old")], "nobody sees the staging rows"

    destination.finish_baseline(TABLE, staging, FIRST, COLUMNS)

    assert rows(replica, "shop.items") == [("1", "10.50", "happy"), ("2", None, None), ("3", "0.00", "")]
    assert destination.watermark(TABLE) is None, "no change applied yet"
    assert destination.lineage(TABLE) == FIRST
    assert _staging_tables(replica) == []
    assert replica.execute(
        "SELECT conname::text, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = 'shop.items'::regclass"
    ) == [("items_pkey", "PRIMARY KEY (id)")]
    assert replica.execute("SELECT reloptions FROM pg_class WHERE oid = 'shop.items'::regclass") == [
        (["fillfactor=80"],)
    ]
    assert replica.execute("SELECT obj_description('shop.items'::regclass, 'pg_class')") == [(None,)]
    assert replica.execute("SELECT count(*) FROM pgsync.baseline_parts") == [(0,)]
    # apply's watermark keeps the lineage; open_table leaves the baselined table alone
    destination.open_table(TABLE, COLUMNS, 0)
    _watermark(replica, 5, 0)
    assert (destination.watermark(TABLE), destination.lineage(TABLE)) == ((5, 0), FIRST)
    destination.close()


def test_a_failed_finish_leaves_the_old_table_and_discard_drops_the_staging_table(replica: Database) -> None:
    destination = PostgresDestination(replica.conninfo, name="replica")
    destination.open_table(TABLE, COLUMNS, 0)
    replica.execute("INSERT INTO shop.items VALUES (1, 1.00, 'old')")
    stale = destination.prepare_baseline(TABLE, COLUMNS, FIRST)  # an attempt that died
    other = destination.prepare_baseline(TableRef("shop", "other"), COLUMNS, "v20260103T000000Z-00000000")
    staging = destination.prepare_baseline(TABLE, COLUMNS, SECOND)
    assert _staging_tables(replica) == sorted([TableRef.parse(other).name, TableRef.parse(staging).name]), (
        f"{stale} (of the same table) was not dropped"
    )
    _fill(replica, staging, (1, 1, "a"), (1, 2, "b"))  # a key twice: no primary key can hold it

    with pytest.raises(DestinationError, match=r"shop\.items.*could not be swapped in.*rebaseline"):
        destination.finish_baseline(TABLE, staging, SECOND, COLUMNS)

    assert rows(replica, "shop.items") == [("1", "1.00", "old")]
    assert replica.execute("SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass", (staging,)) == [
        (0,)
    ]
    destination.discard_baseline(staging)
    destination.discard_baseline(staging)  # nothing left: nothing to do
    assert _staging_tables(replica) == [TableRef.parse(other).name]
    destination.close()


def test_a_table_without_key_gets_no_primary_key_and_a_new_schema(replica: Database) -> None:
    columns = [ColumnInfo("kind", 25, -1, True), ColumnInfo("n", 20, -1, True)]  # REPLICA IDENTITY FULL
    table = TableRef("New Schema", "Events")
    destination = PostgresDestination(replica.conninfo, name="replica", control_schema="ctl")
    staging = destination.prepare_baseline(table, columns, FIRST)
    assert staging.startswith("ctl.")
    _fill(replica, staging, ("a", 1), ("a", 1))
    destination.finish_baseline(table, staging, FIRST, columns)
    assert replica.execute('SELECT kind, n FROM "New Schema"."Events"') == [("a", 1), ("a", 1)]
    assert replica.execute(
        'SELECT count(*) FROM pg_constraint WHERE conrelid = \'"New Schema"."Events"\'::regclass'
    ) == [(0,)]
    assert destination.lineage(table) == FIRST and destination.watermark(table) is None
    destination.close()


def test_a_watermarks_table_of_an_earlier_version_is_upgraded(replica: Database) -> None:
    replica.execute("CREATE SCHEMA pgsync")
    replica.execute(
        "CREATE TABLE pgsync.watermarks (destination text, table_key text, commit_lsn numeric(20) NOT NULL,"
        " seq bigint NOT NULL, PRIMARY KEY (destination, table_key))"
    )
    replica.execute("INSERT INTO pgsync.watermarks VALUES ('replica', 'shop.items', 42, 1)")
    destination = PostgresDestination(replica.conninfo, name="replica")
    assert destination.watermark(TABLE) == (42, 1) and destination.lineage(TABLE) is None
    with psycopg.connect(replica.conninfo) as conn:
        nullable = conn.execute(
            "SELECT attname::text, NOT attnotnull FROM pg_attribute"
            " WHERE attrelid = 'pgsync.watermarks'::regclass"
            " AND attname IN ('commit_lsn', 'seq', 'lineage') ORDER BY attnum"
        ).fetchall()
    assert nullable == [("commit_lsn", True), ("seq", True), ("lineage", True)]
    destination.close()
    PostgresDestination(replica.conninfo, name="replica").close()  # a second open alters nothing


def test_long_table_names_that_share_their_first_58_bytes_each_get_a_primary_key(replica: Database) -> None:
    """PostgreSQL cuts ``<name>_pkey`` to 63 bytes: two such tables in one schema would claim one
    index name. Each baseline picks a free name the way PostgreSQL does (``..._pkey1``), also
    when it replaces the table."""
    head = "é" * 29  # 58 bytes: the rest of each name is cut from its key's name
    tables = [TableRef("shop", head + "_one1"), TableRef("shop", head + "_two2")]
    destination = PostgresDestination(replica.conninfo, name="replica")
    for lineage in (FIRST, SECOND):  # a baseline of both, then a rebaseline of both
        for i, table in enumerate(tables):
            staging = destination.prepare_baseline(table, COLUMNS[:2], lineage)
            _fill(replica, staging, (i, i))
            destination.finish_baseline(table, staging, lineage, COLUMNS[:2])
        keys = replica.execute(
            "SELECT conrelid::regclass::text, conname::text FROM pg_constraint"
            " WHERE connamespace = 'shop'::regnamespace AND contype = 'p' ORDER BY 1"
        )
        # "é" is two bytes: "_pkey1" leaves room for 28 of them
        assert keys == [(str(tables[0]), head + "_pkey"), (str(tables[1]), "é" * 28 + "_pkey1")], keys
        assert [rows(replica, str(t)) for t in tables] == [[("0", "0.00")], [("1", "1.00")]]
    destination.close()


def test_destinations_opened_at_once_on_a_fresh_replica_all_succeed(replica: Database) -> None:
    """Baselines of several tables start at once under a real executor, each opening the
    destination, which makes the control schema and tables when missing: a concurrent
    ``CREATE SCHEMA IF NOT EXISTS`` fails with a unique violation unless pgsync's DDL lock
    orders them. Eight openers released together, over four fresh control schemas."""
    import threading

    for round_ in range(4):
        start = threading.Barrier(8)
        errors: list[BaseException] = []

        def open_one(
            schema: str = f"ctl_{round_}",
            start: threading.Barrier = start,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                start.wait(timeout=30)
                PostgresDestination(replica.conninfo, name="replica", control_schema=schema).close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
