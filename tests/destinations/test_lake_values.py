"""PostgreSQL text output turned into Arrow arrays of the lake's Spark types (pure logic)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_pgsync.destinations.lake_values import text_to_arrow
from airflow_provider_pgsync.destinations.pg_literals import ArrayShapeError, LiteralError, parse_array
from airflow_provider_pgsync.errors import ConfigError, DestinationError
from airflow_provider_pgsync.typemap.spark import array_refusal

WHAT = "column 'price' of table public.orders"
TS_UTC = pa.timestamp("us", tz="UTC")
TS_NTZ = pa.timestamp("us")
HSTORE = pa.map_(pa.string(), pa.string())


def convert(values: Sequence[str | None], target: pa.DataType) -> list[Any]:
    """Convert, check the exact result type, and return the Python values."""
    result = text_to_arrow(pa.array(values, pa.string()), target, what=WHAT)
    assert result.type == target
    assert len(result) == len(values)
    return result.to_pylist()


def rejected(values: Sequence[str | None], target: pa.DataType) -> str:
    """The message of the DestinationError converting ``values`` raises; it names the column."""
    with pytest.raises(DestinationError) as info:
        text_to_arrow(pa.array(values, pa.string()), target, what=WHAT)
    message = str(info.value)
    assert message.startswith(WHAT)
    assert ": value " in message
    return message


# ---- scalars ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "low", "high"),
    [
        (pa.int8(), -128, 127),
        (pa.int16(), -32768, 32767),
        (pa.int32(), -(2**31), 2**31 - 1),
        (pa.int64(), -(2**63), 2**63 - 1),
    ],
)
def test_integers(target: pa.DataType, low: int, high: int) -> None:
    assert convert([str(low), "0", None, str(high)], target) == [low, 0, None, high]


@pytest.mark.parametrize(
    ("target", "value"), [(pa.int8(), "128"), (pa.int16(), "-32769"), (pa.int32(), "1.5")]
)
def test_integer_that_does_not_fit_is_rejected(target: pa.DataType, value: str) -> None:
    message = rejected(["1", None, value], target)
    assert repr(value) in message
    assert "cannot be read as Spark's" in message


def test_the_first_bad_value_among_many_is_named() -> None:
    message = rejected(["1"] * 1000 + [None, "oops", "worse"] + ["2"] * 999, pa.int64())
    assert "'oops'" in message
    assert "worse" not in message


def test_double() -> None:
    result = convert(
        ["1.5", "-0", "1e+30", "NaN", "Infinity", "-Infinity", None, "1.2345678901234567e-05"], pa.float64()
    )
    assert result[0] == 1.5
    assert result[1] == 0.0 and math.copysign(1.0, result[1]) == -1.0
    assert result[2] == 1e30
    assert math.isnan(result[3])
    assert result[4:7] == [math.inf, -math.inf, None]
    assert result[7] == 1.2345678901234567e-05


def test_float_is_parsed_as_single_precision() -> None:
    result = convert(["1e+30", "3.4028235e+38", "-Infinity", "0.1", None], pa.float32())
    assert result == [
        float(np.float32(1e30)),
        float(np.float32(3.4028235e38)),
        -math.inf,
        float(np.float32(0.1)),
        None,
    ]


def test_float_rejects_text() -> None:
    assert "'abc'" in rejected(["1.0", "abc"], pa.float64())


def test_boolean() -> None:
    assert convert(["t", "f", None, "t"], pa.bool_()) == [True, False, None, True]


def test_boolean_rejects_other_spellings() -> None:
    message = rejected(["t", "true"], pa.bool_())
    assert "'true'" in message
    assert "t or f" in message


def test_bytea_hex() -> None:
    assert convert(["\\x0aff", None, "\\x", "\\xDEADbeef"], pa.binary()) == [
        b"\n\xff",
        None,
        b"",
        b"\xde\xad\xbe\xef",
    ]


def test_bytea_from_a_sliced_chunked_array() -> None:
    chunked = pa.chunked_array([pa.array(["\\x00", "\\x01"]), pa.array([None, "\\x0203"])])
    result = text_to_arrow(chunked.slice(1), pa.binary(), what=WHAT)
    assert result.to_pylist() == [b"\x01", None, b"\x02\x03"]


@pytest.mark.parametrize("value", ["abc", "\\000", "\\x0", "\\xzz", "\\x0g"])
def test_bytea_rejects_non_hex(value: str) -> None:
    message = rejected(["\\x00", value], pa.binary())
    assert repr(value) in message
    assert "bytea_output" in message


def test_string_is_unchanged() -> None:
    values = ["ab  ", '{"k": [1, 2]}', "0e4f1a3c-6c7a-4c2b-8d6e-2b1f0c9a7e11", "", None]
    assert convert(values, pa.string()) == values


def test_large_string_input() -> None:
    result = text_to_arrow(pa.array(["1", None], pa.large_string()), pa.int16(), what=WHAT)
    assert result.type == pa.int16()
    assert result.to_pylist() == [1, None]


def test_empty_input() -> None:
    assert convert([], pa.binary()) == []
    assert convert([], pa.list_(pa.int32())) == []
    assert text_to_arrow(pa.chunked_array([], pa.string()), pa.date32(), what=WHAT).to_pylist() == []


def test_decimal() -> None:
    target = pa.decimal128(10, 2)
    result = convert(["123.45", "-0.5", "1.5", "0", None, "99999999.99"], target)
    assert result == [
        Decimal("123.45"),
        Decimal("-0.50"),
        Decimal("1.50"),
        Decimal("0.00"),
        None,
        Decimal("99999999.99"),
    ]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1.234", "123456789.00"])
def test_decimal_rejects_what_spark_cannot_hold(value: str) -> None:
    message = rejected(["1.00", None, value], pa.decimal128(10, 2))
    assert repr(value) in message
    assert "Spark's decimal(10,2) cannot hold it" in message
    assert "string" in message


def test_date() -> None:
    result = convert(["2024-02-29", "infinity", "-infinity", None, "0001-01-01", "1970-01-01"], pa.date32())
    assert result == [
        date(2024, 2, 29),
        date(9999, 12, 31),
        date(1, 1, 1),
        None,
        date(1, 1, 1),
        date(1970, 1, 1),
    ]


EPOCH_DAY = date(1970, 1, 1).toordinal()
CYCLE_DAYS = 146_097  # 400 Gregorian years: 2000-06-01 + 400 years is 2400-06-01


def days(value: date, cycles: int = 0) -> int:
    """Days since 1970 of ``value`` moved by ``cycles`` times 400 years."""
    return value.toordinal() - EPOCH_DAY + cycles * CYCLE_DAYS


def test_dates_beyond_years_1_to_9999_keep_their_value() -> None:
    """As the baseline keeps them (days since 1970 in the proleptic Gregorian calendar; 1 BC is
    the year 0): 0001-12-31 BC is the day before 0001-01-01, 0044-03-15 BC is 0357-03-15 less
    one cycle (year -43 + 400 = 357)."""
    values = ["2024-01-01", "0001-12-31 BC", "0044-03-15 BC", "10000-01-01", None, "0401-02-29 BC"]
    result = pa.array(values, pa.string())
    out = text_to_arrow(result, pa.date32(), what="column 'd'").cast(pa.int32()).to_pylist()
    assert out == [
        days(date(2024, 1, 1)),
        days(date(1, 1, 1)) - 1,
        days(date(357, 3, 15), -1),
        days(date(2000, 1, 1), 20),
        None,
        days(date(400, 2, 29), -2),  # 401 BC is the year -400, a leap year like 400
    ]


def test_far_date_that_is_not_one_is_rejected() -> None:
    message = rejected(["2024-01-01", "0044-13-15 BC"], pa.date32())
    assert "'0044-13-15 BC'" in message


def test_invalid_date_is_rejected() -> None:
    assert "'2023-02-29'" in rejected(["2023-02-28", "2023-02-29"], pa.date32())


def test_timestamp_without_time_zone() -> None:
    values = [
        "2024-01-01 10:00:00",
        "2024-01-01 10:00:00.123456",
        "2024-01-01 10:00:00.1",
        "2024-01-01 10:00:00.12",
        "2024-01-01 10:00:00.12345",
        "infinity",
        "-infinity",
        None,
    ]
    assert convert(values, TS_NTZ) == [
        datetime(2024, 1, 1, 10),
        datetime(2024, 1, 1, 10, 0, 0, 123456),
        datetime(2024, 1, 1, 10, 0, 0, 100000),
        datetime(2024, 1, 1, 10, 0, 0, 120000),
        datetime(2024, 1, 1, 10, 0, 0, 123450),
        datetime(9999, 12, 31, 23, 59, 59, 999999),
        datetime(1, 1, 1),
        None,
    ]


def micros(value: datetime, cycles: int = 0) -> int:
    """Microseconds since 1970 of a naive ``value`` moved by ``cycles`` times 400 years."""
    seconds = value.hour * 3600 + value.minute * 60 + value.second
    return days(value.date(), cycles) * 86_400_000_000 + seconds * 1_000_000 + value.microsecond


def test_timestamps_beyond_years_1_to_9999_keep_their_value() -> None:
    ntz = ["0044-03-15 10:00:00.5 BC", "12024-01-01 10:00:00", "0001-12-31 23:59:59.5 BC"]
    out = text_to_arrow(pa.array(ntz), TS_NTZ, what="column 't'").cast(pa.int64()).to_pylist()
    assert out == [
        micros(datetime(357, 3, 15, 10, 0, 0, 500000), -1),
        micros(datetime(2024, 1, 1, 10), 25),
        micros(datetime(1, 1, 1)) - 500_000,
    ]
    utc = ["0044-03-15 10:00:00+01:30 BC", "10000-01-01 00:00:00+00", "0001-01-01 00:30:00+01"]
    out = text_to_arrow(pa.array(utc), TS_UTC, what="column 't'").cast(pa.int64()).to_pylist()
    assert out == [
        micros(datetime(357, 3, 15, 8, 30), -1),
        micros(datetime(2000, 1, 1), 20),
        micros(datetime(1, 1, 1)) - 30 * 60 * 1_000_000,  # an offset may leave the years 1 to 9999
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0044-03-15 10:00:00+00 BC", "cannot be read as Spark's timestamp_ntz"),
        ("0044-03-15 BC", "cannot be read as Spark's timestamp_ntz"),
        ("2024-01-01 10:00:00+00", "cannot be read as Spark's timestamp_ntz"),
        ("yesterday", "cannot be read as Spark's timestamp_ntz"),
    ],
)
def test_timestamp_without_time_zone_rejects(value: str, problem: str) -> None:
    message = rejected([value], TS_NTZ)
    assert repr(value) in message
    assert problem in message


def test_timestamp_with_time_zone_is_the_utc_instant() -> None:
    values = [
        "2024-01-01 10:00:00+00",
        "2024-01-01 10:00:00-03",
        "2024-01-01 10:00:00.5+05:30",
        "1890-01-01 10:00:00+05:30:15",
        "1890-01-01 10:00:00-00:17:30",
        "infinity",
        "-infinity",
        None,
    ]
    assert convert(values, TS_UTC) == [
        datetime(2024, 1, 1, 10, tzinfo=UTC),
        datetime(2024, 1, 1, 13, tzinfo=UTC),
        datetime(2024, 1, 1, 4, 30, 0, 500000, tzinfo=UTC),
        datetime(1890, 1, 1, 4, 29, 45, tzinfo=UTC),
        datetime(1890, 1, 1, 10, 17, 30, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        None,
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0044-03-15 10:00:00 BC", "cannot be read as Spark's timestamp"),
        ("2024-01-01 10:00:00", "timestamp with time zone"),
        ("2024-02-30 10:00:00+00", "timestamp with time zone"),
    ],
)
def test_timestamp_with_time_zone_rejects(value: str, problem: str) -> None:
    message = rejected(["2024-01-01 10:00:00+00", None, value], TS_UTC)
    assert repr(value) in message
    assert problem in message


def test_long_values_are_shortened_in_errors() -> None:
    value = "x" * 200
    message = rejected([value], pa.int32())
    assert repr("x" * 57 + "...") in message
    assert "x" * 58 not in message


def test_unsupported_target_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="time64"):
        text_to_arrow(pa.array(["10:00:00"]), pa.time64("us"), what=WHAT)


def test_non_text_input_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="string array"):
        text_to_arrow(pa.array([1, 2]), pa.int32(), what=WHAT)


# ---- arrays -------------------------------------------------------------------------------------


def test_array_of_integers_with_null_elements() -> None:
    target = pa.list_(pa.int32())
    assert convert(["{1,2,NULL}", "{}", None, "{-7}"], target) == [[1, 2, None], [], None, [-7]]


def test_array_quoting() -> None:
    value = '{"a b","x\\"y","back\\\\slash",NULL,"NULL","",plain,"{}","a,b"}'
    assert convert([value], pa.list_(pa.string())) == [
        ["a b", 'x"y', "back\\slash", None, "NULL", "", "plain", "{}", "a,b"]
    ]


def test_array_tolerates_blanks_like_array_in() -> None:
    assert convert(["{ 1 , 2 }", " { } ", "{ null }"], pa.list_(pa.int64())) == [[1, 2], [], [None]]


def test_array_dimension_decoration_with_lower_bounds_1_is_read() -> None:
    assert convert(["[1:2]={7,8}", '[1:1]={"x"}'], pa.list_(pa.string())) == [["7", "8"], ["x"]]


def refused(values: Sequence[str | None], target: pa.DataType) -> str:
    """The message of the DestinationError converting ``values`` raises for an array the lake
    cannot hold exactly (``typemap.spark.array_refusal``, the baseline's wording)."""
    with pytest.raises(DestinationError) as info:
        text_to_arrow(pa.array(values, pa.string()), target, what=WHAT)
    return str(info.value)


def test_array_with_a_lower_bound_other_than_1_is_refused() -> None:
    """PostgreSQL writes [lower:upper]= when a lower bound is not 1: the lake, indexed from 1,
    cannot keep it, so the value is refused as the baseline refuses it, never shifted."""
    value = "[-3:-1]={7,NULL,-9223372036854775808}"
    message = refused(["{1,2}", value], pa.list_(pa.int64()))
    assert message == array_refusal(WHAT, "[-3:-1]", 1)
    assert "[-3:-1]" in message and "lower bound other than 1" in message
    assert refused(['[0:0]={"x"}'], pa.list_(pa.string())) == array_refusal(WHAT, "[0:0]", 1)
    # every bound is checked, not only the first
    assert refused(["[1:1][0:1]={{1,2}}"], pa.list_(pa.list_(pa.int32()))) == array_refusal(
        WHAT, "[1:1][0:1]", 2
    )
    assert refused(["[2:3][1:1]={{1},{2}}"], pa.list_(pa.list_(pa.int32()))) == array_refusal(
        WHAT, "[2:3][1:1]", 2
    )


def test_two_dimensional_array() -> None:
    target = pa.list_(pa.list_(pa.int64()))
    values = ["{{1,2},{3,4}}", "{}", "[1:2][1:1]={{1},{2}}", "{{NULL,5}}", None]
    assert convert(values, target) == [[[1, 2], [3, 4]], [], [[1], [2]], [[None, 5]], None]


def test_three_dimensional_array_of_strings() -> None:
    target = pa.list_(pa.list_(pa.list_(pa.string())))
    assert convert(['{{{a,"b c"}},{{NULL,"}"}}}'], target) == [[[["a", "b c"]], [[None, "}"]]]]


def test_array_elements_follow_the_scalar_rules() -> None:
    floats = convert(["{Infinity,-Infinity,NaN,1.5,NULL}"], pa.list_(pa.float64()))[0]
    assert floats[:2] == [math.inf, -math.inf]
    assert math.isnan(floats[2])
    assert floats[3:] == [1.5, None]
    assert convert(["{t,f,NULL}"], pa.list_(pa.bool_())) == [[True, False, None]]
    assert convert(['{"\\\\x0aff",NULL}'], pa.list_(pa.binary())) == [[b"\n\xff", None]]
    assert convert(["{2024-02-29,infinity}"], pa.list_(pa.date32())) == [
        [date(2024, 2, 29), date(9999, 12, 31)]
    ]
    assert convert(['{"2024-01-01 10:00:00-03",-infinity}'], pa.list_(TS_UTC)) == [
        [datetime(2024, 1, 1, 13, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC)]
    ]
    assert convert(["{1.5,-2}"], pa.list_(pa.decimal128(5, 2))) == [[Decimal("1.50"), Decimal("-2.00")]]


def test_bad_array_element_names_the_element() -> None:
    message = rejected(["{1,2}", "{3,x4}"], pa.list_(pa.int32()))
    assert "'x4'" in message
    assert "Spark's integer" in message


def test_array_with_other_dimensions_than_the_column_is_rejected() -> None:
    message = refused(["{{1,2}}"], pa.list_(pa.int32()))
    assert message == array_refusal(WHAT, "[1:1][1:2]", 1)
    assert "1-dimensional" in message
    message = refused(["{1,2}"], pa.list_(pa.list_(pa.int32())))
    assert message == array_refusal(WHAT, "[1:2]", 2)
    assert "2-dimensional" in message
    # not a literal array_out writes (its sub-arrays differ): malformed, not another shape
    assert "2-dimensional" in rejected(["{{1},2}"], pa.list_(pa.list_(pa.int32())))


def test_two_dimensional_text_in_a_one_dimensional_column_is_refused() -> None:
    """PostgreSQL does not enforce declared dimensions: a text[] column may hold a 2-D value,
    which the lake's array<string> cannot hold; refused, not turned into strings."""
    value = r'{{"a b","\"q\""},{NULL,"NULL"}}'  # its text output, as pgoutput sends it
    message = refused(['{"a b"}', None, "{}", value], pa.list_(pa.string()))
    assert message == array_refusal(WHAT, "[1:2][1:2]", 1)
    assert message.startswith(WHAT + ": an array value with dimensions [1:2][1:2] ")
    for part in (
        "1 dimension declared",
        "indexed from 1",
        "rebaseline",
        "columns list",
        "PostgreSQL destination",
    ):
        assert part in message, part
    # decorated with lower bounds 1 but other dimensions: refused the same way
    assert refused(["[1:1][1:1]={{x}}"], pa.list_(pa.string())) == array_refusal(WHAT, "[1:1][1:1]", 1)
    assert refused(["{{{x}}}"], pa.list_(pa.list_(pa.string()))) == array_refusal(WHAT, "[1:1][1:1][1:1]", 2)


def test_empty_and_null_arrays_and_arrays_indexed_from_1_are_read() -> None:
    assert convert(["{}", None, "{7,NULL,-9223372036854775808}"], pa.list_(pa.int64())) == [
        [],
        None,
        [7, None, -9223372036854775808],
    ]
    assert convert(["{}", None, "{{a,NULL}}"], pa.list_(pa.list_(pa.string()))) == [[], None, [["a", None]]]


def test_arrays_inside_composites_are_refused_naming_the_field() -> None:
    """A struct's array field, and an array of structs' fields, as the baseline names them."""
    tags = pa.list_(pa.string())
    target = pa.struct([("n", pa.int32()), ("tags", tags)])
    assert convert(['(1,"{a,b}")', "(2,{})", "(,)"], target) == [
        {"n": 1, "tags": ["a", "b"]},
        {"n": 2, "tags": []},
        {"n": None, "tags": None},
    ]
    inside = f"{WHAT}, field 'tags'"
    assert refused(['(1,"[0:1]={a,b}")'], target) == array_refusal(inside, "[0:1]", 1)
    assert refused(['{"(1,\\"{{a}}\\")"}'], pa.list_(target)) == array_refusal(inside, "[1:1][1:1]", 1)


def test_parse_array_refuses_with_the_dimensions() -> None:
    with pytest.raises(ArrayShapeError) as info:
        parse_array("[-3:-1]={7,NULL,-9223372036854775808}", 1)
    assert (info.value.dims, info.value.declared) == ("[-3:-1]", 1)
    assert str(info.value) == array_refusal("PostgreSQL array", "[-3:-1]", 1)
    with pytest.raises(ArrayShapeError) as info:
        parse_array(r'{{"a b","\"q\""},{NULL,"NULL"}}', 1)
    assert (info.value.dims, info.value.declared) == ("[1:2][1:2]", 1)
    with pytest.raises(ArrayShapeError) as info:
        parse_array("{1,2,3}", 2)
    assert (info.value.dims, info.value.declared) == ("[1:3]", 2)
    with pytest.raises(ArrayShapeError) as info:
        parse_array("[ 5 ]={1,2,3,4,5}", 2)  # an upper bound alone: lower bound 1, one dimension
    assert (info.value.dims, info.value.declared) == ("[1:5]", 2)
    assert parse_array("{}", 1) == parse_array("{}", 3) == parse_array(" { } ", 2) == []
    assert parse_array("[1:2][1:1]={{1},{2}}", 2) == [["1"], ["2"]]
    assert parse_array("{{1,2},{3,4}}", 2) == [["1", "2"], ["3", "4"]]
    # a decoration that disagrees with the braces is no literal array_out writes: malformed
    with pytest.raises(LiteralError, match="dimensions differ from its braces") as malformed:
        parse_array("[1:2]={{1},{2}}", 2)
    assert not isinstance(malformed.value, ArrayShapeError)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{1,,2}", "an element is missing"),
        ("{1,}", "an element is missing"),
        ("{1}x", "text follows the closing '}'"),
        ("{1", "lacks a closing '}'"),
        ('{"a}', "unterminated quote"),
        ('{"a"b}', "not followed by ',' or '}'"),
        ("1", "must start with '{'"),
        ("", "must start with '{'"),
    ],
)
def test_malformed_array_is_rejected(value: str, problem: str) -> None:
    message = rejected([value], pa.list_(pa.string()))
    assert repr(value) in message
    assert "is not a valid PostgreSQL array" in message
    assert problem in message


# ---- composites ---------------------------------------------------------------------------------

ROW = pa.struct(
    [
        pa.field("id", pa.int32()),
        pa.field("name", pa.string()),
        pa.field("note", pa.string()),
        pa.field("quote", pa.string()),
        pa.field("ok", pa.bool_()),
    ]
)


def test_composite() -> None:
    assert convert(['(1,"a b",,"x""y",t)', '(,"",,"\\"\\\\",f)', None], ROW) == [
        {"id": 1, "name": "a b", "note": None, "quote": 'x"y', "ok": True},
        {"id": None, "name": "", "note": None, "quote": '"\\', "ok": False},
        None,
    ]


def test_composite_field_with_doubled_backslash_and_parentheses() -> None:
    target = pa.struct([pa.field("path", pa.string()), pa.field("expr", pa.string())])
    assert convert(['("C:\\\\dir","f(a,b)")'], target) == [{"path": "C:\\dir", "expr": "f(a,b)"}]


def test_composite_of_one_null_field() -> None:
    target = pa.struct([pa.field("x", pa.int64())])
    assert convert(["()", "(5)"], target) == [{"x": None}, {"x": 5}]


def test_struct_holding_arrays_and_a_struct() -> None:
    target = pa.struct(
        [
            pa.field("ids", pa.list_(pa.int32())),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("inner", pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])),
        ]
    )
    values = ['("{1,2,NULL}","{""a b"",c}","(2,""x y"")")', "({},,)"]
    assert convert(values, target) == [
        {"ids": [1, 2, None], "tags": ["a b", "c"], "inner": {"a": 2, "b": "x y"}},
        {"ids": [], "tags": None, "inner": None},
    ]


def test_array_of_structs() -> None:
    target = pa.list_(pa.struct([pa.field("n", pa.int32()), pa.field("s", pa.string())]))
    values = ['{"(1,a)","(2,\\"b c\\")",NULL,"(,)"}', "{}"]
    assert convert(values, target) == [
        [{"n": 1, "s": "a"}, {"n": 2, "s": "b c"}, None, {"n": None, "s": None}],
        [],
    ]


def test_composite_with_wrong_field_count_is_rejected() -> None:
    message = rejected(["(1,a,,x,t,extra)"], ROW)
    assert "'(1,a,,x,t,extra)'" in message
    assert "6 fields" in message and "has 5" in message


@pytest.mark.parametrize(
    ("value", "problem"),
    [("1,a", "parentheses"), ('(1,"a)', "unexpected"), ("(1,a)b)", "unexpected")],
)
def test_malformed_composite_is_rejected(value: str, problem: str) -> None:
    target = pa.struct([pa.field("n", pa.int32()), pa.field("s", pa.string())])
    message = rejected([value], target)
    assert repr(value) in message
    assert "not a valid PostgreSQL composite value" in message
    assert problem in message


def test_bad_composite_field_names_the_field() -> None:
    message = rejected(["(x,a,,,t)"], ROW)
    assert message.startswith(f"{WHAT}, field 'id': value 'x' cannot be read as Spark's integer")


# ---- hstore -------------------------------------------------------------------------------------


def test_hstore() -> None:
    values = ['"a"=>"1", "b c"=>NULL', "", None, '"k\\"q"=>"v\\\\", "e"=>""']
    assert convert(values, HSTORE) == [
        [("a", "1"), ("b c", None)],
        [],
        None,
        [('k"q', "v\\"), ("e", "")],
    ]


def test_hstore_unquoted_like_hstore_in() -> None:
    assert convert(['a=>1,b => NULL , c=>"NULL"'], HSTORE) == [[("a", "1"), ("b", None), ("c", "NULL")]]


def test_array_of_hstore() -> None:
    target = pa.list_(HSTORE)
    assert convert(['{"\\"a\\"=>\\"1\\"",NULL,""}'], target) == [[[("a", "1")], None, []]]


@pytest.mark.parametrize("value", ['"a"=>', '"a" "b"', '"a"=>"1" "b"=>"2"', '"a=>"1"'])
def test_malformed_hstore_is_rejected(value: str) -> None:
    message = rejected([value], HSTORE)
    assert repr(value) in message
    assert "not a valid PostgreSQL hstore value" in message
