"""How each PostgreSQL column is read over JDBC and which Spark type holds it (DESIGN §6).

Pure logic: a ``ColumnRead`` says what the baseline's ``SELECT`` projects for the column
(``select`` with ``{col}`` standing for the quoted column), how the Spark job turns the
JDBC value into the destination type (``convert``) and that type as Spark DDL (``spark_type``).

Mapping, lossless unless noted:

- smallint, integer, bigint, real, double precision (NaN, ±Infinity), boolean: the same
  Spark types; bytea: ``binary``.
- ``numeric(p,s)`` with ``0 <= s <= p <= 38``: ``decimal(p,s)``; a NaN in such a column
  fails the job naming the column (Spark decimals have no NaN). Unconstrained numeric and
  other precisions: ``string``, PostgreSQL's text form (keeps NaN, ±Infinity, every digit).
- date: ``date``; timestamp: ``timestamp_ntz``; timestamptz: ``timestamp`` (an instant).
  ``infinity``/``-infinity`` become 9999-12-31 (23:59:59.999999) and 0001-01-01 (00:00),
  the ends of Spark's documented range; a finite source value equal to one of those
  extremes reads back as the same value, which is the documented price of that choice.
- arrays (any number of dimensions, NULL elements): ``array<...>`` nested per declared
  dimension, read through ``to_json``; elements of smallint, integer, bigint, real, double
  and boolean keep their type (a ``-0`` element of a float array reads as ``0``), elements
  that are composites without numerics become structs, and any other element is its
  PostgreSQL text (``array<string>``). A value with other dimensions than declared fails
  the job rather than becoming NULL.
- composites: ``struct<...>`` through ``to_json`` (fields mapped like array elements; a
  timestamp field keeps its JSON text, e.g. ``2024-01-01T10:00:00+00:00``); a composite
  holding a numeric anywhere is its PostgreSQL text instead (JSON numbers would lose digits).
  hstore: ``map<string,string>``.
- domains: the mapping of their base type. Enums, uuid, json, jsonb, inet, cidr, macaddr,
  money, bit, varbit, interval, time, timetz, char(n) (padded), varchar(n), text and every
  other type: ``string``, PostgreSQL's text output (the documented mapping to string).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from airflow_provider_pgsync.errors import UnsupportedTypeError
from airflow_provider_pgsync.typemap.pgtypes import PgType

# Spark's documented date/timestamp range stands in for PostgreSQL's ±infinity
DATE_MAX_DAYS = 2932896  # 9999-12-31 as days since 1970-01-01
DATE_MIN_DAYS = -719162  # 0001-01-01
TIMESTAMP_MAX_MICROS = 253402300799999999  # 9999-12-31 23:59:59.999999
TIMESTAMP_MIN_MICROS = -62135596800000000  # 0001-01-01 00:00:00

CONVERSIONS = ("native", "decimal", "date_days", "timestamp_micros", "timestamp_ntz_micros", "json")

_NATIVE = {
    "int2": "smallint",
    "int4": "int",
    "int8": "bigint",
    "float4": "float",
    "float8": "double",
    "bool": "boolean",
    "bytea": "binary",
}
_JSON_SCALARS = {k: v for k, v in _NATIVE.items() if k != "bytea"}


@dataclass(frozen=True)
class ColumnRead:
    """How the baseline reads one column: SQL projection, Spark conversion, Spark type."""

    name: str
    select: str
    convert: str
    spark_type: str


def spark_read(name: str, pgtype: PgType) -> ColumnRead:
    """The ColumnRead of column ``name`` of type ``pgtype``."""
    if pgtype.kind == "a":
        return _array_read(name, pgtype)
    if pgtype.kind == "c" and not _holds_numeric(pgtype):
        return ColumnRead(name, "to_json({col})::text", "json", _json_type(pgtype))
    if pgtype.base == "hstore":
        return ColumnRead(name, "to_json({col})::text", "json", "map<string,string>")
    if pgtype.base == "bpchar":  # a cast to text would drop char(n)'s padding
        return ColumnRead(name, "{col}", "native", "string")
    if pgtype.base in _NATIVE:
        return ColumnRead(name, "{col}", "native", _NATIVE[pgtype.base])
    if pgtype.base == "numeric" and _decimal_fits(pgtype):
        return ColumnRead(name, "{col}::text", "decimal", f"decimal({pgtype.precision},{pgtype.scale})")
    if pgtype.base == "date":
        select = (
            "CASE WHEN isfinite({col}) THEN {col} - DATE '1970-01-01'"
            f" WHEN {{col}} = 'infinity' THEN {DATE_MAX_DAYS}"
            f" WHEN {{col}} = '-infinity' THEN {DATE_MIN_DAYS} END"
        )
        return ColumnRead(name, select, "date_days", "date")
    if pgtype.base in ("timestamp", "timestamptz"):
        select = (
            "CASE WHEN isfinite({col}) THEN (extract(epoch FROM {col}) * 1000000)::int8"
            f" WHEN {{col}} = 'infinity' THEN {TIMESTAMP_MAX_MICROS}"
            f" WHEN {{col}} = '-infinity' THEN {TIMESTAMP_MIN_MICROS} END"
        )
        if pgtype.base == "timestamp":
            return ColumnRead(name, select, "timestamp_ntz_micros", "timestamp_ntz")
        return ColumnRead(name, select, "timestamp_micros", "timestamp")
    if pgtype.base == "inet":  # inet's cast to text adds /32 to a host; abbrev() is its output
        return ColumnRead(name, "abbrev({col})", "native", "string")
    return ColumnRead(name, "{col}::text", "native", "string")


# The Arrow path (``baseline/arrow_copy.py``) reads values in their own PostgreSQL type over
# binary COPY: Spark types it can take, and the PostgreSQL type a plain ``{col}`` read names
ARROW_NATIVE = {
    "smallint": "int2",
    "int": "int4",
    "bigint": "int8",
    "float": "float4",
    "double": "float8",
    "boolean": "bool",
    "binary": "bytea",
    "string": "bpchar",  # the only plain string read: casts to text elsewhere
}
# conversion -> (PostgreSQL type, infinity's sentinel, -infinity's sentinel, first year that
# does not fit Arrow's microseconds since 1970; PostgreSQL's timestamps reach year 294276)
_ARROW_TEMPORAL = {
    "date_days": ("date", "'9999-12-31'", "'0001-01-01'", None),
    "timestamp_micros": (
        "timestamptz",
        "'9999-12-31 23:59:59.999999+00'",
        "'0001-01-01 00:00:00+00'",
        "'294000-01-01 00:00:00+00'",
    ),
    "timestamp_ntz_micros": (
        "timestamp",
        "'9999-12-31 23:59:59.999999'",
        "'0001-01-01 00:00:00'",
        "'294000-01-01 00:00:00'",
    ),
}


def arrow_select(read: ColumnRead) -> str | None:
    """The projection of ``read`` for the Arrow path, or None when the column cannot take it.

    Values keep their PostgreSQL type (binary COPY sends dates and timestamps as integers);
    ±infinity become the same sentinels as on the JDBC path, and a timestamp beyond what
    Arrow's microseconds since 1970 hold fails the read naming the value instead of wrapping.
    """
    if read.convert == "native" and read.spark_type in ARROW_NATIVE:
        if read.select == "{col}":  # a domain reads as its base type
            return "{col}::" + ARROW_NATIVE[read.spark_type]
        return read.select
    if read.convert not in _ARROW_TEMPORAL:
        return None
    pgtype, high, low, too_far = _ARROW_TEMPORAL[read.convert]
    beyond = (
        f" WHEN {{col}} >= {too_far}::{pgtype} THEN ('beyond year 294000, which Spark cannot hold: '"
        f" || {{col}}::text)::{pgtype}"
        if too_far
        else ""
    )
    return (
        f"CASE WHEN {{col}} = 'infinity' THEN {high}::{pgtype}"
        f" WHEN {{col}} = '-infinity' THEN {low}::{pgtype}{beyond} ELSE {{col}}::{pgtype} END"
    )


def arrow_reads(reads: Sequence[ColumnRead]) -> list[ColumnRead] | None:
    """``reads`` with the Arrow path's projections, or None when a column cannot take it."""
    out = []
    for read in reads:
        select = arrow_select(read)
        if select is None:
            return None
        out.append(ColumnRead(read.name, select, read.convert, read.spark_type))
    return out or None


def spark_reads(columns: Sequence[tuple[str, PgType]], table: str) -> list[ColumnRead]:
    """The reads of a table's columns; UnsupportedTypeError before anything is read when
    two names differ only in case (Spark's catalog folds column names)."""
    seen: dict[str, str] = {}
    for name, _ in columns:
        other = seen.setdefault(name.lower(), name)
        if other != name:
            raise UnsupportedTypeError(
                f"table {table}: columns {other!r} and {name!r} differ only in case, which a Spark "
                "catalog cannot hold; rename one (ALTER TABLE ... RENAME COLUMN) or leave it out of "
                "the table's column list"
            )
    return [spark_read(name, t) for name, t in columns]


def _array_read(name: str, pgtype: PgType) -> ColumnRead:
    """Arrays travel as JSON; elements other than numbers, booleans and composites go as their
    text (``::text[]``), because ``to_json`` would write numerics as JSON numbers, which
    Spark's JSON reader rewrites through a double."""
    element = pgtype.element
    if element is None:
        raise UnsupportedTypeError(f"array type {pgtype.name} of column {name!r} has no element type")
    if element.base in _JSON_SCALARS or (element.kind == "c" and not _holds_numeric(element)):
        return ColumnRead(name, "to_json({col})::text", "json", _json_type(pgtype))
    dims = max(pgtype.ndims, 1)
    # JSON strings are the elements' text output: char(n) keeps its padding, which a cast to
    # text drops, and inet has no netmask added to a host, which its cast to text adds
    if element.base in ("bpchar", "inet"):
        return ColumnRead(name, "to_json({col})::text", "json", "array<" * dims + "string" + ">" * dims)
    return ColumnRead(name, "to_json({col}::text[])::text", "json", "array<" * dims + "string" + ">" * dims)


def _holds_numeric(pgtype: PgType) -> bool:
    """Whether a numeric sits anywhere inside the type (its fields, elements, their fields...)."""
    if pgtype.base == "numeric":
        return True
    inner = [t for _, t in pgtype.fields] + ([pgtype.element] if pgtype.element else [])
    return any(_holds_numeric(t) for t in inner)


def _decimal_fits(pgtype: PgType) -> bool:
    p, s = pgtype.precision, pgtype.scale
    return p is not None and s is not None and 0 <= s <= p <= 38


def _json_type(pgtype: PgType) -> str:
    """Spark DDL of a value read through ``to_json``."""
    if pgtype.base == "hstore" and pgtype.kind != "a":
        return "map<string,string>"
    if pgtype.kind == "a":
        if pgtype.element is None:
            raise UnsupportedTypeError(f"array type {pgtype.name} has no element type")
        inner = _json_type(pgtype.element)
        for _ in range(max(pgtype.ndims, 1)):
            inner = f"array<{inner}>"
        return inner
    if pgtype.kind == "c":
        if not pgtype.fields:
            raise UnsupportedTypeError(f"composite type {pgtype.name} has no fields")
        fields = ",".join(f"{_ddl_name(n)}:{_json_type(t)}" for n, t in pgtype.fields)
        return f"struct<{fields}>"
    return _JSON_SCALARS.get(pgtype.base, "string")


def _ddl_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
