"""PostgreSQL's text output of column values turned into Arrow arrays of the lake's Spark types.

Pure logic for the lake destination. Change data capture hands over each value as PostgreSQL's
text output (pgoutput: DateStyle ISO, IntervalStyle postgres, extra_float_digits >= 1) in a
pyarrow ``string`` array, None standing for SQL NULL. The lake keeps rows in Parquet with the
Spark types of the table's base, so:

- ``spark_arrow_type`` / ``spark_schema_to_arrow`` give the Arrow type of a Spark type (the
  ``"type"`` value of a field of ``StructType.jsonValue()``) or of a whole Spark schema; every
  Arrow field, list element and map value they build is nullable.
- ``text_to_arrow`` converts one column of text values into an array of such an Arrow type.
  Scalars are converted with vectorised pyarrow compute kernels; arrays, composites and hstore
  values are parsed per value in Python into their element texts, and all element texts of a
  column are then converted together by the same scalar rules.

PostgreSQL's ``infinity``/``-infinity`` dates and timestamps become the ends of Spark's range
(9999-12-31 23:59:59.999999 and 0001-01-01 00:00:00), as the baseline does (``typemap.spark``);
dates and timestamps before the year 1 or after 9999 keep their exact value (``lake_eras``), as
the baseline's do; values Spark's types cannot hold (NaN in a decimal, too many digits) raise
``DestinationError`` naming the column and the value.
"""

# Hand-written on purpose: no maintained library parses PostgreSQL's text output of arrays,
# composites (row values) and hstore into Arrow. Drivers such as psycopg parse them per value
# into Python objects and need a live connection's type catalog, and pyarrow's casts only read
# ISO scalars. The grammar below follows PostgreSQL's array_out/array_in, record_out/record_in
# and hstore_out/hstore_in.

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_pgsync.destinations.lake_eras import (
    PLACEHOLDER_DATE,
    epoch_days,
    epoch_micros,
    far_years,
)
from airflow_provider_pgsync.errors import ConfigError, DestinationError

# ---- Spark types --------------------------------------------------------------------------------

_SIMPLE_SPARK_TYPES: dict[str, pa.DataType] = {
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "string": pa.string(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_SPARK_NAMES: dict[pa.DataType, str] = {arrow: name for name, arrow in _SIMPLE_SPARK_TYPES.items()}
_DECIMAL_TYPE = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_MAX_DECIMAL_PRECISION = 38


def spark_arrow_type(spark_type: str | dict[str, Any]) -> pa.DataType:
    """The Arrow type Spark's type corresponds to; ``spark_type`` is a field's ``"type"`` JSON value."""
    if isinstance(spark_type, str):
        return _simple_arrow_type(spark_type)
    if isinstance(spark_type, dict):
        return _complex_arrow_type(spark_type)
    raise _unknown_spark_type(spark_type)


def spark_schema_to_arrow(struct_json: dict[str, Any]) -> pa.Schema:
    """The Arrow schema of a Spark ``StructType.jsonValue()``; every field is nullable."""
    if not isinstance(struct_json, dict) or struct_json.get("type") != "struct":
        raise ConfigError(
            f"a Spark schema must be a StructType's JSON ({{'type': 'struct', 'fields': [...]}}), "
            f"got {_shorten(repr(struct_json))}"
        )
    return pa.schema(_arrow_fields(struct_json))


def _simple_arrow_type(name: str) -> pa.DataType:
    if name in _SIMPLE_SPARK_TYPES:
        return _SIMPLE_SPARK_TYPES[name]
    if name == "decimal":
        return pa.decimal128(10, 0)
    match = _DECIMAL_TYPE.fullmatch(name)
    if match is None:
        raise _unknown_spark_type(name)
    precision, scale = int(match[1]), int(match[2])
    if not 1 <= precision <= _MAX_DECIMAL_PRECISION or scale > precision:
        raise ConfigError(
            f"Spark type {name!r} is not a valid decimal: the lake needs 1 <= precision <= 38 and "
            "scale <= precision; fix the lake table's schema"
        )
    return pa.decimal128(precision, scale)


def _complex_arrow_type(spec: dict[str, Any]) -> pa.DataType:
    kind = spec.get("type")
    try:
        if kind == "array":
            return pa.list_(spark_arrow_type(spec["elementType"]))
        if kind == "map":
            return pa.map_(spark_arrow_type(spec["keyType"]), spark_arrow_type(spec["valueType"]))
        if kind == "struct":
            return pa.struct(_arrow_fields(spec))
    except KeyError as exc:
        raise ConfigError(
            f"Spark type {_shorten(repr(spec))} lacks the key {exc}; fix the lake table's schema"
        ) from None
    raise _unknown_spark_type(spec)


def _arrow_fields(struct_json: dict[str, Any]) -> list[pa.Field]:
    return [
        pa.field(field["name"], spark_arrow_type(field["type"]), nullable=True)
        for field in struct_json["fields"]
    ]


def _unknown_spark_type(spark_type: object) -> ConfigError:
    return ConfigError(
        f"Spark type {_shorten(repr(spark_type))} has no Arrow counterpart in the lake destination "
        "(it knows byte, short, integer, long, float, double, boolean, binary, string, date, "
        "timestamp, timestamp_ntz, decimal(p,s), array, map and struct); fix the lake table's schema"
    )


def _spark_name(target: pa.DataType) -> str:
    if pa.types.is_decimal(target):
        return f"decimal({target.precision},{target.scale})"
    return _SPARK_NAMES.get(target, str(target))


# ---- errors -------------------------------------------------------------------------------------

_SHOWN_CHARS = 60
_TYPE_REMEDY = (
    "the lake table's type no longer matches the source column: rebaseline the table "
    "(after fixing the source column if its values are wrong)"
)
_HEX_REMEDY = "set bytea_output = 'hex' for the source database (the default) and rebaseline the table"


def _shorten(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _value_error(what: str, value: str, problem: str, remedy: str) -> DestinationError:
    return DestinationError(f"{what}: value {_shorten(value)!r} {problem}; {remedy}")


def _raise_first(text: pa.Array, bad: pa.Array, what: str, problem: str, remedy: str) -> None:
    """Raise for the first value where ``bad`` is true, if any."""
    if pc.any(bad).as_py():
        index = pc.index(bad, True).as_py()
        raise _value_error(what, text[index].as_py(), problem, remedy)


def _first_failure(text: pa.Array, convert: Callable[[pa.Array], pa.Array]) -> int:
    """The index of the first value ``convert`` rejects, by bisection (about two passes of work)."""
    start, stop = 0, len(text)
    while stop - start > 1:
        middle = (start + stop) // 2
        try:
            convert(text.slice(start, middle - start))
        except ValueError:  # pa.ArrowInvalid is one
            stop = middle
        else:
            start = middle
    return start


def _vectorised(
    text: pa.Array, convert: Callable[[pa.Array], pa.Array], what: str, problem: str, remedy: str
) -> pa.Array:
    """``convert(text)``; when it rejects a value, a DestinationError naming the first such value."""
    try:
        return convert(text)
    except ValueError:  # pa.ArrowInvalid is one
        index = _first_failure(text, convert)
        raise _value_error(what, text[index].as_py(), problem, remedy) from None


# ---- text to Arrow ------------------------------------------------------------------------------


def text_to_arrow(values: pa.Array | pa.ChunkedArray, target: pa.DataType, *, what: str) -> pa.Array:
    """PostgreSQL text output values (None is NULL) as an array of ``target``.

    ``what`` names the column in errors, e.g. "column 'price' of table public.orders". A value
    ``target`` cannot hold raises ``DestinationError``; nulls stay null.
    """
    text = _string_array(values, what)
    if _is_nested(target):
        return _build(text.to_pylist(), target, what)
    return _convert_scalars(text, target, what)


def _string_array(values: pa.Array | pa.ChunkedArray, what: str) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], values.type)
    kind = values.type
    if pa.types.is_string(kind):
        return values
    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind) or pa.types.is_null(kind):
        return values.cast(pa.string())
    raise ConfigError(f"{what}: text values must be a string array, got {values.type}")


def _is_nested(target: pa.DataType) -> bool:
    return pa.types.is_list(target) or pa.types.is_struct(target) or pa.types.is_map(target)


def _convert_scalars(text: pa.Array, target: pa.DataType, what: str) -> pa.Array:
    if pa.types.is_string(target):
        return text
    if len(text) == 0:
        return pa.array([], type=target)
    if pa.types.is_signed_integer(target) or target in (pa.float32(), pa.float64()):
        return _cast(text, target, what)
    if pa.types.is_boolean(target):
        return _to_bool(text, what)
    if pa.types.is_binary(target):
        return _to_binary(text, what)
    if pa.types.is_decimal128(target):
        return _to_decimal(text, target, what)
    if pa.types.is_date32(target):
        return _to_date(text, what)
    if pa.types.is_timestamp(target) and target.unit == "us":
        return _to_timestamp(text, target, what)
    raise ConfigError(f"{what}: no conversion from PostgreSQL text to Arrow type {target}")


def _cast(text: pa.Array, target: pa.DataType, what: str) -> pa.Array:
    problem = f"cannot be read as Spark's {_spark_name(target)}"
    return _vectorised(text, lambda part: pc.cast(part, target), what, problem, _TYPE_REMEDY)


def _replace_exact(text: pa.Array, replacements: Mapping[str, str]) -> pa.Array:
    for old, new in replacements.items():
        text = pc.if_else(pc.equal(text, old), new, text)
    return text


def _to_bool(text: pa.Array, what: str) -> pa.Array:
    known = pc.is_in(text, value_set=pa.array(["t", "f"]))
    bad = pc.and_(text.is_valid(), pc.invert(known))
    _raise_first(text, bad, what, "is not a PostgreSQL boolean (t or f)", _TYPE_REMEDY)
    return pc.equal(text, "t")


def _to_decimal(text: pa.Array, target: pa.DataType, what: str) -> pa.Array:
    problem = f"does not fit: Spark's {_spark_name(target)} cannot hold it"
    remedy = (
        "keep the column as a string in the lake (an unconstrained numeric is one) or change the "
        "source column's type to a numeric(p,s) that fits, then rebaseline the table"
    )
    special = pc.is_in(text, value_set=pa.array(["NaN", "Infinity", "-Infinity"]))
    _raise_first(text, special, what, problem, remedy)
    return _vectorised(text, lambda part: pc.cast(part, target), what, problem, remedy)


# ---- bytea --------------------------------------------------------------------------------------

_NOT_HEX = 255


def _hex_nibbles() -> np.ndarray:
    """The value of each hex digit by its byte, ``_NOT_HEX`` for every other byte."""
    table = np.full(256, _NOT_HEX, dtype=np.uint8)
    for digits, first in (("0123456789", 0), ("abcdef", 10), ("ABCDEF", 10)):
        table[[ord(digit) for digit in digits]] = np.arange(first, first + len(digits), dtype=np.uint8)
    return table


_HEX_NIBBLES = _hex_nibbles()


def _to_binary(text: pa.Array, what: str) -> pa.Array:
    bad = pc.and_(text.is_valid(), pc.invert(pc.starts_with(text, "\\x")))
    problem = "is not bytea hex output (\\x followed by pairs of hex digits)"
    _raise_first(text, bad, what, problem, _HEX_REMEDY)
    return _vectorised(text, _decode_hex, what, problem, _HEX_REMEDY)


def _decode_hex(text: pa.Array) -> pa.Array:
    """``\\x0aff`` texts as bytes, decoding the digits of all values at once."""
    digits = pc.utf8_slice_codeunits(pc.fill_null(text, "\\x"), 2)  # nulls become ""
    buffers = digits.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[digits.offset : digits.offset + len(digits) + 1]
    if np.any(np.diff(offsets) % 2):
        raise ValueError("odd number of hex digits")
    chars = np.frombuffer(buffers[2] or b"", dtype=np.uint8)[offsets[0] : offsets[-1]]
    nibbles = _HEX_NIBBLES[chars]
    if np.any(nibbles == _NOT_HEX):
        raise ValueError("not a hex digit")
    data = (nibbles[0::2] << 4) | nibbles[1::2]
    byte_offsets = ((offsets - offsets[0]) // 2).astype(np.int32)
    decoded = pa.Array.from_buffers(
        pa.binary(), len(digits), [None, pa.py_buffer(byte_offsets), pa.py_buffer(data)]
    )
    return pc.if_else(text.is_valid(), decoded, pa.scalar(None, pa.binary()))


# ---- dates and timestamps -----------------------------------------------------------------------

_LOCAL_TIMESTAMP = pa.timestamp("us")
_LAST_TIMESTAMP = "9999-12-31 23:59:59.999999"
_FIRST_TIMESTAMP = "0001-01-01 00:00:00"
_WITH_OFFSET = r"^(?P<local>\d+-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)(?P<offset>[+-]\d\d(?::\d\d){0,2})$"


def _to_date(text: pa.Array, what: str) -> pa.Array:
    text = _replace_exact(text, {"infinity": "9999-12-31", "-infinity": "0001-01-01"})
    return _with_far_years(
        text, pa.date32(), what, epoch_days, PLACEHOLDER_DATE, lambda near: _cast(near, pa.date32(), what)
    )


def _to_timestamp(text: pa.Array, target: pa.DataType, what: str) -> pa.Array:
    if target.tz is None:
        text = _replace_exact(text, {"infinity": _LAST_TIMESTAMP, "-infinity": _FIRST_TIMESTAMP})
        return _with_far_years(
            text,
            target,
            what,
            lambda value: epoch_micros(value, with_offset=False),
            PLACEHOLDER_DATE + " 00:00:00",
            lambda near: _cast(near, target, what),
        )
    text = _replace_exact(text, {"infinity": _LAST_TIMESTAMP + "+00", "-infinity": _FIRST_TIMESTAMP + "+00"})
    problem = "cannot be read as a PostgreSQL timestamp with time zone"

    def instants(near: pa.Array) -> pa.Array:
        return pc.cast(_vectorised(near, _instants, what, problem, _TYPE_REMEDY), target)

    return _with_far_years(
        text,
        target,
        what,
        lambda value: epoch_micros(value, with_offset=True),
        PLACEHOLDER_DATE + " 00:00:00+00",
        instants,
    )


def _with_far_years(
    text: pa.Array,
    target: pa.DataType,
    what: str,
    read_far: Callable[[str], int],
    placeholder: str,
    convert: Callable[[pa.Array], pa.Array],
) -> pa.Array:
    """``convert(text)``, with values before the year 1 or after 9999 read one by one by
    ``read_far`` (days or microseconds since 1970), as the baseline keeps them (``lake_eras``)."""
    far = far_years(text)
    if not pc.any(far).as_py():
        return convert(text)
    near = convert(pc.if_else(far, placeholder, text))
    values: list[int | None] = []
    for value, is_far in zip(text.to_pylist(), far.to_pylist(), strict=True):
        try:
            values.append(read_far(value) if is_far else None)
        except ValueError:
            raise _value_error(
                what, value, f"cannot be read as Spark's {_spark_name(target)}", _TYPE_REMEDY
            ) from None
    storage = pa.int32() if pa.types.is_date32(target) else pa.int64()
    return pc.if_else(far, pa.array(values, storage).cast(target), near)


def _instants(text: pa.Array) -> pa.Array:
    """``2024-01-01 10:00:00.5+05:30`` texts as UTC instants (a timestamp without time zone)."""
    parts = pc.extract_regex(text, _WITH_OFFSET)
    if pc.any(pc.and_(text.is_valid(), parts.is_null())).as_py():
        raise ValueError("not a timestamp with an offset")
    local = pc.cast(pc.struct_field(parts, "local"), _LOCAL_TIMESTAMP)
    offset = pc.struct_field(parts, "offset")
    hh_mm_ss = pc.utf8_slice_codeunits(pc.binary_join_element_wise(offset, ":00:00", ""), 0, 9)
    seconds = pc.add(
        pc.add(
            pc.multiply(_int_slice(hh_mm_ss, 1, 3), 3600),
            pc.multiply(_int_slice(hh_mm_ss, 4, 6), 60),
        ),
        _int_slice(hh_mm_ss, 7, 9),
    )
    east = pc.if_else(pc.starts_with(offset, "-"), pc.negate(seconds), seconds)
    return pc.subtract(local, pc.cast(pc.multiply(east, 1_000_000), pa.duration("us")))


def _int_slice(text: pa.Array, start: int, stop: int) -> pa.Array:
    return pc.cast(pc.utf8_slice_codeunits(text, start, stop), pa.int64())


# ---- arrays, composites and hstore --------------------------------------------------------------


def _build(items: Sequence[Any], target: pa.DataType, what: str) -> pa.Array:
    """An array of ``target`` from texts (str), already split sub-arrays (list) or None."""
    if pa.types.is_list(target):
        return _build_lists(items, target, what)
    if pa.types.is_struct(target):
        return _build_structs(items, target, what)
    if pa.types.is_map(target):
        return _build_maps(items, target, what)
    return _convert_scalars(pa.array(items, pa.string()), target, what)


def _build_lists(items: Sequence[Any], target: pa.DataType, what: str) -> pa.Array:
    depth = _list_depth(target)
    # a list item is a sub-array its parent's multi-dimensional literal already split
    rows = [
        item if item is None or isinstance(item, list) else _parse_array(item, depth, what) for item in items
    ]
    offsets, elements = _flatten(rows)
    children = _build(elements, target.value_type, what)
    return pa.ListArray.from_arrays(offsets, children, type=target, mask=_null_mask(rows))


def _build_structs(items: Sequence[Any], target: pa.DataType, what: str) -> pa.Array:
    count = target.num_fields
    rows = [None if item is None else _parse_composite(item, count, what) for item in items]
    children = [
        _build(
            [None if row is None else row[index] for row in rows],
            target.field(index).type,
            f"{what}, field {target.field(index).name!r}",
        )
        for index in range(count)
    ]
    return pa.StructArray.from_arrays(children, fields=list(target), mask=_null_mask(rows))


def _build_maps(items: Sequence[Any], target: pa.DataType, what: str) -> pa.Array:
    rows = [None if item is None else _parse_hstore(item, what) for item in items]
    offsets, pairs = _flatten(rows)
    keys = _build([key for key, _ in pairs], target.key_type, what)
    values = _build([value for _, value in pairs], target.item_type, what)
    return pa.MapArray.from_arrays(offsets, keys, values, type=target, mask=_null_mask(rows))


def _list_depth(target: pa.DataType) -> int:
    """How many list levels ``target`` nests directly: a PostgreSQL array's dimensions."""
    depth = 0
    while pa.types.is_list(target):
        depth += 1
        target = target.value_type
    return depth


def _flatten(rows: Sequence[Sequence[Any] | None]) -> tuple[pa.Array, list[Any]]:
    offsets = [0]
    elements: list[Any] = []
    for row in rows:
        if row is not None:
            elements.extend(row)
        offsets.append(len(elements))
    return pa.array(offsets, pa.int32()), elements


def _null_mask(rows: Sequence[object]) -> pa.Array:
    return pa.array([row is None for row in rows], pa.bool_())


class _Literal:
    """One array, composite or hstore literal being parsed; ``fail`` names the column and value."""

    def __init__(self, text: str, what: str, kind: str) -> None:
        self.text = text
        self.what = what
        self.kind = kind

    def fail(self, problem: str) -> NoReturn:
        raise _value_error(
            self.what, self.text, f"is not a valid PostgreSQL {self.kind}: {problem}", _TYPE_REMEDY
        )


_SPACE = " \t\n\r\v\f"  # PostgreSQL's scanner_isspace
_ESCAPE = re.compile(r"\\(.)", re.S)


def _unescape(text: str) -> str:
    return _ESCAPE.sub(r"\1", text) if "\\" in text else text


# arrays: array_out quotes elements holding special characters, with \" and \\ inside quotes

_WS = r"[ \t\n\r\v\f]*+"  # possessive quantifiers (*+, ++) keep every pattern linear
_BOUND = r"-?\d++" + _WS
_DIMENSIONS = re.compile(rf"{_WS}(?:\[{_WS}(?:{_BOUND}:{_WS})?{_BOUND}\]{_WS})+=")
_QUOTED_BODY = r'(?:[^"\\]|\\.)*+'
_BARE = r'(?:[^{}",\\]|\\.)++'  # may end in blanks: they are stripped
_ARRAY_TOKEN = re.compile(f'{_WS}(?:([{{}},])|"({_QUOTED_BODY})"|({_BARE}))', re.S)
_ARRAY_TOKENS = re.compile(f'(?:{_WS}(?:[{{}},]|"{_QUOTED_BODY}"|{_BARE}))*+{_WS}', re.S)
_ELEMENT = f'{_WS}(?:"{_QUOTED_BODY}"{_WS}|{_BARE})'
_ELEMENT_PARTS = re.compile(f'{_WS}(?:"({_QUOTED_BODY})"|({_BARE}))', re.S)
_FLAT_ARRAY = re.compile(rf"{_WS}\{{(?:{_ELEMENT}(?:,{_ELEMENT})*+)?{_WS}\}}{_WS}", re.S)
_OPENED, _NEED_ELEMENT, _AFTER_ELEMENT = range(3)


def _parse_array(text: str, depth: int, what: str) -> list[Any]:
    """An array literal as nested lists ``depth`` deep of element texts (None for NULL)."""
    if depth == 1 and _FLAT_ARRAY.fullmatch(text):  # most arrays: one regex pass finds the elements
        return [_array_element(quoted, bare) for quoted, bare in _ELEMENT_PARTS.findall(text)]
    literal = _Literal(text, what, "array")
    decoration = _DIMENSIONS.match(text)  # [1:2][1:1]= before the braces: bounds Spark has no use for
    start = decoration.end() if decoration else 0
    if not _ARRAY_TOKENS.fullmatch(text, start):
        literal.fail("it has an unterminated quote or a stray backslash")
    return _nest(_ARRAY_TOKEN.findall(text, start), depth, literal)


def _nest(tokens: list[tuple[str, str, str]], depth: int, literal: _Literal) -> list[Any]:
    """The (punctuation, quoted, bare) tokens of an array literal as nested lists."""
    if not tokens or tokens[0][0] != "{":
        literal.fail("it must start with '{'")
    root: list[Any] = []
    open_arrays = [root]  # the innermost takes the next element
    state = _OPENED
    for punct, quoted, bare in tokens[1:]:
        if not open_arrays:
            literal.fail("text follows the closing '}'")
        if punct == "}":
            if state == _NEED_ELEMENT:
                literal.fail("an element is missing")
            open_arrays.pop()
            state = _AFTER_ELEMENT
        elif punct == ",":
            if state != _AFTER_ELEMENT:
                literal.fail("an element is missing")
            state = _NEED_ELEMENT
        elif state == _AFTER_ELEMENT:
            literal.fail("an element is not followed by ',' or '}'")
        elif (punct == "{") != (len(open_arrays) < depth):
            literal.fail(f"its dimensions differ from the lake column's {depth}-dimensional arrays")
        elif punct == "{":
            sub_array: list[Any] = []
            open_arrays[-1].append(sub_array)
            open_arrays.append(sub_array)
            state = _OPENED
        else:
            open_arrays[-1].append(_array_element(quoted, bare))
            state = _AFTER_ELEMENT
    if open_arrays:
        literal.fail("it lacks a closing '}'")
    return root


def _array_element(quoted: str, bare: str) -> str | None:
    if not bare:  # a bare element is never empty: this one was quoted
        return _unescape(quoted)
    bare = bare.rstrip(_SPACE)
    return None if bare.upper() == "NULL" else _unescape(bare)


# composites: record_out quotes fields holding special characters, doubling " and \ inside

_COMPOSITE_FIELD = re.compile(r'(?:[^",)\\]|\\.|"(?:[^"\\]|\\.|"")*+")*+', re.S)
_COMPOSITE_PART = re.compile(r'"((?:[^"\\]|\\.|"")*+)"|\\(.)', re.S)
_QUOTED_COMPOSITE_CHAR = re.compile(r'""|\\(.)', re.S)


def _parse_composite(text: str, count: int, what: str) -> tuple[str | None, ...]:
    """A composite literal ``(1,"a b",,t)`` as its ``count`` field texts (None for NULL)."""
    literal = _Literal(text, what, "composite value")
    body = text.strip(_SPACE)
    if not (body.startswith("(") and body.endswith(")")):
        literal.fail("it must be enclosed in parentheses")
    body = body[1:-1]
    if '"' in body or "\\" in body or ")" in body:
        fields = _composite_fields(body, literal)
    else:  # no quotes or escapes (most values): the commas separate the fields
        fields = [field or None for field in body.split(",")]
    if len(fields) != count:
        literal.fail(f"it has {len(fields)} fields where the lake column's struct has {count}")
    return tuple(fields)


def _composite_fields(body: str, literal: _Literal) -> list[str | None]:
    fields: list[str | None] = []
    position = 0
    while True:
        match = _COMPOSITE_FIELD.match(body, position)
        assert match is not None  # the pattern matches the empty string
        raw = match[0]
        fields.append(_decode_composite_field(raw) if raw else None)
        position = match.end()
        if position == len(body):
            return fields
        if body[position] != ",":
            literal.fail(f"unexpected {body[position]!r} at character {position + 2}")
        position += 1


def _decode_composite_field(raw: str) -> str:
    return _COMPOSITE_PART.sub(_decode_composite_part, raw)


def _decode_composite_part(part: re.Match[str]) -> str:
    if part[1] is None:  # a backslash-escaped character outside quotes
        return part[2]
    return _QUOTED_COMPOSITE_CHAR.sub(lambda inner: inner[1] or '"', part[1])  # "" or \x inside quotes


# hstore: hstore_out writes "key"=>"value" (or NULL) pairs joined by ", "

_HSTORE_KEY = rf'(?:"(?P<qkey>{_QUOTED_BODY})"|(?P<key>(?:[^ \t\n\r\v\f=,"\\]|\\.)++))'
_HSTORE_VALUE = rf'(?:"(?P<qvalue>{_QUOTED_BODY})"|(?P<value>(?:[^ \t\n\r\v\f,"\\]|\\.)++))'
_HSTORE_PAIR = re.compile(rf"{_WS}{_HSTORE_KEY}{_WS}=>{_WS}{_HSTORE_VALUE}{_WS}(?:,|\Z)", re.S)


def _parse_hstore(text: str, what: str) -> list[tuple[str, str | None]]:
    """An hstore literal as (key, value) pairs, value None for NULL."""
    literal = _Literal(text, what, "hstore value")
    pairs: list[tuple[str, str | None]] = []
    position = 0
    end = len(text.rstrip(_SPACE))
    while position < end:
        match = _HSTORE_PAIR.match(text, position)
        if match is None:
            literal.fail(f'expected "key"=>"value" at character {position + 1}')
        key = match["qkey"] if match["qkey"] is not None else match["key"]
        pairs.append((_unescape(key), _hstore_value(match)))
        position = match.end()
    return pairs


def _hstore_value(match: re.Match[str]) -> str | None:
    if match["qvalue"] is not None:
        return _unescape(match["qvalue"])
    bare = match["value"]
    return None if bare.upper() == "NULL" else _unescape(bare)
