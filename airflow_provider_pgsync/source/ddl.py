"""The source's DDL trigger: what it installs, and the messages it puts into the WAL.

Why a trigger: a Relation message says which columns a table has now, not what happened to
them. A renamed column, a column dropped and added again under the same name, the constant
default an added column gives to the rows it did not rewrite (``attmissingval``: PostgreSQL
writes no WAL for them) and a rewrite of every row (``ALTER COLUMN ... TYPE ... USING``, a
volatile default) all look alike or invisible there. Two event triggers write, inside the
DDL's own transaction, a transactional logical message with the table's catalog columns
after the command (``ddl_command_end``) and one for each table rewrite (``table_rewrite``),
so capture reads them in the stream exactly where they happened, before any change made
under the new columns. A third (``sql_drop``) writes one for each table dropped, so capture
records the drop after every change made before it (``state/dropped.py``). The reading catalog
query is here; the hook runs it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from airflow_provider_pgsync.errors import DecodeError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.columns import VALUE_REWRITES, ColumnInfo

DDL_PREFIX = "pgsync.ddl"
REWRITE_PREFIX = "pgsync.rewrite"
DROP_PREFIX = "pgsync.drop"
TRIGGER_SCHEMA = "pgsync_ddl"
"""Where the trigger's functions live (not ``pgsync``: a role of that name would create its tables
there, as ``$user`` comes first in the default search_path)."""

# The live columns of table ``rel`` as pgoutput describes them (attnum order; key flags by the
# replica identity: the primary key by default, the identity index, or every column for FULL),
# with attnum, generated flag and the missing value as the column type's output text.
_COLUMNS_SQL = """
SELECT jsonb_build_object(
  'oid', c.oid::bigint, 'schema', n.nspname, 'name', c.relname,
  'columns', coalesce((
    SELECT jsonb_agg(jsonb_build_array(
             a.attnum, a.attname, a.atttypid::bigint, a.atttypmod,
             CASE c.relreplident
               WHEN 'f' THEN true
               WHEN 'n' THEN false
               ELSE EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                            WHERE i.indrelid = c.oid AND a.attnum = ANY (i.indkey::int2[])
                              AND CASE c.relreplident WHEN 'i' THEN i.indisreplident ELSE i.indisprimary END)
             END,
             a.attgenerated <> '',
             CASE WHEN a.atthasmissing THEN pg_catalog.array_to_string(a.attmissingval, '') END)
           ORDER BY a.attnum)
    FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '[]'::jsonb))
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = rel
"""

INSTALL_SQL = f"""
CREATE SCHEMA IF NOT EXISTS {TRIGGER_SCHEMA};
CREATE OR REPLACE FUNCTION {TRIGGER_SCHEMA}.ddl_columns(rel oid) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog AS $pgsync${_COLUMNS_SQL}$pgsync$;
CREATE OR REPLACE FUNCTION {TRIGGER_SCHEMA}.ddl_end() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgsync$
DECLARE
  r record;
  -- a USING clause may compute any value: only its absence proves a type change kept values
  used boolean := pg_catalog.current_query() ~* '\\musing\\M';
BEGIN
  FOR r IN SELECT DISTINCT objid FROM pg_catalog.pg_event_trigger_ddl_commands()
           WHERE classid = 'pg_catalog.pg_class'::pg_catalog.regclass
             AND object_type IN ('table', 'table column') LOOP
    PERFORM pg_catalog.pg_logical_emit_message(true, '{DDL_PREFIX}',
      ({TRIGGER_SCHEMA}.ddl_columns(r.objid) || pg_catalog.jsonb_build_object('using', used))::text);
  END LOOP;
END $pgsync$;
CREATE OR REPLACE FUNCTION {TRIGGER_SCHEMA}.table_rewrite() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgsync$
BEGIN
  PERFORM pg_catalog.pg_logical_emit_message(true, '{REWRITE_PREFIX}', pg_catalog.jsonb_build_object(
    'oid', pg_catalog.pg_event_trigger_table_rewrite_oid()::bigint,
    'reason', pg_catalog.pg_event_trigger_table_rewrite_reason())::text);
END $pgsync$;
CREATE OR REPLACE FUNCTION {TRIGGER_SCHEMA}.table_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgsync$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT objid, schema_name, object_name FROM pg_catalog.pg_event_trigger_dropped_objects()
           WHERE classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND objsubid = 0
             AND object_type = 'table' AND NOT is_temporary LOOP
    PERFORM pg_catalog.pg_logical_emit_message(true, '{DROP_PREFIX}', pg_catalog.jsonb_build_object(
      'oid', r.objid::bigint, 'schema', r.schema_name, 'name', r.object_name)::text);
  END LOOP;
END $pgsync$;
REVOKE ALL ON FUNCTION {TRIGGER_SCHEMA}.ddl_end(), {TRIGGER_SCHEMA}.table_rewrite(),
  {TRIGGER_SCHEMA}.table_drop() FROM PUBLIC;
DROP EVENT TRIGGER IF EXISTS pgsync_ddl_end;
DROP EVENT TRIGGER IF EXISTS pgsync_table_rewrite;
DROP EVENT TRIGGER IF EXISTS pgsync_table_drop;
CREATE EVENT TRIGGER pgsync_ddl_end ON ddl_command_end WHEN TAG IN ('ALTER TABLE')
  EXECUTE FUNCTION {TRIGGER_SCHEMA}.ddl_end();
CREATE EVENT TRIGGER pgsync_table_rewrite ON table_rewrite EXECUTE FUNCTION {TRIGGER_SCHEMA}.table_rewrite();
CREATE EVENT TRIGGER pgsync_table_drop ON sql_drop EXECUTE FUNCTION {TRIGGER_SCHEMA}.table_drop();
-- also under session_replication_role = replica (a subscriber or a restore applying DDL)
ALTER EVENT TRIGGER pgsync_ddl_end ENABLE ALWAYS;
ALTER EVENT TRIGGER pgsync_table_rewrite ENABLE ALWAYS;
ALTER EVENT TRIGGER pgsync_table_drop ENABLE ALWAYS;
"""  # noqa: S608 - built from this module's constants only
"""Installs (or replaces) the trigger; idempotent, one per database, shared by its pipelines."""

ACTIVE_SQL = (
    "SELECT count(*) = 2 FROM pg_catalog.pg_event_trigger "
    "WHERE evtname IN ('pgsync_ddl_end', 'pgsync_table_rewrite') AND evtenabled = 'A'"
)
"""True when both event triggers exist and fire always."""

_NAMED = "(SELECT pg_catalog.to_regclass(x)::oid AS oid FROM unnest(%s::text[]) x) t"
CATALOG_SQL = f"SELECT ({_COLUMNS_SQL.replace('WHERE c.oid = rel', 'WHERE c.oid = t.oid')}) FROM {_NAMED}"  # noqa: S608
"""The same description as the trigger's, for the tables named (one text array parameter;
missing ones are left out)."""

NOT_ACTIVE = (
    "the source has no active pgsync DDL trigger (event triggers pgsync_ddl_end and pgsync_table_rewrite, "
    "installed by the setup DAG when its role is a superuser): without it a column change cannot be "
    "told from a rename or a drop and add, so every column change sends the table back to baseline; "
    "run the setup DAG as a superuser, or run the SQL of airflow_provider_pgsync.source.ddl.INSTALL_SQL "
    "as one"
)


@dataclass(frozen=True)
class TableColumns:
    """A table's live columns as the catalog described them (``DDL_PREFIX`` messages, ``CATALOG_SQL``)."""

    oid: int
    table: TableRef
    columns: tuple[ColumnInfo, ...]
    """The columns pgoutput sends: generated columns are left out (PostgreSQL 15)."""
    generated: tuple[str, ...] = ()
    using: bool = False
    """The statement had a USING clause (its values may have been computed anew)."""


@dataclass(frozen=True)
class TableRewrite:
    """Every row of table ``oid`` was rewritten (``reason``: ``pg_event_trigger_table_rewrite_reason``)."""

    oid: int
    reason: int

    @property
    def values_changed(self) -> bool:
        """Whether the rewrite may have given rows values that no WAL record carries."""
        return bool(self.reason & VALUE_REWRITES)


def parse_columns(text: str | bytes | dict[str, Any]) -> TableColumns:
    """The ``TableColumns`` of a DDL message's content (or of a ``CATALOG_SQL`` row)."""
    data = _json(text, DDL_PREFIX)
    try:
        columns: list[ColumnInfo] = []
        generated: list[str] = []
        for attnum, name, type_oid, typmod, key, is_generated, missing in data["columns"]:
            if is_generated:
                generated.append(str(name))
                continue
            columns.append(
                ColumnInfo(
                    str(name),
                    int(type_oid),
                    int(typmod),
                    bool(key),
                    attnum=int(attnum),
                    missing=None if missing is None else str(missing),
                )
            )
        return TableColumns(
            int(data["oid"]),
            TableRef(str(data["schema"]), str(data["name"])),
            tuple(columns),
            tuple(generated),
            bool(data.get("using", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"malformed {DDL_PREFIX} message ({exc})", tag="M", offset=0) from None


@dataclass(frozen=True)
class TableDrop:
    """Table ``oid`` (named ``table`` when it was dropped) was dropped in the source."""

    oid: int
    table: TableRef


def parse_drop(text: str | bytes) -> TableDrop:
    """The ``TableDrop`` of a drop message's content."""
    data = _json(text, DROP_PREFIX)
    try:
        return TableDrop(int(data["oid"]), TableRef(str(data["schema"]), str(data["name"])))
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"malformed {DROP_PREFIX} message ({exc})", tag="M", offset=0) from None


def parse_rewrite(text: str | bytes) -> TableRewrite:
    """The ``TableRewrite`` of a rewrite message's content."""
    data = _json(text, REWRITE_PREFIX)
    try:
        return TableRewrite(int(data["oid"]), int(data["reason"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"malformed {REWRITE_PREFIX} message ({exc})", tag="M", offset=0) from None


def _json(text: str | bytes | dict[str, Any], what: str) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DecodeError(f"{what} message is not JSON ({exc})", tag="M", offset=0) from None
    if not isinstance(data, dict):
        raise DecodeError(f"{what} message is not a JSON object", tag="M", offset=0)
    return data

