"""Column types and generated columns as a PostgreSQL catalog describes them, by name.

Type OIDs differ between databases for everything created after initdb (enums, domains,
composites, extension types), so a type is described by what it is: a built-in type by its
``format_type`` text (the same in every database), a user type by its schema-qualified name
and definition (enum labels in order; a domain's base type, NOT NULL and CHECK constraints; a
composite's attributes), an extension's type by the extension and its name. The same reader
runs on the source (what the replica needs) and on the replica (what it has), so the two
descriptions compare with ``==``.

``SourceCatalog`` reads the source for the PostgreSQL destination: through a connection it is
given (the baseline's snapshot transaction) or one it opens when first needed (apply).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from airflow_provider_pgsync.source.names import TableRef

FIRST_USER_OID = 16384  # PostgreSQL's FirstNormalObjectId: OIDs below are the same everywhere


@dataclass(frozen=True)
class Builtin:
    """A type of every database (OID below 16384), as ``format_type`` writes it with its modifier."""

    sql: str


@dataclass(frozen=True)
class ArrayOf:
    element: TypeSpec


@dataclass(frozen=True)
class EnumType:
    schema: str
    name: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class DomainType:
    schema: str
    name: str
    base: TypeSpec
    not_null: bool
    checks: tuple[tuple[str, str], ...]  # (constraint name, pg_get_constraintdef), by name


@dataclass(frozen=True)
class CompositeType:
    schema: str
    name: str
    attributes: tuple[tuple[str, TypeSpec], ...]


@dataclass(frozen=True)
class ExtensionType:
    """A type owned by an extension: the replica uses its own copy, wherever it is installed."""

    extension: str
    name: str
    type_modifier: int


@dataclass(frozen=True)
class Unsupported:
    """A type the replica does not recreate (a range, a base type in C, a table's row type)."""

    schema: str
    name: str
    kind: str


TypeSpec = Builtin | ArrayOf | EnumType | DomainType | CompositeType | ExtensionType | Unsupported
UserType = EnumType | DomainType | CompositeType


def qualified(spec: UserType | Unsupported) -> str:
    return f"{spec.schema}.{spec.name}"


def extensions(spec: TypeSpec) -> set[str]:
    """The extensions whose types ``spec`` uses, at any depth."""
    if isinstance(spec, ExtensionType):
        return {spec.extension}
    return set().union(*(extensions(s) for s in _parts(spec)))


def unsupported(spec: TypeSpec) -> list[Unsupported]:
    """The types inside ``spec`` the replica does not recreate."""
    if isinstance(spec, Unsupported):
        return [spec]
    return [u for s in _parts(spec) for u in unsupported(s)]


def _parts(spec: TypeSpec) -> list[TypeSpec]:
    if isinstance(spec, ArrayOf):
        return [spec.element]
    if isinstance(spec, DomainType):
        return [spec.base]
    if isinstance(spec, CompositeType):
        return [t for _, t in spec.attributes]
    return []


# ---- reading a catalog ------------------------------------------------------------------------

_TYPE = """
    SELECT t.typname::text, n.nspname::text, t.typtype::text, t.typelem::int8,
           t.typsubscript = 'array_subscript_handler'::regproc, t.typbasetype::int8, t.typtypmod,
           t.typnotnull, t.typrelid::int8, c.relkind::text,
           (SELECT e.extname::text FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
            WHERE d.classid = 'pg_type'::regclass AND d.objid = t.oid
              AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' LIMIT 1)
    FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    LEFT JOIN pg_class c ON c.oid = t.typrelid
    WHERE t.oid = %s
"""


def read_type(conn: psycopg.Connection[Any], oid: int, type_modifier: int) -> TypeSpec | None:
    """The type ``oid`` (with a column's ``type_modifier``) of ``conn``'s database; None when
    the database has no such type."""
    if oid < FIRST_USER_OID:
        row = conn.execute(
            "SELECT format_type(%s::oid, %s)", (oid, type_modifier if type_modifier >= 0 else None)
        ).fetchone()
        return Builtin(str(row[0])) if row and row[0] else None
    row = conn.execute(_TYPE, (oid,)).fetchone()
    if row is None:
        return None
    name, schema, kind, element, is_array, base, base_modifier, not_null, relid, relkind, extension = row
    if extension:
        return ExtensionType(extension, name, type_modifier)
    if is_array and element:
        inner = read_type(conn, element, type_modifier)
        return None if inner is None else ArrayOf(inner)
    if kind == "e":
        labels = conn.execute(
            "SELECT enumlabel::text FROM pg_enum WHERE enumtypid = %s ORDER BY enumsortorder", (oid,)
        ).fetchall()
        return EnumType(schema, name, tuple(r[0] for r in labels))
    if kind == "d":
        base_spec = read_type(conn, base, base_modifier)
        if base_spec is None:
            return None
        checks = conn.execute(
            "SELECT conname::text, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contypid = %s AND contype = 'c' ORDER BY conname",
            (oid,),
        ).fetchall()
        return DomainType(schema, name, base_spec, bool(not_null), tuple((r[0], r[1]) for r in checks))
    if kind == "c" and relkind == "c":
        attributes = []
        for attname, atttypid, atttypmod in conn.execute(
            "SELECT attname::text, atttypid::int8, atttypmod FROM pg_attribute"
            " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (relid,),
        ).fetchall():
            spec = read_type(conn, atttypid, atttypmod)
            if spec is None:
                return None
            attributes.append((attname, spec))
        return CompositeType(schema, name, tuple(attributes))
    described = {
        "c": "the row type of a table",
        "r": "a range type",
        "m": "a multirange type",
        "b": "a base type",
    }
    return Unsupported(schema, name, described.get(kind, f"a type of kind {kind!r}"))


def read_named(conn: psycopg.Connection[Any], schema: str, name: str) -> TypeSpec | None:
    """The type ``schema.name`` of ``conn``'s database (None: there is none)."""
    row = conn.execute(
        "SELECT t.oid::int8 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace"
        " WHERE n.nspname = %s AND t.typname = %s",
        (schema, name),
    ).fetchone()
    return None if row is None else read_type(conn, int(row[0]), -1)


# ---- generated columns ------------------------------------------------------------------------


@dataclass(frozen=True)
class GeneratedColumn:
    """A ``GENERATED ALWAYS AS (expression) STORED`` column (pgoutput does not send them)."""

    name: str
    type_oid: int
    type_modifier: int
    expression: str
    uses: tuple[str, ...]  # the table's columns the expression reads


def read_columns(conn: psycopg.Connection[Any], table: TableRef) -> list[tuple[str, GeneratedColumn | None]]:
    """The table's columns in order, each with its generation when it is a generated column
    (empty when the table does not exist)."""
    rows = conn.execute(
        """
        SELECT a.attname::text, a.attgenerated = 's', a.atttypid::int8, a.atttypmod,
               pg_get_expr(d.adbin, d.adrelid),
               ARRAY(SELECT r.attname::text FROM pg_depend p
                     JOIN pg_attribute r ON r.attrelid = p.refobjid AND r.attnum = p.refobjsubid
                     WHERE p.classid = 'pg_attrdef'::regclass AND p.objid = d.oid
                       AND p.refclassid = 'pg_class'::regclass AND p.refobjid = a.attrelid
                       AND p.refobjsubid > 0 AND p.refobjsubid <> a.attnum ORDER BY r.attnum)
        FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
        """,
        (str(table),),
    ).fetchall()
    return [
        (name, GeneratedColumn(name, int(oid), int(mod), str(expr), tuple(uses)) if generated else None)
        for name, generated, oid, mod, expr, uses in rows
    ]


def place_generated(
    names: Sequence[str], source: Sequence[tuple[str, GeneratedColumn | None]]
) -> tuple[list[str | GeneratedColumn], list[GeneratedColumn]]:
    """The columns ``names`` with the source's generated columns among them, each after the
    replicated column it follows in the source (first when none), and
    the generated columns left out: those whose expression reads a column not in ``names``."""
    replicated = set(names)
    after: dict[str | None, list[GeneratedColumn]] = {}  # None: before the first column
    last: str | None = None
    left_out: list[GeneratedColumn] = []
    for name, generated in source:
        if generated is None:
            if name in replicated:
                last = name
        elif set(generated.uses) <= replicated:
            after.setdefault(last, []).append(generated)
        else:
            left_out.append(generated)
    placed: list[str | GeneratedColumn] = list(after.get(None, []))
    for name in names:
        placed.append(name)
        placed.extend(after.get(name, []))
    return placed, left_out


# ---- the source -------------------------------------------------------------------------------


class SourceCatalog:
    """The source's catalog, for the PostgreSQL destination: through ``conn`` (borrowed, e.g.
    the baseline's snapshot transaction) or a connection ``connect`` opens when first needed
    (closed by ``close``)."""

    def __init__(
        self,
        *,
        conn: psycopg.Connection[Any] | None = None,
        connect: Callable[[], psycopg.Connection[Any]] | None = None,
    ) -> None:
        self._conn = conn
        self._connect = connect
        self._owned: psycopg.Connection[Any] | None = None

    def connection(self) -> psycopg.Connection[Any]:
        if self._conn is not None:
            return self._conn
        if self._owned is None:
            if self._connect is None:
                raise RuntimeError("SourceCatalog needs a connection or a way to connect")
            self._owned = self._connect()
        return self._owned

    def type_spec(self, oid: int, type_modifier: int) -> TypeSpec | None:
        return read_type(self.connection(), oid, type_modifier)

    def columns(self, table: TableRef) -> list[tuple[str, GeneratedColumn | None]]:
        return read_columns(self.connection(), table)

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
            self._owned = None
