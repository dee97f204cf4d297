"""What the source's triggers say about the partitions of a partitioned table the pipelines follow.

With ``publish_via_partition_root`` a partitioned table streams as one table (its changes carry
the root's relation OID), but three things change its rows without any change in the stream:

- ``ALTER TABLE ... ATTACH PARTITION`` of a table that holds rows (they become the root's rows;
  PostgreSQL writes no change for them), and ``DETACH PARTITION`` or ``DROP TABLE`` of a
  partition that holds rows (they leave the root without a DELETE);
- ``TRUNCATE`` of a partition (pgoutput sends a TRUNCATE of the root only when the root itself is
  truncated: a partition's is left out altogether).

A partition made by ``CREATE TABLE ... PARTITION OF``, or the ATTACH or DETACH of an empty table,
changes no row: later changes of the partition stream through the root.

So that capture meets each of them exactly where it happened in the stream, the source writes a
transactional logical message in the same transaction:

- two event triggers on ``CREATE TABLE``, ``ALTER TABLE``, ``DROP TABLE`` and ``DROP SCHEMA``
  read the leaf partitions of every followed partitioned table before the command
  (``ddl_command_start``, kept in the session setting ``pgsync.partitions``) and after it
  (``ddl_command_end``); for each table whose leaves changed they write a ``PARTITIONS_PREFIX``
  message with the table's columns (as ``source/ddl.py`` reports them), the leaves attached and
  the leaves detached or dropped, each with whether it holds rows (``EXISTS`` on it, read after
  the command: the rows an attached table brought; those a detached one took; unknown for a
  dropped one). They also give each new leaf the truncate trigger below;
- a followed partitioned table has two statement triggers (``BEFORE``/``AFTER TRUNCATE``) that
  mark, in the transaction's setting ``pgsync.truncating``, that the table itself is being
  truncated (pgoutput sends that TRUNCATE), and each of its leaf partitions a ``BEFORE
  TRUNCATE`` trigger that writes a ``TRUNCATE_PREFIX`` message naming the leaf and the table,
  unless the table itself is being truncated by the same statement. (A statement that names a
  leaf before its root, ``TRUNCATE pt_1, pt``, fires the leaf's trigger first: that leaf is
  reported too, which sends the table back to baseline for nothing.)

A table is followed once ``follow_partitions`` (the setup) gave it its triggers. Every trigger
fires always, also under ``session_replication_role = replica``. Capture turns a message that
says rows changed outside the stream into a new schema version of the table whose change says so
(``SchemaChange.outside``): every destination takes the table back through baseline from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql

from airflow_provider_pgsync.errors import DecodeError
from airflow_provider_pgsync.source.ddl import TRIGGER_SCHEMA, TableColumns, _json, parse_columns
from airflow_provider_pgsync.source.names import TableRef

PARTITIONS_PREFIX = "pgsync.partitions"
TRUNCATE_PREFIX = "pgsync.partition_truncate"
ROOT_TRIGGER = "pgsync_root_truncate"
"""The triggers that make a partitioned table followed (``BEFORE`` and ``..._end`` ``AFTER``)."""
LEAF_TRIGGER = "pgsync_partition_truncate"

_S = TRIGGER_SCHEMA

INSTALL_SQL = f"""
CREATE SCHEMA IF NOT EXISTS {_S};
-- {{root oid: {{leaf oid: [schema, name]}}}} of every followed partitioned table, now
CREATE OR REPLACE FUNCTION {_S}.followed_leaves() RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog AS $pgsync$
SELECT coalesce(jsonb_object_agg(r.oid::bigint::text, (
         SELECT coalesce(jsonb_object_agg(p.relid::bigint::text, jsonb_build_array(n.nspname, c.relname)),
                         '{{}}'::jsonb)
         FROM pg_partition_tree(r.oid) p
         JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE p.isleaf AND p.relid <> r.oid)), '{{}}'::jsonb)
FROM (SELECT DISTINCT t.tgrelid AS oid FROM pg_trigger t WHERE t.tgname = '{ROOT_TRIGGER}') r
$pgsync$;
CREATE OR REPLACE FUNCTION {_S}.has_rows(rel oid) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgsync$
DECLARE found boolean;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_class WHERE oid = rel) THEN RETURN NULL; END IF;  -- dropped
  EXECUTE format('SELECT EXISTS (SELECT FROM ONLY %s)', rel::regclass) INTO found;
  RETURN found;
END $pgsync$;
-- a leaf's truncate trigger (idempotent: nothing is done when it is there and fires always)
CREATE OR REPLACE FUNCTION {_S}.follow_leaf(leaf oid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgsync$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_class WHERE oid = leaf AND relkind = 'r') THEN RETURN; END IF;
  IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = leaf AND tgname = '{LEAF_TRIGGER}') THEN
    EXECUTE format('CREATE TRIGGER {LEAF_TRIGGER} BEFORE TRUNCATE ON %s FOR EACH STATEMENT '
                   'EXECUTE FUNCTION {_S}.partition_truncate()', leaf::regclass);
  END IF;
  IF EXISTS (SELECT FROM pg_trigger
             WHERE tgrelid = leaf AND tgname = '{LEAF_TRIGGER}' AND tgenabled <> 'A') THEN
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER {LEAF_TRIGGER}', leaf::regclass);
  END IF;
END $pgsync$;
-- makes partitioned table ``root`` followed: its own triggers and its leaves' (idempotent)
CREATE OR REPLACE FUNCTION {_S}.follow_partitions(root oid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgsync$
DECLARE leaf oid;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = root AND tgname = '{ROOT_TRIGGER}') THEN
    EXECUTE format('CREATE TRIGGER {ROOT_TRIGGER} BEFORE TRUNCATE ON %s FOR EACH STATEMENT '
                   'EXECUTE FUNCTION {_S}.root_truncate()', root::regclass);
    EXECUTE format('CREATE TRIGGER {ROOT_TRIGGER}_end AFTER TRUNCATE ON %s FOR EACH STATEMENT '
                   'EXECUTE FUNCTION {_S}.root_truncate()', root::regclass);
  END IF;
  IF EXISTS (SELECT FROM pg_trigger
             WHERE tgrelid = root AND tgname LIKE '{ROOT_TRIGGER}%' AND tgenabled <> 'A') THEN
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER {ROOT_TRIGGER}, '
                   'ENABLE ALWAYS TRIGGER {ROOT_TRIGGER}_end', root::regclass);
  END IF;
  FOR leaf IN SELECT relid FROM pg_partition_tree(root) WHERE isleaf AND relid <> root LOOP
    PERFORM {_S}.follow_leaf(leaf);
  END LOOP;
END $pgsync$;
CREATE OR REPLACE FUNCTION {_S}.root_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgsync$
BEGIN
  -- every BEFORE TRUNCATE trigger of a statement fires before its AFTER TRUNCATE triggers
  IF TG_WHEN = 'BEFORE' THEN
    PERFORM set_config('pgsync.truncating',
      concat_ws(',', nullif(current_setting('pgsync.truncating', true), ''), TG_RELID::text), true);
  ELSE
    PERFORM set_config('pgsync.truncating', '', true);
  END IF;
  RETURN NULL;
END $pgsync$;
CREATE OR REPLACE FUNCTION {_S}.partition_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgsync$
DECLARE
  root oid;
  truncating text[] := string_to_array(coalesce(current_setting('pgsync.truncating', true), ''), ',');
BEGIN
  FOR root IN SELECT a.relid FROM pg_partition_ancestors(TG_RELID) a
              WHERE a.relid <> TG_RELID
                AND EXISTS (SELECT FROM pg_trigger t
                            WHERE t.tgrelid = a.relid AND t.tgname = '{ROOT_TRIGGER}') LOOP
    CONTINUE WHEN root::text = ANY (truncating);  -- pgoutput sends the root's own TRUNCATE
    PERFORM pg_logical_emit_message(true, '{TRUNCATE_PREFIX}', ({_S}.ddl_columns(root)
      || jsonb_build_object('partition',
                            jsonb_build_array(TG_RELID::bigint, TG_TABLE_SCHEMA, TG_TABLE_NAME)))::text);
  END LOOP;
  RETURN NULL;
END $pgsync$;
CREATE OR REPLACE FUNCTION {_S}.partitions_start() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgsync$
BEGIN
  -- a session setting: DETACH PARTITION CONCURRENTLY ends in a transaction of its own
  PERFORM set_config('pgsync.partitions', {_S}.followed_leaves()::text, false);
END $pgsync$;
CREATE OR REPLACE FUNCTION {_S}.partitions_end() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgsync$
DECLARE
  before jsonb := nullif(current_setting('pgsync.partitions', true), '')::jsonb;
  after jsonb := {_S}.followed_leaves();
  r record;
  attached jsonb;
  detached jsonb;
BEGIN
  PERFORM set_config('pgsync.partitions', '', false);
  IF before IS NULL THEN RETURN; END IF;
  FOR r IN SELECT key, value FROM jsonb_each(after) WHERE before ? key LOOP
    SELECT coalesce(jsonb_agg(jsonb_build_array(l.key::bigint, l.value->0, l.value->1,
                                                {_S}.has_rows(l.key::oid)) ORDER BY l.key), '[]'::jsonb)
      INTO attached FROM jsonb_each(r.value) l WHERE NOT (before->r.key) ? l.key;
    SELECT coalesce(jsonb_agg(jsonb_build_array(l.key::bigint, l.value->0, l.value->1,
                                                {_S}.has_rows(l.key::oid)) ORDER BY l.key), '[]'::jsonb)
      INTO detached FROM jsonb_each(before->r.key) l WHERE NOT r.value ? l.key;
    CONTINUE WHEN attached = '[]'::jsonb AND detached = '[]'::jsonb;
    PERFORM {_S}.follow_leaf(l.key::oid) FROM jsonb_each(r.value) l WHERE NOT (before->r.key) ? l.key;
    PERFORM pg_logical_emit_message(true, '{PARTITIONS_PREFIX}', ({_S}.ddl_columns(r.key::oid)
      || jsonb_build_object('attached', attached, 'detached', detached))::text);
  END LOOP;
END $pgsync$;
REVOKE ALL ON FUNCTION {_S}.partitions_start(), {_S}.partitions_end(), {_S}.follow_partitions(oid),
  {_S}.follow_leaf(oid), {_S}.has_rows(oid) FROM PUBLIC;
DROP EVENT TRIGGER IF EXISTS pgsync_partitions_start;
DROP EVENT TRIGGER IF EXISTS pgsync_partitions_end;
CREATE EVENT TRIGGER pgsync_partitions_start ON ddl_command_start
  WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE', 'DROP TABLE', 'DROP SCHEMA')
  EXECUTE FUNCTION {_S}.partitions_start();
CREATE EVENT TRIGGER pgsync_partitions_end ON ddl_command_end
  WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE', 'DROP TABLE', 'DROP SCHEMA')
  EXECUTE FUNCTION {_S}.partitions_end();
ALTER EVENT TRIGGER pgsync_partitions_start ENABLE ALWAYS;
ALTER EVENT TRIGGER pgsync_partitions_end ENABLE ALWAYS;
"""  # noqa: S608 - built from this module's constants only
"""Installs (or replaces) the partition triggers' functions and event triggers; run after
``source.ddl.INSTALL_SQL`` (it uses its ``ddl_columns``), idempotent, one per database."""


def follow_sql(oid: int) -> sql.Composed:
    """Makes the partitioned table of relation OID ``oid`` followed (its triggers and its
    leaves'); idempotent: a table that has them gets no DDL."""
    return sql.SQL("SELECT {}.follow_partitions({}::oid)").format(sql.Identifier(_S), sql.Literal(oid))


@dataclass(frozen=True)
class PartitionChange:
    """A leaf partition that joined or left a followed table, and whether it holds rows (None:
    unknown, it was dropped)."""

    oid: int
    table: TableRef
    has_rows: bool | None


@dataclass(frozen=True)
class PartitionEvent:
    """A ``PARTITIONS_PREFIX`` or ``TRUNCATE_PREFIX`` message: the followed table's columns and
    what happened to its partitions."""

    root: TableColumns
    attached: tuple[PartitionChange, ...] = ()
    detached: tuple[PartitionChange, ...] = ()
    truncated: TableRef | None = None

    @property
    def rows_outside(self) -> str:
        """Why rows of the table changed without changes in the stream (empty: none did)."""
        why = [
            f"partition {p.table} attached with rows: they are not in the stream"
            for p in self.attached
            if p.has_rows
        ]
        for p in self.detached:
            if p.has_rows is None:
                why.append(f"partition {p.table} dropped: the removal of its rows is not in the stream")
            elif p.has_rows:
                why.append(f"partition {p.table} detached: the removal of its rows is not in the stream")
        if self.truncated is not None:
            why.append(
                f"partition {self.truncated} truncated: the removal of its rows is not in the stream "
                "(pgoutput sends a TRUNCATE of the root only)"
            )
        return "; ".join(why)

    def describe(self) -> str:
        """What happened, in words, for the capture log."""
        parts = [
            f"partition {p.table} attached{' with rows' if p.has_rows else ' (empty)'}" for p in self.attached
        ]
        parts += [
            f"partition {p.table} {'dropped' if p.has_rows is None else 'detached'}"
            + ("" if p.has_rows is None else " with rows" if p.has_rows else " (empty)")
            for p in self.detached
        ]
        if self.truncated is not None:
            parts.append(f"partition {self.truncated} truncated")
        return "; ".join(parts)


def parse_partition_event(prefix: str, text: str | bytes) -> PartitionEvent:
    """The ``PartitionEvent`` of a message of one of this module's prefixes."""
    data = _json(text, prefix)
    root = parse_columns(data)
    try:
        if prefix == TRUNCATE_PREFIX:
            _, schema, name = data["partition"]
            return PartitionEvent(root, truncated=TableRef(str(schema), str(name)))
        return PartitionEvent(root, _changes(data["attached"]), _changes(data["detached"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"malformed {prefix} message ({exc})", tag="M", offset=0) from None


def _changes(items: list[Any]) -> tuple[PartitionChange, ...]:
    return tuple(
        PartitionChange(int(oid), TableRef(str(schema), str(name)), None if rows is None else bool(rows))
        for oid, schema, name, rows in items
    )
