"""A PostgreSQL destination's orders table and its reader, as the destination tests use them (test-only)."""

from __future__ import annotations

from psycopg import sql

from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.testing.destination_kit import column
from tests.conftest import Database

INT4, INT8, TEXT, NUMERIC, TIMESTAMPTZ, JSONB = 23, 20, 25, 1700, 1184, 3802


ORDERS = TableRef("public", "orders")

ORDER_COLUMNS = [
    column("id", INT8, key=True),
    column("note", TEXT),
    column("amount", NUMERIC, type_modifier=(10 << 16 | 2) + 4),
    column("doc", TEXT),
    column("at", TIMESTAMPTZ),
]

BIG = "x" * 9000  # a TOASTed value in the source; sent as unchanged when not modified


def order(i: int, note: str = "n", doc: str | None = BIG, amount: str = "1.50") -> dict[str, str | None]:
    return {"id": str(i), "note": note, "amount": amount, "doc": doc, "at": "2024-01-01 10:00:00+00"}


def reader(database: Database):  # type: ignore[no-untyped-def]
    def read(table: TableRef) -> list[dict[str, str | None]]:
        with database.connect() as conn:
            conn.execute("SET TimeZone = 'UTC'")
            cur = conn.execute(sql.SQL("SELECT * FROM {}").format(table.identifier))
            names = [d.name for d in cur.description or ()]
            cur = conn.execute(
                sql.SQL("SELECT {} FROM {}").format(
                    sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in names),
                    table.identifier,
                )
            )
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]  # type: ignore[arg-type]

    return read
