"""Every branch of the PostgreSQL -> Spark column mapping (DESIGN §6), as pure logic."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_pgsync.errors import UnsupportedTypeError
from airflow_provider_pgsync.typemap.pgtypes import PgType
from airflow_provider_pgsync.typemap.spark import (
    CONVERSIONS,
    DATE_MAX_DAYS,
    DATE_MIN_DAYS,
    REFUSED,
    TIMESTAMP_MAX_MICROS,
    TIMESTAMP_MIN_MICROS,
    ColumnRead,
    array_refusal,
    array_refusal_parts,
    array_refusal_sql,
    json_select,
    refusing_arrays,
    spark_read,
    spark_reads,
)

INT4 = PgType("integer", "int4")
TEXT = PgType("text", "text")


def numeric(precision: int | None, scale: int | None) -> PgType:
    name = "numeric" if precision is None else f"numeric({precision},{scale})"
    return PgType(name, "numeric", precision=precision, scale=scale)


def array(element: PgType, ndims: int) -> PgType:
    return PgType(f"{element.name}[]", "array", "a", element=element, ndims=ndims)


def composite(name: str, *fields: tuple[str, PgType]) -> PgType:
    return PgType(name, f"public.{name}", "c", fields=tuple(fields))


# ---- sentinels --------------------------------------------------------------------------------

EPOCH_DATE = date(1970, 1, 1)
EPOCH = datetime(1970, 1, 1)


def micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def test_sentinels_are_the_ends_of_sparks_range() -> None:
    assert (date(9999, 12, 31) - EPOCH_DATE).days == DATE_MAX_DAYS
    assert (date(1, 1, 1) - EPOCH_DATE).days == DATE_MIN_DAYS
    assert micros(datetime(9999, 12, 31, 23, 59, 59, 999999) - EPOCH) == TIMESTAMP_MAX_MICROS
    assert micros(datetime(1, 1, 1) - EPOCH) == TIMESTAMP_MIN_MICROS


def test_every_conversion_is_declared() -> None:
    types = [
        INT4,
        numeric(10, 2),
        PgType("date", "date"),
        PgType("timestamp", "timestamp"),
        PgType("timestamptz", "timestamptz"),
        array(INT4, 1),
        TEXT,
    ]
    used = {spark_read("c", t).convert for t in types}
    assert used == set(CONVERSIONS)


# ---- scalars ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "spark_type"),
    [
        ("int2", "smallint"),
        ("int4", "int"),
        ("int8", "bigint"),
        ("float4", "float"),
        ("float8", "double"),
        ("bool", "boolean"),
        ("bytea", "binary"),
    ],
)
def test_native(base: str, spark_type: str) -> None:
    assert spark_read("c", PgType(base, base)) == ColumnRead("c", "{col}", "native", spark_type)


def test_domain_over_native_uses_its_base() -> None:
    domain = PgType("positive_int", "int4")
    assert spark_read("c", domain) == ColumnRead("c", "{col}", "native", "int")


@pytest.mark.parametrize(("precision", "scale"), [(10, 2), (38, 38), (38, 0), (1, 0), (5, 5)])
def test_decimal_fits(precision: int, scale: int) -> None:
    assert spark_read("amount", numeric(precision, scale)) == ColumnRead(
        "amount", "{col}::text", "decimal", f"decimal({precision},{scale})"
    )


@pytest.mark.parametrize(
    ("precision", "scale"),
    [(39, 0), (1000, 2), (5, -2), (3, 5), (None, None), (10, None), (None, 2)],
    ids=["p>38", "p=1000", "s<0", "s>p", "unconstrained", "no-scale", "no-precision"],
)
def test_decimal_falls_back_to_string(precision: int | None, scale: int | None) -> None:
    assert spark_read("amount", numeric(precision, scale)) == ColumnRead(
        "amount", "{col}::text", "native", "string"
    )


def test_date() -> None:
    read = spark_read("d", PgType("date", "date"))
    assert (read.convert, read.spark_type) == ("date_days", "date")
    assert "isfinite({col})" in read.select
    assert "{col} - DATE '1970-01-01'" in read.select
    assert f"{{col}} = 'infinity' THEN {DATE_MAX_DAYS}" in read.select
    assert f"{{col}} = '-infinity' THEN {DATE_MIN_DAYS}" in read.select
    # the only placeholder is {col}: the text is a valid psycopg sql.SQL format string
    assert read.select.replace("{col}", "").count("{") == 0


@pytest.mark.parametrize(
    ("base", "convert", "spark_type"),
    [
        ("timestamp", "timestamp_ntz_micros", "timestamp_ntz"),
        ("timestamptz", "timestamp_micros", "timestamp"),
    ],
)
def test_timestamps(base: str, convert: str, spark_type: str) -> None:
    read = spark_read("ts", PgType(f"{base}(3)", base))
    assert (read.convert, read.spark_type) == (convert, spark_type)
    assert "(extract(epoch FROM {col}) * 1000000)::int8" in read.select
    assert f"{{col}} = 'infinity' THEN {TIMESTAMP_MAX_MICROS}" in read.select
    assert f"{{col}} = '-infinity' THEN {TIMESTAMP_MIN_MICROS}" in read.select
    assert read.select.replace("{col}", "").count("{") == 0


@pytest.mark.parametrize(
    ("name", "base", "kind"),
    [
        ("text", "text", "b"),
        ("character varying(10)", "varchar", "b"),
        ("uuid", "uuid", "b"),
        ("jsonb", "jsonb", "b"),
        ("json", "json", "b"),
        ("interval", "interval", "b"),
        ("time without time zone", "time", "b"),
        ("money", "money", "b"),
        ("bit(3)", "bit", "b"),
        ("mood", "public.mood", "e"),
        ("int4range", "int4range", "r"),
        ("citext", "public.citext", "b"),
    ],
)
def test_everything_else_is_string(name: str, base: str, kind: str) -> None:
    assert spark_read("v", PgType(name, base, kind)) == ColumnRead("v", "{col}::text", "native", "string")


@pytest.mark.parametrize("base", ["inet", "cidr", "xml", "char"])
def test_types_whose_cast_is_not_their_output_are_read_through_to_json(base: str) -> None:
    # inet's cast to text adds the netmask of a host address (192.168.0.1/32), xml's keeps the
    # <?xml ...?> declaration the output function drops; to_json writes their output text
    expected = ColumnRead("v", "(to_json({col}) #>> '{{}}')", "native", "string")
    assert spark_read("v", PgType(base, base)) == expected
    assert spark_read("v", PgType("a_domain", base)) == expected


@pytest.mark.parametrize("name", ["character(3)", "bpchar", "code3"], ids=["char(n)", "bpchar", "domain"])
def test_char_is_read_as_is(name: str) -> None:
    # no ::text cast: casting char(n) to text would strip its padding
    assert spark_read("v", PgType(name, "bpchar")) == ColumnRead("v", "{col}", "native", "string")


# ---- arrays, composites, hstore ---------------------------------------------------------------


def json_read(name: str, spark_type: str, t: PgType | None = None) -> ColumnRead:
    """A value through ``to_json``; an array's refused when the lake cannot hold it."""
    select = "to_json({col})::text"
    return ColumnRead(name, select if t is None else refusing_arrays(select, t), "json", spark_type)


def built_read(name: str, t: PgType, spark_type: str) -> ColumnRead:
    """A composite (or an array of them) built field by field (``json_select``), its arrays
    refused when the lake cannot hold them."""
    return ColumnRead(name, refusing_arrays(json_select("{col}", t) + "::text", t), "json", spark_type)


def text_array_read(name: str, t: PgType) -> ColumnRead:
    """An array read as PostgreSQL's text of each element, nested per dimension."""
    ndims = max(t.ndims, 1)
    spark_type = "array<" * ndims + "string" + ">" * ndims
    return ColumnRead(name, refusing_arrays("to_json({col}::text[])::text", t), "json", spark_type)


@pytest.mark.parametrize(
    ("ndims", "spark_type"),
    [
        (0, "array<int>"),  # undeclared dimensions count as one
        (1, "array<int>"),
        (2, "array<array<int>>"),
        (3, "array<array<array<int>>>"),
    ],
)
def test_array_dimensions(ndims: int, spark_type: str) -> None:
    assert spark_read("a", array(INT4, ndims)) == json_read("a", spark_type, array(INT4, ndims))


@pytest.mark.parametrize(("ndims", "depth"), [(0, 1), (1, 1), (2, 2), (3, 3)])
def test_text_array_dimensions(ndims: int, depth: int) -> None:
    assert spark_read("a", array(numeric(10, 2), ndims)) == text_array_read("a", array(numeric(10, 2), ndims))
    assert spark_read("a", array(TEXT, ndims)) == text_array_read("a", array(TEXT, ndims))
    assert spark_read("a", array(TEXT, ndims)).spark_type.count("array<") == depth


@pytest.mark.parametrize(
    ("element", "spark_type"),
    [
        (PgType("smallint", "int2"), "array<smallint>"),
        (INT4, "array<int>"),
        (PgType("bigint", "int8"), "array<bigint>"),
        (PgType("real", "float4"), "array<float>"),
        (PgType("double precision", "float8"), "array<double>"),
        (PgType("boolean", "bool"), "array<boolean>"),
        (PgType("positive_int", "int4"), "array<int>"),  # a domain element keeps its base
    ],
)
def test_array_elements_keep_their_type(element: PgType, spark_type: str) -> None:
    assert spark_read("a", array(element, 1)) == json_read("a", spark_type, array(element, 1))


@pytest.mark.parametrize(
    "element",
    [
        TEXT,
        PgType("character varying(10)", "varchar"),
        PgType("bytea", "bytea"),
        numeric(10, 2),
        numeric(None, None),
        PgType("money2", "numeric", precision=10, scale=2),  # a domain over numeric
        PgType("date", "date"),
        PgType("timestamp", "timestamp"),
        PgType("timestamptz", "timestamptz"),
        PgType("uuid", "uuid"),
        PgType("jsonb", "jsonb"),
        PgType("mood", "public.mood", "e"),
        PgType("int4range", "int4range", "r"),
        PgType("hstore", "hstore"),
    ],
    ids=lambda t: t.name,
)
def test_other_array_elements_are_their_text(element: PgType) -> None:
    assert spark_read("a", array(element, 1)) == text_array_read("a", array(element, 1))


def test_composite_struct_with_quoted_names() -> None:
    t = composite(
        "odd",
        ("id", INT4),
        ("Mixed Case", TEXT),
        ("back`tick", PgType("boolean", "bool")),
        ("tags", array(TEXT, 1)),
    )
    assert spark_read("c", t) == built_read(
        "c", t, "struct<`id`:int,`Mixed Case`:string,`back``tick`:boolean,`tags`:array<string>>"
    )


def test_nested_composite() -> None:
    inner = composite("point2", ("x", PgType("double precision", "float8")), ("y", PgType("real", "float4")))
    outer = composite("shape", ("name", TEXT), ("at", inner))
    spark_type = "struct<`name`:string,`at`:struct<`x`:double,`y`:float>>"
    assert spark_read("s", outer) == built_read("s", outer, spark_type)


def test_composite_fields_of_other_types_are_strings() -> None:
    t = composite(
        "event",
        ("at", PgType("timestamptz", "timestamptz")),
        ("code", PgType("character(3)", "bpchar")),
        ("attrs", PgType("hstore", "hstore")),
        ("moods", array(PgType("mood", "public.mood", "e"), 1)),
    )
    assert spark_read("e", t) == built_read(
        "e", t, "struct<`at`:string,`code`:string,`attrs`:map<string,string>,`moods`:array<string>>"
    )


def composite_text(name: str) -> ColumnRead:
    return ColumnRead(name, "{col}::text", "native", "string")


def test_composite_with_a_numeric_field_is_its_text() -> None:
    t = composite("line", ("sku", TEXT), ("qty", INT4), ("price", numeric(8, 3)))
    assert spark_read("l", t) == composite_text("l")
    unconstrained = composite("amount", ("value", numeric(None, None)))
    assert spark_read("a", unconstrained) == composite_text("a")
    domain = composite("priced", ("price", PgType("money2", "numeric", precision=10, scale=2)))
    assert spark_read("p", domain) == composite_text("p")


def test_composite_with_a_nested_composite_holding_numeric_is_its_text() -> None:
    money = composite("money_t", ("amount", numeric(12, 2)), ("currency", TEXT))
    outer = composite("order_t", ("id", INT4), ("total", money))
    assert spark_read("o", outer) == composite_text("o")
    deeper = composite("wrap", ("name", TEXT), ("order", outer))
    assert spark_read("w", deeper) == composite_text("w")


def test_composite_with_numerics_in_a_nested_array_is_its_text() -> None:
    assert spark_read("c", composite("c1", ("prices", array(numeric(8, 2), 1)))) == composite_text("c")
    line = composite("line", ("price", numeric(8, 3)))
    assert spark_read("c", composite("c2", ("lines", array(line, 1)))) == composite_text("c")


def test_array_of_composites() -> None:
    item = composite("item", ("sku", TEXT), ("qty", INT4))
    assert spark_read("items", array(item, 2)) == json_read(
        "items", "array<array<struct<`sku`:string,`qty`:int>>>", array(item, 2)
    )


def test_array_of_composites_without_numeric_is_array_of_struct() -> None:
    item = composite(
        "item",
        ("sku", TEXT),
        ("qty", INT4),
        ("weight", PgType("double precision", "float8")),
        ("tags", array(TEXT, 1)),
        ("at", composite("pos", ("x", PgType("real", "float4")), ("ok", PgType("boolean", "bool")))),
    )
    assert spark_read("items", array(item, 1)) == built_read(
        "items",
        array(item, 1),
        "array<struct<`sku`:string,`qty`:int,`weight`:double,`tags`:array<string>,"
        "`at`:struct<`x`:float,`ok`:boolean>>>",
    )


def test_array_of_composites_with_numeric_is_array_of_text() -> None:
    item = composite("item", ("sku", TEXT), ("price", numeric(8, 3)))
    assert spark_read("items", array(item, 1)) == text_array_read("items", array(item, 1))
    assert spark_read("grid", array(item, 2)) == text_array_read("grid", array(item, 2))
    nested = composite("box", ("name", TEXT), ("content", item))  # the numeric is one level down
    assert spark_read("boxes", array(nested, 1)) == text_array_read("boxes", array(nested, 1))


def test_hstore_and_array_of_hstore() -> None:
    hstore = PgType("hstore", "hstore")
    assert spark_read("h", hstore) == json_read("h", "map<string,string>")
    assert spark_read("hs", array(hstore, 1)) == text_array_read("hs", array(hstore, 1))
    domain = PgType("attrs", "hstore")  # a domain over hstore keeps its base
    assert spark_read("d", domain) == json_read("d", "map<string,string>")


# ---- arrays the lake cannot hold: one refusal for the baseline and apply ----------------------


@pytest.mark.parametrize(
    ("dims", "declared", "problem"),
    [
        ("[-3:-1]", 1, "has a lower bound other than 1"),
        ("[1:2][0:1]", 2, "has a lower bound other than 1"),
        ("[1:2][1:2]", 1, "does not have the 1 dimension declared for it"),
        ("[1:3]", 2, "does not have the 2 dimensions declared for it"),
    ],
)
def test_array_refusal_names_the_value_the_reason_and_the_remedy(
    dims: str, declared: int, problem: str
) -> None:
    what = "column 'tags' of table public.t"
    message = array_refusal(what, dims, declared)
    assert message.startswith(f"{what}: an array value with dimensions {dims} {problem}; ")
    assert f"as {declared}-dimensional Spark arrays indexed from 1" in message
    assert f"change such values in the source ({declared}-dimensional, every lower bound 1)" in message
    assert "then rebaseline the table into the lake" in message
    assert "leave the column out of the pipeline's table (its columns list)" in message
    assert "keep the table in a PostgreSQL destination, which holds any array exactly" in message
    assert "\n" not in message and len(message) < 1000  # one line; Errored reasons keep 2000 characters
    head, tail = array_refusal_parts(declared, other_dimensions=dims.count("[") != declared)
    assert message == what + head + dims + tail  # the parts the baseline's projection joins


@pytest.mark.parametrize(
    "t",
    [
        INT4,
        TEXT,
        PgType("hstore", "hstore"),
        composite("plain", ("n", INT4), ("label", TEXT)),
        composite("priced", ("price", numeric(8, 2)), ("tags", array(TEXT, 1))),  # its text
        array(composite("line", ("price", numeric(8, 2)), ("tags", array(TEXT, 1))), 1).element,
    ],
    ids=lambda t: t.name,
)
def test_values_without_lake_arrays_are_never_checked(t: PgType) -> None:
    assert t is not None
    assert array_refusal_sql("{col}", t) is None
    assert refusing_arrays("x", t) == "x"
    assert REFUSED not in spark_read("c", t).select


@pytest.mark.parametrize(
    "t",
    [
        array(INT4, 0),
        array(TEXT, 2),
        array(composite("line", ("price", numeric(8, 2)), ("tags", array(TEXT, 1))), 1),  # text elements
        composite("tagged", ("n", INT4), ("tags", array(TEXT, 1))),
        array(composite("item", ("sku", TEXT), ("grid", array(INT4, 2))), 1),
    ],
    ids=lambda t: t.name,
)
def test_lake_arrays_are_checked_before_their_json(t: PgType) -> None:
    read = spark_read("c", t)
    assert read.select.startswith(f"COALESCE(E'{REFUSED}' || ")
    assert read.convert == "json"


def test_nested_arrays_are_checked_with_their_declared_dimensions_and_field_path() -> None:
    item = composite("item", ("sku", TEXT), ("grid", array(INT4, 2)))
    refusal = array_refusal_sql("{col}", array(item, 1))
    assert refusal is not None
    assert "array_ndims({col}) <> 1" in refusal and "array_lower({col}, 1) <> 1" in refusal
    assert 'array_ndims((pgsync_e0)."grid") <> 2' in refusal
    assert 'array_lower((pgsync_e0)."grid", 2) <> 1' in refusal
    head, _ = array_refusal_parts(2, other_dimensions=True)
    assert "E'" + (", field 'grid'" + head).replace("'", "''") + "'" in refusal


# ---- property: numerics never travel as JSON numbers ------------------------------------------

SCALARS = [
    INT4,
    PgType("bigint", "int8"),
    PgType("double precision", "float8"),
    PgType("boolean", "bool"),
    TEXT,
    PgType("character(3)", "bpchar"),
    PgType("timestamptz", "timestamptz"),
    PgType("hstore", "hstore"),
    numeric(10, 2),
    numeric(None, None),
]


def types() -> st.SearchStrategy[PgType]:
    def extend(inner: st.SearchStrategy[PgType]) -> st.SearchStrategy[PgType]:
        arrays = st.builds(array, inner, st.integers(min_value=0, max_value=3))
        composites = st.lists(inner, min_size=1, max_size=3).map(
            lambda ts: composite("t", *((f"f{i}", t) for i, t in enumerate(ts)))
        )
        return arrays | composites

    return st.recursive(st.sampled_from(SCALARS), extend, max_leaves=6)


def numeric_inside(t: PgType) -> bool:
    children = [f for _, f in t.fields] + ([t.element] if t.element is not None else [])
    return t.base == "numeric" or any(numeric_inside(c) for c in children)


@given(types())
def test_numerics_never_travel_as_json_numbers(t: PgType) -> None:
    read = spark_read("c", t)
    to_json = refusing_arrays("to_json({col})::text", t)  # its arrays refused when the lake cannot hold them
    if read.select == to_json:  # to_json writes numerics as JSON numbers
        assert not numeric_inside(t)
    if t.kind == "c":
        if numeric_inside(t):
            assert read == composite_text("c")
        else:
            built = refusing_arrays(json_select("{col}", t) + "::text", t)
            assert read.select == built and read.spark_type.startswith("struct<")
    if t.kind == "a":
        assert t.element is not None
        if t.element.kind == "c" and not numeric_inside(t.element):
            assert read.select == refusing_arrays(json_select("{col}", t) + "::text", t)
            assert read.spark_type.startswith("array<" * max(t.ndims, 1))
        elif t.element.base in ("int4", "int8", "float8", "bool"):
            assert read.select == to_json
            assert read.spark_type.startswith("array<" * max(t.ndims, 1))
        elif t.element.base == "bpchar":  # JSON strings keep the padding a text cast drops
            assert read.select == to_json
            assert read.spark_type == "array<" * max(t.ndims, 1) + "string" + ">" * max(t.ndims, 1)
        else:
            assert read == text_array_read("c", t)


def test_array_without_element_is_rejected() -> None:
    broken = PgType("weird[]", "array", "a", element=None, ndims=1)
    with pytest.raises(UnsupportedTypeError, match=r"weird\[\]"):
        spark_read("w", broken)


def test_composite_without_fields_is_rejected() -> None:
    with pytest.raises(UnsupportedTypeError, match="empty_type"):
        spark_read("e", composite("empty_type"))
    with pytest.raises(UnsupportedTypeError, match="empty_type"):
        spark_read("e", array(composite("empty_type"), 1))


# ---- spark_reads ------------------------------------------------------------------------------


def test_spark_reads_keeps_order() -> None:
    columns = [("id", PgType("bigint", "int8")), ("Name", TEXT), ("amount", numeric(12, 2))]
    reads = spark_reads(columns, "public.t")
    assert [r.name for r in reads] == ["id", "Name", "amount"]
    assert reads == [spark_read(n, t) for n, t in columns]
    assert spark_reads([], "public.t") == []


@pytest.mark.parametrize(("first", "second"), [("Name", "name"), ("name", "NAME"), ("ÄBC", "äbc")])
def test_spark_reads_rejects_names_differing_in_case(first: str, second: str) -> None:
    columns = [("id", INT4), (first, TEXT), ("other", TEXT), (second, INT4)]
    with pytest.raises(UnsupportedTypeError) as info:
        spark_reads(columns, 'public."Orders"')
    message = str(info.value)
    assert repr(first) in message
    assert repr(second) in message
    assert 'public."Orders"' in message


@pytest.mark.parametrize("ndims", [0, 1, 2])
def test_char_arrays_keep_their_padding(ndims: int) -> None:
    """char(n) elements go through to_json (JSON strings keep the padding; ::text[] drops it)."""
    dims = max(ndims, 1)
    t = PgType("character(3)[]", "array", "a", element=PgType("character(3)", "bpchar"), ndims=ndims)
    read = spark_read("codes", t)
    assert read == ColumnRead(
        "codes", refusing_arrays("to_json({col})::text", t), "json", "array<" * dims + "string" + ">" * dims
    )
