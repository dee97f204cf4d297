"""Reading the source's catalogs: facts about configured tables, a publication's table list.

Helpers of ``PgReplicationHook``; each takes an open psycopg connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.preflight import TableFacts
from airflow_provider_pgsync.source.publication import PublishedTable, normalise_filter


def table_facts(conn: psycopg.Connection[Any], table: TableRef, publication_name: str) -> TableFacts:
    row = conn.execute(
        """
        SELECT c.relkind::text, c.relreplident::text,
               EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
               has_table_privilege(c.oid, 'SELECT'),
               pg_has_role(c.relowner, 'USAGE'),
               EXISTS (SELECT 1 FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
                       WHERE pr.prrelid = c.oid AND p.pubname = %s)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relname = %s
        """,
        (publication_name, table.schema, table.name),
    ).fetchone()
    if row is None:
        return TableFacts(table, exists=False)
    return TableFacts(table, True, row[0], row[1], row[2], row[3], row[4], row[5])


TableList = dict[TableRef, tuple[frozenset[str] | None, str | None]]


def desired_state(tables: Sequence[PublishedTable]) -> tuple[str, TableList]:
    return "tables", {
        t.table: (frozenset(t.columns) if t.columns else None, normalise_filter(t.row_filter)) for t in tables
    }


def publication_state(
    conn: psycopg.Connection[Any], name: str, version: int
) -> tuple[str, TableList] | None:
    pub = conn.execute(
        "SELECT puballtables, pubinsert AND pubupdate AND pubdelete AND pubtruncate AND pubviaroot"
        " FROM pg_publication WHERE pubname = %s",
        (name,),
    ).fetchone()
    if pub is None:
        return None
    if pub[0]:
        raise ConfigError(
            f"publication {name} exists FOR ALL TABLES; pgsync manages the table list of its own "
            "publication: choose another publication name"
        )
    if version >= 150000:
        has_schemas = conn.execute(
            "SELECT 1 FROM pg_publication_namespace pn JOIN pg_publication p ON p.oid = pn.pnpubid"
            " WHERE p.pubname = %s",
            (name,),
        ).fetchone()
        if has_schemas:
            raise ConfigError(
                f"publication {name} publishes whole schemas (FOR TABLES IN SCHEMA); pgsync manages "
                "the table list of its own publication: choose another publication name"
            )
        rows = conn.execute(_PUBLISHED_TABLES_15, (name,)).fetchall()
    else:
        rows = conn.execute(_PUBLISHED_TABLES_14, (name,)).fetchall()
    state: TableList = {
        TableRef(schema, rel): (frozenset(cols) if cols else None, normalise_filter(qual))
        for schema, rel, cols, qual in rows
    }
    # a publication that does not publish every operation via the root must be altered too
    return ("tables" if pub[1] else "partial-publish"), state


_PUBLISHED_TABLES_14 = """
    SELECT n.nspname::text, c.relname::text, NULL::text[], NULL::text
    FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
    JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE p.pubname = %s
"""
_PUBLISHED_TABLES_15 = """
    SELECT n.nspname::text, c.relname::text,
           (SELECT array_agg(a.attname::text) FROM pg_attribute a
            WHERE a.attrelid = pr.prrelid AND a.attnum = ANY(pr.prattrs)),
           pg_get_expr(pr.prqual, pr.prrelid)
    FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
    JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE p.pubname = %s
"""


