"""What a PostgreSQL destination proves before apply writes to a table (DESIGN §2 rule 11): that
the table is the one its baseline made, and that nobody else has written to it since.

- **Identity.** The watermark row (``postgres_watermarks.py``) records the table's OID when the
  baseline swaps it in (or when apply creates it). A table dropped (or its schema), or dropped
  and created again under its name, is not that table: apply never creates it again empty.
- **Writes by others.** The baseline gives the table a statement-level trigger
  ``pgsync_guard`` (``AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE``, enabled ``ALWAYS`` so that
  sessions in ``session_replication_role = replica`` fire it too). For a statement of any
  session but pgsync's own (which set ``pgsync.writer``), it records the table's OID, the first
  statement's kind, the role and the time in ``<control schema>.foreign_writes``. It fires once
  per statement, not per row: apply's own statements pay one function call each. The trigger's
  function is ``SECURITY DEFINER`` (with a fixed ``search_path``), so a user's statement is
  recorded, never refused, whatever the user may do in the control schema.

``verify`` raises ``DestinationDivergedError`` naming what it found; apply then leaves the table
Errored in this destination until it is rebaselined (``postgres_baseline.finish_baseline``
records the new table and forgets the old one's writes). A table from an earlier version of
pgsync (no OID recorded) is adopted as it is, once, with a warning.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql

from airflow_provider_pgsync.errors import DestinationDivergedError
from airflow_provider_pgsync.source.names import TableRef

log = logging.getLogger(__name__)

WRITER_SETTING = "pgsync.writer"
"""Set to ``on`` in pgsync's own destination sessions: their statements are not someone else's."""
TRIGGER = "pgsync_guard"
FUNCTION = "pgsync_guard"
FOREIGN_WRITES = "foreign_writes"


def ensure_guard(conn: psycopg.Connection[Any], control_schema: str) -> None:
    """The ``foreign_writes`` table and the trigger function of ``control_schema`` (in the
    caller's transaction, which holds pgsync's DDL lock)."""
    writes = sql.Identifier(control_schema, FOREIGN_WRITES)
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (relid oid PRIMARY KEY, operation text NOT NULL,"
            " role_name text NOT NULL, first_at timestamptz NOT NULL, statements bigint NOT NULL)"
        ).format(writes)
    )
    function = sql.Identifier(control_schema, FUNCTION)
    exists = conn.execute(
        "SELECT to_regprocedure(%s) IS NOT NULL", (sql.SQL("{}()").format(function).as_string(conn),)
    ).fetchone()
    if exists and exists[0]:
        return
    body = sql.SQL(
        """
        BEGIN
          IF current_setting({setting}, true) IS DISTINCT FROM 'on' THEN
            INSERT INTO {writes} AS w (relid, operation, role_name, first_at, statements)
            VALUES (TG_RELID, TG_OP, session_user, now(), 1)
            ON CONFLICT (relid) DO UPDATE SET statements = w.statements + 1;
          END IF;
          RETURN NULL;
        END
        """
    ).format(setting=sql.Literal(WRITER_SETTING), writes=writes)
    conn.execute(
        sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER"
            " SET search_path = pg_catalog, pg_temp AS {}"
        ).format(function, sql.Literal(body.as_string(conn)))
    )


def install_trigger(conn: psycopg.Connection[Any], control_schema: str, table: TableRef) -> None:
    """Give ``table`` the guard trigger (in the caller's transaction), and forget writes recorded
    for a table that had its OID before."""
    conn.execute(
        sql.SQL(
            "CREATE TRIGGER {} AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {}"
            " FOR EACH STATEMENT EXECUTE FUNCTION {}()"
        ).format(sql.Identifier(TRIGGER), table.identifier, sql.Identifier(control_schema, FUNCTION))
    )
    conn.execute(
        sql.SQL("ALTER TABLE {} ENABLE ALWAYS TRIGGER {}").format(table.identifier, sql.Identifier(TRIGGER))
    )
    forget_writes(conn, control_schema, table)


def forget_writes(conn: psycopg.Connection[Any], control_schema: str, table: TableRef) -> None:
    """Drop the writes recorded for ``table``'s OID, and for OIDs no table has any more."""
    conn.execute(
        sql.SQL(
            "DELETE FROM {} w WHERE w.relid = to_regclass(%s)"
            " OR NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = w.relid)"
        ).format(sql.Identifier(control_schema, FOREIGN_WRITES)),
        (table.identifier.as_string(conn),),
    )


def table_oid(conn: psycopg.Connection[Any], table: TableRef) -> int | None:
    """The OID of ``table`` in this database (None: no such table)."""
    row = conn.execute("SELECT to_regclass(%s)::oid", (table.identifier.as_string(conn),)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def verify(
    conn: psycopg.Connection[Any],
    control_schema: str,
    destination: str,
    table: TableRef,
    lineage: str,
    held: tuple[str | None, int | None] | None,
) -> int | None:
    """Raise ``DestinationDivergedError`` unless ``table`` holds the baseline ``lineage``:
    ``held`` is its watermark row's (lineage, OID) or None when it has no row. Returns the OID to
    record when the row has none yet (a table from an earlier version, adopted), else None."""
    where = f"destination {destination}: table {table}"
    if held is None:
        raise DestinationDivergedError(
            f"{where} has no watermark row in {control_schema}.watermarks, though the pipeline holds "
            f"its baseline {lineage} there: the row, or the control schema, was removed by someone"
        )
    held_lineage, recorded = held
    if held_lineage is not None and held_lineage != lineage:
        raise DestinationDivergedError(
            f"{where} holds baseline {held_lineage}, not {lineage}, the one the pipeline's state expects"
        )
    oid = table_oid(conn, table)
    if oid is None:
        raise DestinationDivergedError(
            f"{where} is gone: it was dropped (or its schema was, or it was renamed) outside pgsync; "
            "apply does not create it again empty"
        )
    if recorded is None:
        log.warning(
            "%s: made by an earlier version of pgsync, its identity (OID %s) recorded now", where, oid
        )
        if _trigger_state(conn, oid) is None:
            install_trigger(conn, control_schema, table)
        return oid
    if oid != recorded:
        raise DestinationDivergedError(
            f"{where} is not the table its baseline made (OID {recorded}, now {oid}): it was dropped "
            "and created again, or replaced by another table of that name, outside pgsync"
        )
    state = _trigger_state(conn, oid)
    if state is None or state == "D":
        raise DestinationDivergedError(
            f"{where} lost its trigger {TRIGGER} ({'dropped' if state is None else 'disabled'} outside "
            "pgsync): writes by others to it can no longer be told"
        )
    writes = conn.execute(
        sql.SQL("SELECT operation, role_name, first_at, statements FROM {} WHERE relid = %s").format(
            sql.Identifier(control_schema, FOREIGN_WRITES)
        ),
        (oid,),
    ).fetchone()
    if writes is not None:
        operation, role, first_at, statements = writes
        raise DestinationDivergedError(
            f"{where} was written outside pgsync: {statements} statement(s) since "
            f"{first_at:%Y-%m-%d %H:%M:%S %Z} (the first: {operation} by role {role}); its rows may "
            "no longer be the source's"
        )
    return None


def _trigger_state(conn: psycopg.Connection[Any], oid: int) -> str | None:
    """``tgenabled`` of the guard trigger on the table ``oid`` (None: it has none)."""
    row = conn.execute(
        "SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = %s AND tgname = %s", (oid, TRIGGER)
    ).fetchone()
    return None if row is None else str(row[0])
