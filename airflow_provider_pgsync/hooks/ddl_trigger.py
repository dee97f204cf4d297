"""Installing the source's DDL trigger and reading the catalog the way it does (``source/ddl.py``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import psycopg

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
    except psycopg.errors.InsufficientPrivilege as exc:
        log.warning("DDL trigger not installed (%s): %s", exc.diag.message_primary, NOT_ACTIVE)
        return False
    log.info("DDL trigger installed: event triggers pgsync_ddl_end and pgsync_table_rewrite")
    return True


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
