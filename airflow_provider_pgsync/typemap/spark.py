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
  PostgreSQL text (``array<string>``). Spark arrays are indexed from 1: a non-empty value the
  lake cannot hold exactly (other dimensions than declared, or a lower bound other than 1, e.g.
  ``[-3:-1]={7}``) fails the job with ``array_refusal``'s message, as apply refuses it: the
  projection gives ``REFUSED`` and the message's text instead of the JSON
  (``array_refusal_sql``), for arrays nested in struct-mapped composites too; ``{}`` and NULL
  are fine.
- composites: ``struct<...>`` through JSON built field by field (``json_select``; fields
  mapped like array elements, a date, timestamp, xml or json field is its text output, e.g.
  ``2024-01-01 10:00:00+00``); a composite holding a numeric anywhere is its PostgreSQL text
  instead (JSON numbers would lose digits). hstore: ``map<string,string>``.
- domains: the mapping of their base type. Enums, uuid, json, jsonb, inet, cidr, macaddr,
  money, bit, varbit, interval, time, timetz, xml, ranges, char(n) (padded), varchar(n), text
  and every other type: ``string``, PostgreSQL's text output (the documented mapping to string).

One text per value: every string is the type's output function's text, which is what pgoutput
sends for a change, so a row re-sent by capture reads as the baseline wrote it. A cast to text
is that text except for the types of ``CAST_IS_NOT_OUTPUT`` (xml keeps its declaration, inet
adds ``/32``), read through ``to_json`` instead.
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
        select = refusing_arrays(json_select("{col}", pgtype) + "::text", pgtype)
        return ColumnRead(name, select, "json", _json_type(pgtype))
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
    return ColumnRead(name, output_text("{col}", pgtype), "native", "string")


# Types whose cast to text (pg_cast) is not their output function, which pgoutput sends:
# inet adds /32 to a host, xml keeps its <?xml ...?> declaration, "char" keeps a raw byte
# where its output escapes it (boolean and char(n) are read natively, never through a cast)
CAST_IS_NOT_OUTPUT = frozenset({"bool", "bpchar", "char", "inet", "cidr", "xml"})


def output_text(expr: str, pgtype: PgType) -> str:
    """SQL for the text of value ``expr`` as its type's output function writes it (pgoutput's
    text): a cast to text where that cast is the output function, else the JSON string that
    ``to_json`` writes with the output function, unquoted (``#>> '{}'``)."""
    if pgtype.base in CAST_IS_NOT_OUTPUT:
        return "(to_json(" + expr + ") #>> '{{}}')"  # braces doubled: the template goes through sql.SQL
    return f"{expr}::text"


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
    """``reads`` with the Arrow path's projections, or None when a column cannot take it.

    Arrays and composites never take it (their conversion is ``json``, which ``arrow_select``
    refuses), so an array the lake cannot hold is always refused by the JDBC path's projection
    (``refusing_arrays``) and its Spark conversion, never copied.
    """
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
    if element.kind == "c" and not _holds_numeric(element):
        select, spark_type = json_select("{col}", pgtype) + "::text", _json_type(pgtype)
    elif element.base in _JSON_SCALARS:
        select, spark_type = "to_json({col})::text", _json_type(pgtype)
    else:
        dims = max(pgtype.ndims, 1)
        spark_type = "array<" * dims + "string" + ">" * dims
        # JSON strings are the elements' text output: char(n) keeps its padding, which a cast to
        # text drops, inet has no netmask added to a host and xml no declaration kept, which
        # their casts to text do
        select = (
            "to_json({col})::text" if element.base in CAST_IS_NOT_OUTPUT else "to_json({col}::text[])::text"
        )
    return ColumnRead(name, refusing_arrays(select, pgtype), "json", spark_type)


# ---- arrays the lake cannot hold exactly ----------------------------------------------------

# What a projection gives instead of JSON for a value the lake refuses, followed by the rest of
# the refusal's message (after the column's name); JSON never starts with "p"
REFUSED = "pgsync-refused:"


def array_refusal(what: str, dims: str, declared: int) -> str:
    """The refusal of a non-empty array value the lake cannot hold exactly, in the baseline and
    in apply alike: ``what`` names the column (and field), e.g. "column 'tags' of table
    public.t", ``dims`` is the value's ``array_dims`` text (``[-3:-1]``, ``[1:2][1:2]``) and
    ``declared`` the lake column's number of dimensions (the declared ones, at least 1)."""
    head, tail = array_refusal_parts(declared, other_dimensions=dims.count("[") != declared)
    return f"{what}{head}{dims}{tail}"


def array_refusal_parts(declared: int, *, other_dimensions: bool) -> tuple[str, str]:
    """The text of ``array_refusal`` before and after the value's dimensions (``what`` first)."""
    shape = "1 dimension" if declared == 1 else f"{declared} dimensions"
    problem = (
        f"does not have the {shape} declared for it" if other_dimensions else "has a lower bound other than 1"
    )
    tail = (
        f" {problem}; the lake keeps these arrays as {declared}-dimensional Spark arrays "
        "indexed from 1, so it refuses a value it cannot hold exactly rather than change it: change "
        f"such values in the source ({declared}-dimensional, every lower bound 1) and then "
        "rebaseline the table into the lake, or leave the column out of the pipeline's table "
        "(its columns list), or keep the table in a PostgreSQL destination, which holds any "
        "array exactly"
    )
    return ": an array value with dimensions ", tail


def refusing_arrays(select: str, pgtype: PgType) -> str:
    """``select`` (the JSON text of a ``{col}`` of ``pgtype``), or ``REFUSED`` and the rest of
    ``array_refusal``'s message when an array in the value is one the lake cannot hold."""
    refusal = array_refusal_sql("{col}", pgtype)
    if refusal is None:
        return select
    return f"COALESCE({_sql_text(REFUSED)} || {refusal}, {select})"


def array_refusal_sql(expr: str, pgtype: PgType, path: str = "", depth: int = 0) -> str | None:
    """SQL of the text of ``array_refusal`` after ``what`` for the first array in value ``expr``
    the lake cannot hold (NULL when there is none), or None when ``pgtype`` holds no array the
    lake keeps as an array. ``path`` names the fields down to ``expr`` (", field 'tags'"), as
    apply's messages do; NULL and empty arrays (``array_ndims`` NULL) are fine.

    The arrays the lake keeps as arrays are those ``_json_type`` maps: an array column and, in
    a composite mapped to a struct (no numeric inside), each array field and the fields of
    composite elements; a composite holding a numeric, like any other text, is kept as it is.
    """
    if pgtype.kind == "c":
        if _holds_numeric(pgtype):
            return None
        fields = [
            array_refusal_sql(f"({expr}).{_sql_name(name)}", t, f"{path}, field {name!r}", depth)
            for name, t in pgtype.fields
        ]
        refusals = [r for r in fields if r is not None]
        if not refusals:
            return None
        return refusals[0] if len(refusals) == 1 else "COALESCE(" + ", ".join(refusals) + ")"
    if pgtype.kind != "a":
        return None
    declared = max(pgtype.ndims, 1)

    def refusal(other_dimensions: bool) -> str:
        head, tail = array_refusal_parts(declared, other_dimensions=other_dimensions)
        return f"{_sql_text(path + head)} || array_dims({expr}) || {_sql_text(tail)}"

    lower = " OR ".join(f"array_lower({expr}, {d}) <> 1" for d in range(1, declared + 1))
    own = (
        f"CASE WHEN array_ndims({expr}) <> {declared} THEN {refusal(True)}"
        f" WHEN {lower} THEN {refusal(False)} END"
    )
    element = pgtype.element
    if element is None or element.kind != "c":
        return own
    each = f"pgsync_e{depth}"
    inner = array_refusal_sql(each, element, path, depth + 1)
    if inner is None:
        return own
    # the composite elements' own arrays, whatever the outer array's dimensions; NULL elements
    # read as composites of NULL fields
    found = f"pgsync_r{depth}"
    first = (
        f"(SELECT {found} FROM (SELECT {inner} AS {found} FROM unnest({expr}) AS {each})"  # noqa: S608
        f" AS pgsync_f{depth} WHERE {found} IS NOT NULL LIMIT 1)"
    )
    return f"COALESCE({own}, {first})"


_MAX_BUILD_PAIRS = 50  # json_build_object takes at most 100 arguments


def json_select(expr: str, pgtype: PgType, depth: int = 0) -> str:
    """SQL for the JSON of value ``expr`` (a composite without numerics, an array, a scalar) as
    the lake's Spark type reads it: numbers and booleans as JSON scalars, hstore as an object,
    composites as objects, every other value as a JSON string of its output function's text.

    ``to_json`` alone would write dates and timestamps in ISO 8601 with a ``T`` and embed json
    values, where pgoutput sends their text output; so a composite is built field by field
    (``json_build_object``) and a one-dimensional array of composites element by element.
    """
    if pgtype.kind == "c":
        return _json_object(expr, pgtype, depth)
    if pgtype.kind == "a":
        return _json_array(expr, pgtype, depth)
    if pgtype.base in _JSON_SCALARS or pgtype.base == "hstore" or pgtype.base in CAST_IS_NOT_OUTPUT:
        return f"to_json({expr})"
    return f"to_json({expr}::text)"


def _json_object(expr: str, pgtype: PgType, depth: int) -> str:
    if not pgtype.fields:
        raise UnsupportedTypeError(f"composite type {pgtype.name} has no fields")
    pairs = [
        (_sql_text(name), json_select(f"({expr}).{_sql_name(name)}", t, depth)) for name, t in pgtype.fields
    ]
    if len(pairs) <= _MAX_BUILD_PAIRS:
        built = "json_build_object(" + ", ".join(f"{k}, {v}" for k, v in pairs) + ")"
    else:
        rows = ", ".join(f"({k}, {v})" for k, v in pairs)
        alias = f"pgsync_fields{depth}(pgsync_k, pgsync_v)"
        # names and keys are quoted (_sql_name, _sql_text); no argument limit here
        built = f"(SELECT json_object_agg(pgsync_k, pgsync_v) FROM (VALUES {rows}) AS {alias})"  # noqa: S608
    # num_nulls sees the value as a whole: a composite whose fields are all NULL is not NULL
    return f"CASE WHEN num_nulls({expr}) = 0 THEN {built} END"


def _json_array(expr: str, pgtype: PgType, depth: int) -> str:
    element = pgtype.element
    if element is None:
        raise UnsupportedTypeError(f"array type {pgtype.name} has no element type")
    if element.kind == "c" and not _holds_numeric(element) and pgtype.ndims <= 1:
        i = f"pgsync_i{depth}"
        item = json_select(f"({expr})[{i}]", element, depth + 1)
        # more dimensions than declared: to_json's nesting (spark_read's projection refuses such
        # a value before, refusing_arrays)
        each = f"(SELECT json_agg({item} ORDER BY {i}) FROM generate_subscripts({expr}, 1) AS {i})"  # noqa: S608
        return (
            f"CASE WHEN cardinality({expr}) = 0 THEN '[]'::json WHEN array_ndims({expr}) > 1"
            f" THEN to_json({expr}) ELSE {each} END"
        )
    if element.base in _JSON_SCALARS or element.base in CAST_IS_NOT_OUTPUT or element.kind == "c":
        return f"to_json({expr})"
    return f"to_json({expr}::text[])"


def _sql_text(text: str) -> str:
    """A string constant (``E''`` whatever standard_conforming_strings says), braces doubled
    for the ``sql.SQL`` template the projection becomes."""
    escaped = text.replace("\\", "\\\\").replace("'", "''")
    return ("E'" + escaped + "'").replace("{", "{{").replace("}", "}}")


def _sql_name(name: str) -> str:
    """A quoted identifier, braces doubled for the ``sql.SQL`` template."""
    return ('"' + name.replace('"', '""') + '"').replace("{", "{{").replace("}", "}}")


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
