"""The source's column types in the replica: user types recreated, extension types looked up.

A column's type is read from the source (``pg_typedefs``) and made in the replica under the
same schema-qualified name: enums (same labels, same order), domains (base type, NOT NULL,
CHECK constraints), composites (their attributes), arrays of these, each after the types it
uses. A type the replica already has with the same definition is used as it is; an enum of the
replica whose labels are the source's with some missing gets the missing labels (the source
added them, ``ALTER TYPE ... ADD VALUE``); any other difference is an error naming the type and
the remedy. An extension's type (citext, hstore, ...) is the replica's own when the extension
is installed there; otherwise, and for types the replica cannot recreate (ranges, base types
in C), the column is ``text`` (the source's text output) with a WARNING naming the table,
column and remedy.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql

from airflow_provider_pgsync.destinations.pg_ddl_lock import lock_ddl
from airflow_provider_pgsync.destinations.pg_typedefs import (
    FIRST_USER_OID,
    ArrayOf,
    Builtin,
    CompositeType,
    DomainType,
    EnumType,
    ExtensionType,
    SourceCatalog,
    TypeSpec,
    Unsupported,
    UserType,
    extensions,
    qualified,
    read_named,
    read_type,
    unsupported,
)
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef

log = logging.getLogger(__name__)


class ReplicaTypes:
    """Column types for the replica at ``conn`` (autocommit), from the ``source`` catalog
    (None: user and extension types become ``text``, with a warning)."""

    def __init__(self, conn: psycopg.Connection[Any], source: SourceCatalog | None, destination: str) -> None:
        self._conn = conn
        self._source = source
        self._destination = destination
        self._made: dict[tuple[int, int], tuple[str, str]] = {}
        self._ensured: set[TypeSpec] = set()

    def column_type(
        self, table: TableRef, column: str, type_oid: int, type_modifier: int, *, warn: bool = True
    ) -> str:
        """The replica's type (SQL text) for ``column`` of ``table``, made (or brought up to
        date) once per session; ``text`` when the replica cannot have the source's type, with a
        WARNING naming the column and the remedy when ``warn`` (a column is being created)."""
        key = (type_oid, type_modifier)
        if key not in self._made:
            self._made[key] = self._resolve(type_oid, type_modifier)
        made, why = self._made[key]
        if why and warn:
            log.warning(
                "destination %s: column %s of table %s is created as text (the source's text of each "
                "value): %s",
                self._destination,
                column,
                table,
                why,
            )
        return made

    def _resolve(self, type_oid: int, type_modifier: int) -> tuple[str, str]:
        """The replica's type for a column of the source's type, and why it is text (or '')."""
        spec: TypeSpec | None
        if self._source is None:
            spec = _builtin(self._conn, type_oid, type_modifier)
            if spec is None:
                return "text", f"its type (OID {type_oid}) is not read from the source here"
        else:
            spec = self._source.type_spec(type_oid, type_modifier)
            if spec is None:
                return "text", f"its type (OID {type_oid}) is no longer in the source"
        missing = sorted(extensions(spec) - self._installed())
        if missing:
            return "text", (
                f"its type uses extension {', '.join(missing)}, which the destination database does not "
                f"have; install it there ({'; '.join(f'CREATE EXTENSION {m}' for m in missing)}) and "
                "rebaseline the table to get the type"
            )
        odd = unsupported(spec)
        if odd:
            return "text", (
                "the replica does not recreate "
                + ", ".join(f"{qualified(u)} ({u.kind})" for u in odd)
                + "; create the type in the destination database yourself and alter the column if needed"
            )
        return self._ensure(spec), ""

    # ---- making the types

    def _ensure(self, spec: TypeSpec) -> str:
        """``spec`` made in the replica (with the types it uses); its SQL text there."""
        if isinstance(spec, Builtin):
            return spec.sql
        if isinstance(spec, ArrayOf):
            return self._ensure(spec.element) + "[]"
        if isinstance(spec, ExtensionType):
            return self._extension_type(spec)
        if isinstance(spec, Unsupported):  # filtered out by the caller
            raise DestinationError(f"type {qualified(spec)} ({spec.kind}) cannot be made in the replica")
        name = sql.Identifier(spec.schema, spec.name).as_string(self._conn)
        if spec in self._ensured:
            return name
        create = self._create(spec)  # makes the types it uses first
        for _ in range(2):  # a second try when another session made it meanwhile
            existing = read_named(self._conn, spec.schema, spec.name)
            if existing is not None:
                self._check(spec, existing)
                break
            try:
                with self._conn.transaction():
                    lock_ddl(self._conn)
                    self._conn.execute(
                        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(spec.schema))
                    )
                    self._conn.execute(create)
                log.info("destination %s: type %s created as in the source", self._destination, name)
                break
            except (psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
                continue
            except psycopg.Error as exc:
                raise DestinationError(
                    f"destination {self._destination}: type {qualified(spec)} of the source could not be "
                    f"created in the destination database: {exc.diag.message_primary or exc}; create it "
                    "there as in the source (with the functions its constraints use), then run again"
                ) from exc
        self._ensured.add(spec)
        return name

    def _create(self, spec: UserType) -> sql.Composed:
        """The statement that creates ``spec`` (the types it uses are made first)."""
        name = sql.Identifier(spec.schema, spec.name)
        if isinstance(spec, EnumType):
            labels = sql.SQL(", ").join(map(sql.Literal, spec.labels))
            return sql.SQL("CREATE TYPE {} AS ENUM ({})").format(name, labels)
        if isinstance(spec, DomainType):
            parts: list[sql.Composable] = [sql.SQL(self._ensure(spec.base))]
            if spec.not_null:
                parts.append(sql.SQL("NOT NULL"))
            for check_name, check in spec.checks:  # pg_get_constraintdef's text: CHECK (...)
                parts.append(sql.SQL("CONSTRAINT {} {}").format(sql.Identifier(check_name), sql.SQL(check)))
            return sql.SQL("CREATE DOMAIN {} AS {}").format(name, sql.SQL(" ").join(parts))
        attributes = [
            sql.SQL("{} {}").format(sql.Identifier(a), sql.SQL(self._ensure(t))) for a, t in spec.attributes
        ]
        return sql.SQL("CREATE TYPE {} AS ({})").format(name, sql.SQL(", ").join(attributes))

    def _check(self, spec: UserType, existing: TypeSpec) -> None:
        """``existing`` (the replica's) is ``spec`` (the source's), or an enum missing labels,
        which are added; else DestinationError naming the type and the remedy."""
        if existing == spec:
            return
        if (
            isinstance(spec, EnumType)
            and isinstance(existing, EnumType)
            and _subsequence(existing.labels, spec.labels)
        ):
            self._add_labels(spec, existing.labels)
            return
        raise DestinationError(
            f"destination {self._destination}: type {qualified(spec)} exists in the destination database "
            f"with another definition ({_describe(existing)}) than in the source ({_describe(spec)}); make "
            f"it the same there (or drop it: DROP TYPE {qualified(spec)} CASCADE drops the columns using "
            "it too, and pgsync creates it again), then rebaseline the tables that use it"
        )

    def _add_labels(self, spec: EnumType, have: tuple[str, ...]) -> None:
        """The source's labels the replica's enum lacks, each in its place."""
        name = sql.Identifier(spec.schema, spec.name)
        present = set(have)
        with self._conn.transaction():
            for i, label in enumerate(spec.labels):
                if label in present:
                    continue
                # the label before it is there by now (had or just added); the first one goes
                # before the first label the replica had (an enum may have none)
                where: sql.Composable
                if i:
                    where = sql.SQL("AFTER {}").format(sql.Literal(spec.labels[i - 1]))
                elif have:
                    where = sql.SQL("BEFORE {}").format(sql.Literal(have[0]))
                else:
                    where = sql.SQL("")
                self._conn.execute(
                    sql.SQL("ALTER TYPE {} ADD VALUE IF NOT EXISTS {} {}").format(
                        name, sql.Literal(label), where
                    )
                )
                present.add(label)
        log.info("destination %s: enum %s given the source's new labels", self._destination, qualified(spec))

    def _extension_type(self, spec: ExtensionType) -> str:
        row = self._conn.execute(
            "SELECT format_type(t.oid, %s) FROM pg_type t"
            " JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'"
            " JOIN pg_extension e ON e.oid = d.refobjid AND d.refclassid = 'pg_extension'::regclass"
            " WHERE e.extname = %s AND t.typname = %s",
            (spec.type_modifier if spec.type_modifier >= 0 else None, spec.extension, spec.name),
        ).fetchone()
        if row is None:
            raise DestinationError(
                f"destination {self._destination}: extension {spec.extension} of the destination database "
                f"has no type {spec.name} (a different version than the source's?); update it there "
                f"(ALTER EXTENSION {spec.extension} UPDATE) and run again"
            )
        return str(row[0])

    def _installed(self) -> set[str]:
        return {r[0] for r in self._conn.execute("SELECT extname::text FROM pg_extension").fetchall()}


def _builtin(conn: psycopg.Connection[Any], oid: int, type_modifier: int) -> Builtin | None:
    if oid >= FIRST_USER_OID:
        return None
    spec = read_type(conn, oid, type_modifier)
    return spec if isinstance(spec, Builtin) else None


def _subsequence(part: tuple[str, ...], whole: tuple[str, ...]) -> bool:
    """``part`` is ``whole`` with some items left out, in the same order."""
    items = iter(whole)
    return all(p in items for p in part)


def _describe(spec: TypeSpec) -> str:
    if isinstance(spec, EnumType):
        return f"enum of {', '.join(spec.labels)}"
    if isinstance(spec, DomainType):
        checks = "; ".join(c for _, c in spec.checks)
        null = " NOT NULL" if spec.not_null else ""
        return f"domain over {_describe(spec.base)}{null}{' ' + checks if checks else ''}"
    if isinstance(spec, CompositeType):
        return "composite of " + ", ".join(f"{a} {_describe(t)}" for a, t in spec.attributes)
    if isinstance(spec, ArrayOf):
        return _describe(spec.element) + "[]"
    if isinstance(spec, Builtin):
        return spec.sql
    if isinstance(spec, ExtensionType):
        return f"{spec.name} of extension {spec.extension}"
    return f"{qualified(spec)}, {spec.kind}"
