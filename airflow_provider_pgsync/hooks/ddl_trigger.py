"""Installing the source's DDL trigger and reading the catalog the way it does (``source/ddl.py``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import psycopg

from airflow_provider_pgsync.source import partition_events
from airflow_provider_pgsync.source.ddl import (
    ACTIVE_SQL,
    CATALOG_SQL,
    INSTALL_SQL,
    NOT_ACTIVE,
    TableColumns,
    parse_columns,
)
from airflow_provider_pgsync.source.names import TableRef

log = logging.getLogger(__name__)


def install_ddl_trigger(conn: psycopg.Connection[Any]) -> bool:
    """Install (or replace) the DDL trigger in one transaction; False, with a warning, when the
    role may not create event triggers (only a superuser may)."""
    try:
        with conn.transaction():
            conn.execute(INSTALL_SQL)  # a constant script, no parameters
            conn.execute(partition_events.INSTALL_SQL)  # likewise
    except psycopg.errors.InsufficientPrivilege as exc:
        log.warning("DDL trigger not installed (%s): %s", exc.diag.message_primary, NOT_ACTIVE)
        return False
    log.info("DDL trigger installed: event triggers pgsync_ddl_end, pgsync_table_rewrite, pgsync_table_drop")
    return True


def follow_partitions(conn: psycopg.Connection[Any], tables: Iterable[TableRef]) -> list[TableRef]:
    """Give each partitioned table of ``tables`` and its leaf partitions the truncate triggers of
    ``source/partition_events.py`` (idempotent); the tables followed. Nothing (with a warning)
    when the DDL trigger is not installed or the role may not create the triggers."""
    row = conn.execute(ACTIVE_SQL).fetchone()
    if row is None or not row[0]:
        return []
    names = [str(t) for t in tables]
    partitioned = conn.execute(
        "SELECT c.oid::int8, n.nspname::text, c.relname::text FROM unnest(%s::text[]) x"
        " JOIN pg_catalog.pg_class c ON c.oid = pg_catalog.to_regclass(x)"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'p'",
        (names,),
    ).fetchall()
    followed = []
    for oid, schema, name in partitioned:
        try:
            with conn.transaction():
                conn.execute(partition_events.follow_sql(int(oid)))
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedFunction) as exc:
            log.warning(
                "partitioned table %s: its truncate triggers were not made (%s): a TRUNCATE of one of "
                "its partitions would not be seen; run the setup DAG as a superuser",
                TableRef(schema, name),
                exc.diag.message_primary,
            )
            continue
        followed.append(TableRef(schema, name))
    if followed:
        log.info("partitioned tables followed (partition triggers): %s", ", ".join(map(str, followed)))
    return followed


def ddl_catalog(conn: psycopg.Connection[Any], tables: Iterable[TableRef]) -> dict[int, TableColumns] | None:
    """The catalog's columns of ``tables`` by relation OID, as the DDL trigger reports them; None
    (with a warning) when the trigger is not active, so no column identity can be proven."""
    row = conn.execute(ACTIVE_SQL).fetchone()
    if row is None or not row[0]:
        log.warning("%s", NOT_ACTIVE)
        return None
    names = [str(t) for t in tables]
    found = conn.execute(CATALOG_SQL, (names,)).fetchall()
    described = (parse_columns(r[0]) for r in found if r[0] is not None)
    return {t.oid: t for t in described}
