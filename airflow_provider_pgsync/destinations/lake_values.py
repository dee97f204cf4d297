"""PostgreSQL's text output of column values turned into Arrow arrays of the lake's Spark types.

Pure logic for the lake destination. Change data capture hands over each value as PostgreSQL's
text output (pgoutput: DateStyle ISO, IntervalStyle postgres, extra_float_digits >= 1) in a
pyarrow ``string`` array, None standing for SQL NULL. The lake keeps rows in Parquet with the
Spark types of the table's base, so:

- ``lake_arrow_types.py`` gives the Arrow type of a Spark type or of a whole Spark schema.
- ``text_to_arrow`` converts one column of text values into an array of such an Arrow type.
  Scalars are converted with vectorised pyarrow compute kernels; arrays, composites and hstore
  values are parsed per value in Python into their element texts, and all element texts of a
  column are then converted together by the same scalar rules.

PostgreSQL's ``infinity``/``-infinity`` dates and timestamps become the ends of Spark's range
(9999-12-31 23:59:59.999999 and 0001-01-01 00:00:00), as the baseline does (``typemap.spark``);
dates and timestamps before the year 1 or after 9999 keep their exact value (``lake_eras``), as
the baseline's do; values Spark's types cannot hold (NaN in a decimal, too many digits) raise
``DestinationError`` naming the column and the value. An array the lake cannot hold exactly
(other dimensions than the column's, a lower bound other than 1) raises ``DestinationError``
with the baseline's refusal (``typemap.spark.array_refusal``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_pgsync.destinations.lake_arrow_types import spark_type_name
from airflow_provider_pgsync.destinations.lake_eras import (
    PLACEHOLDER_DATE,
    epoch_days,
    epoch_micros,
    far_years,
)
from airflow_provider_pgsync.destinations.pg_literals import (
    ArrayShapeError,
    LiteralError,
    parse_array,
    parse_composite,
    parse_hstore,
)
from airflow_provider_pgsync.errors import ConfigError, DestinationError
from airflow_provider_pgsync.typemap.spark import array_refusal

_Parsed = TypeVar("_Parsed")

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
    problem = f"cannot be read as Spark's {spark_type_name(target)}"
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
    problem = f"does not fit: Spark's {spark_type_name(target)} cannot hold it"
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
                what, value, f"cannot be read as Spark's {spark_type_name(target)}", _TYPE_REMEDY
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
        item if item is None or isinstance(item, list) else _parsed(parse_array, what, item, depth)
        for item in items
    ]
    offsets, elements = _flatten(rows)
    children = _build(elements, target.value_type, what)
    return pa.ListArray.from_arrays(offsets, children, type=target, mask=_null_mask(rows))


def _build_structs(items: Sequence[Any], target: pa.DataType, what: str) -> pa.Array:
    count = target.num_fields
    rows = [None if item is None else _parsed(parse_composite, what, item, count) for item in items]
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
    rows = [None if item is None else _parsed(parse_hstore, what, item) for item in items]
    offsets, pairs = _flatten(rows)
    keys = _build([key for key, _ in pairs], target.key_type, what)
    values = _build([value for _, value in pairs], target.item_type, what)
    return pa.MapArray.from_arrays(offsets, keys, values, type=target, mask=_null_mask(rows))


def _parsed(parse: Callable[..., _Parsed], what: str, text: str, *args: int) -> _Parsed:
    """``parse(text, *args)``; a text that is not such a literal, or an array the lake cannot hold
    exactly, fails naming ``what`` (the latter as the baseline refuses it)."""
    try:
        return parse(text, *args)
    except ArrayShapeError as exc:
        raise DestinationError(array_refusal(what, exc.dims, exc.declared)) from None
    except LiteralError as exc:
        raise _value_error(what, text, f"is not a valid {exc}", _TYPE_REMEDY) from None


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
