"""Reading the source's catalogs: facts about configured tables, a publication's table list.

Helpers of ``PgReplicationHook``; each takes an open psycopg connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.preflight import TableFacts
from airflow_provider_pgsync.source.publication import PublishedTable, normalise_filter
from airflow_provider_pgsync.state.model import ColumnInfo
from airflow_provider_pgsync.typemap.pgtypes import PgType, numeric_precision_scale


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


def publication_state(conn: psycopg.Connection[Any], name: str, version: int) -> tuple[str, TableList] | None:
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


# ---- columns and their types (baseline) -----------------------------------------------------


def table_columns(
    conn: psycopg.Connection[Any], table: TableRef, columns: Sequence[str] | None = None
) -> list[tuple[str, PgType]]:
    """The table's columns in order (only ``columns`` when given), as pgoutput sends them:
    dropped and generated columns are left out. ConfigError names a missing table or column."""
    oid = relation_oid(conn, table)
    rows = conn.execute(
        "SELECT attname::text, atttypid::int8, atttypmod, attndims FROM pg_attribute"
        " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped AND attgenerated = ''"
        " ORDER BY attnum",
        (oid,),
    ).fetchall()
    found = {name: _describe_type(conn, type_oid, typmod, ndims) for name, type_oid, typmod, ndims in rows}
    if columns is None:
        return list(found.items())
    missing = [c for c in columns if c not in found]
    if missing:
        raise ConfigError(
            f"table {table} has no column(s) {', '.join(map(repr, missing))}; "
            f"its columns are {', '.join(found)}"
        )
    return [(name, pgtype) for name, pgtype in found.items() if name in columns]


def identity_columns(conn: psycopg.Connection[Any], table: TableRef) -> tuple[str, ...]:
    """The columns that identify a row in logical replication: the primary key (REPLICA
    IDENTITY DEFAULT) or the replica identity index, in index order; none for FULL or NOTHING."""
    rows = conn.execute(
        "SELECT a.attname::text FROM pg_class c"
        " JOIN pg_index i ON i.indrelid = c.oid"
        " AND CASE c.relreplident WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident"
        " ELSE false END"
        " JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, position) ON true"
        " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum"
        " WHERE c.oid = %s ORDER BY k.position",
        (relation_oid(conn, table),),
    ).fetchall()
    return tuple(r[0] for r in rows)


def column_infos(
    conn: psycopg.Connection[Any], table: TableRef, columns: Sequence[str] | None = None
) -> list[ColumnInfo]:
    """The table's columns (only ``columns`` when given) as capture records them from pgoutput's
    Relation message: type OID and modifier as declared (a domain's own OID), and ``is_key``
    for the replica identity's columns (every column under REPLICA IDENTITY FULL)."""
    oid = relation_oid(conn, table)
    keys = set(identity_columns(conn, table))
    row = conn.execute("SELECT relreplident::text FROM pg_class WHERE oid = %s", (oid,)).fetchone()
    full = row is not None and row[0] == "f"
    rows = conn.execute(
        "SELECT attname::text, atttypid::int8, atttypmod FROM pg_attribute"
        " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped AND attgenerated = ''"
        " ORDER BY attnum",
        (oid,),
    ).fetchall()
    wanted = None if columns is None else set(columns)
    return [
        ColumnInfo(name, int(type_oid), int(typmod), full or name in keys)
        for name, type_oid, typmod in rows
        if wanted is None or name in wanted
    ]


def relation_oid(conn: psycopg.Connection[Any], table: TableRef) -> int:
    row = conn.execute(
        "SELECT c.oid::int8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s",
        (table.schema, table.name),
    ).fetchone()
    if row is None:
        raise ConfigError(f"table {table} does not exist in the source; check the table name")
    return int(row[0])


def relation_size(conn: psycopg.Connection[Any], table: TableRef) -> tuple[int, int, float]:
    """``(bytes of the main fork, block size, estimated rows)`` of a table."""
    row = conn.execute(
        "SELECT pg_relation_size(c.oid), current_setting('block_size')::int, c.reltuples::float8"
        " FROM pg_class c WHERE c.oid = %s",
        (relation_oid(conn, table),),
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), max(float(row[2]), 0.0)


@dataclass(frozen=True)
class LeafPartition:
    """A leaf partition of a partitioned table, with what planning its reads needs."""

    table: TableRef
    bytes: int
    rows: float
    readable: bool
    """The role may read it alone (SELECT on it; a plain table, not a foreign one)."""


# Walks pg_inherits (not pg_partition_tree, whose catalog reads ignore the transaction's snapshot)
# so that a baseline sees the leaves of its own snapshot.
_LEAVES = """
    WITH RECURSIVE tree(oid) AS (
        SELECT %s::oid
        UNION ALL
        SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree t ON i.inhparent = t.oid
    )
    SELECT n.nspname::text, c.relname::text, coalesce(pg_catalog.pg_relation_size(c.oid), 0),
           greatest(c.reltuples, 0)::float8,
           c.relkind = 'r' AND pg_catalog.has_table_privilege(c.oid, 'SELECT')
    FROM tree t JOIN pg_catalog.pg_class c ON c.oid = t.oid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind <> 'p' AND c.oid <> %s::oid
    ORDER BY n.nspname, c.relname
"""


def leaf_partitions(conn: psycopg.Connection[Any], table: TableRef) -> list[LeafPartition] | None:
    """The leaf partitions of ``table`` as the transaction's snapshot sees them (sub-partitions'
    leaves included), by name; None when ``table`` is not a partitioned table."""
    oid = relation_oid(conn, table)
    row = conn.execute("SELECT relkind::text FROM pg_catalog.pg_class WHERE oid = %s", (oid,)).fetchone()
    if row is None or row[0] != "p":
        return None
    rows = conn.execute(_LEAVES, (oid, oid)).fetchall()
    return [LeafPartition(TableRef(r[0], r[1]), int(r[2]), float(r[3]), bool(r[4])) for r in rows]


_TYPE = """
    SELECT t.typname::text, t.typtype::text, t.typcategory::text, t.typelem::int8,
           t.typbasetype::int8, t.typtypmod, t.typndims, t.typrelid::int8, n.nspname::text,
           format_type(t.oid, %s)
    FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = %s
"""


def _describe_type(conn: psycopg.Connection[Any], oid: int, typmod: int, ndims: int) -> PgType:
    row = conn.execute(_TYPE, (typmod if typmod >= 0 else None, oid)).fetchone()
    if row is None:
        raise ConfigError(f"type oid {oid} is not in pg_type")
    typname, typtype, category, elem, basetype, base_typmod, typndims, relid, schema, name = row
    if typtype == "d":
        base = _describe_type(conn, basetype, base_typmod, typndims)
        return PgType(
            name, base.base, base.kind, base.element, base.ndims, base.fields, base.precision, base.scale
        )
    if category == "A" and elem:
        return PgType(name, "array", "a", element=_describe_type(conn, elem, typmod, 0), ndims=ndims)
    base_name = typname if schema == "pg_catalog" or typname == "hstore" else f"{schema}.{typname}"
    if typtype == "c":
        fields = conn.execute(
            "SELECT attname::text, atttypid::int8, atttypmod, attndims FROM pg_attribute"
            " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (relid,),
        ).fetchall()
        described = tuple((f, _describe_type(conn, t, m, d)) for f, t, m, d in fields)
        return PgType(name, base_name, "c", fields=described)
    precision = scale = None
    if typname == "numeric" and schema == "pg_catalog":
        ps = numeric_precision_scale(typmod)
        if ps is not None:
            precision, scale = ps
    return PgType(name, base_name, typtype, precision=precision, scale=scale)


# ---- tables followed by relation OID (state.followed) --------------------------------------


def names_by_oid(conn: psycopg.Connection[Any], oids: Sequence[int]) -> dict[int, TableRef]:
    """The current name of each relation OID of ``oids`` that exists."""
    rows = conn.execute(
        "SELECT c.oid::int8, n.nspname::text, c.relname::text FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ANY(%s::int8[]::oid[])",
        (list(oids),),
    ).fetchall()
    return {int(oid): TableRef(schema, name) for oid, schema, name in rows}


def oids_by_name(conn: psycopg.Connection[Any], tables: Sequence[TableRef]) -> dict[TableRef, int]:
    """The relation OID of each table of ``tables`` that exists."""
    rows = conn.execute(
        "SELECT u.s, u.t, c.oid::int8 FROM unnest(%s::text[], %s::text[]) AS u(s, t)"
        " JOIN pg_namespace n ON n.nspname = u.s"
        " JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = u.t",
        ([t.schema for t in tables], [t.name for t in tables]),
    ).fetchall()
    return {TableRef(schema, name): int(oid) for schema, name, oid in rows}
