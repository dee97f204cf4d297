"""Hostile identifiers replicate as data, never as SQL."""

from __future__ import annotations

from psycopg import sql

from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.pgoutput import Delete, Insert, PgOutputDecoder, Relation, Update
from airflow_provider_pgsync.source.names import TableRef
from tests.conftest import Database

SCHEMA = "Sales Data"
TABLE = 'Odd "Name"; DROP TABLE x;--'


def test_odd_table_name_replicates_without_injection(database: Database, source_conn_id: str) -> None:
    table = TableRef(SCHEMA, TABLE)
    with database.connect() as conn:
        conn.execute("CREATE TABLE x (canary int)")
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
        conn.execute(
            sql.SQL('CREATE TABLE {} (id int PRIMARY KEY, "Value; --" text)').format(table.identifier)
        )
    assert TableRef.parse(str(table)) == table

    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    hook.preflight(slot_name="odd_slot", tables=[str(table)], publication_name="odd_pub")
    assert hook.ensure_publication("odd_pub", [str(table)]) == "created"
    assert hook.ensure_publication("odd_pub", [table]) == "unchanged"
    hook.ensure_slot("odd_slot")

    with database.connect() as conn:
        target = table.identifier
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'one'), (2, 'two')").format(target))
        conn.execute(sql.SQL("UPDATE {} SET \"Value; --\" = 'uno' WHERE id = 1").format(target))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = 2").format(target))

    decoder = PgOutputDecoder()
    with hook.peek("odd_slot", ["odd_pub"], upto_lsn=hook.wal_positions().flush, upto_nchanges=None) as rows:
        messages = [decoder.decode(data) for _, _, data in rows]

    relation = next(m for m in messages if isinstance(m, Relation))
    assert (relation.namespace, relation.relation_name) == (SCHEMA, TABLE)
    assert [c.name for c in relation.columns] == ["id", "Value; --"]
    changes = [m for m in messages if isinstance(m, Insert | Update | Delete)]
    assert [type(m).__name__ for m in changes] == ["Insert", "Insert", "Update", "Delete"]
    update = changes[2]
    assert isinstance(update, Update) and update.new_tuple.values == (b"1", b"uno")

    # nothing was injected: the canary table is still there and the schema holds one table
    assert database.execute("SELECT to_regclass('public.x') IS NOT NULL") == [(True,)]
    assert database.execute(
        "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind = 'r'",
        (SCHEMA,),
    ) == [(TABLE,)]
    assert database.execute("SELECT schemaname, tablename FROM pg_publication_tables") == [(SCHEMA, TABLE)]
