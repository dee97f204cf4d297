"""``_strings`` (values cut out of the payloads by Arrow's take) against a plain slice per value."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_pgsync.capture import tuple_fields as c

VALUE = st.one_of(st.none(), st.just("u"), st.text(max_size=12))


@settings(deadline=None)  # a busy machine is not a failure
@given(st.lists(st.lists(VALUE, min_size=4, max_size=4), min_size=1, max_size=4), st.binary(max_size=3))
def test_strings_equal_a_slice_per_value(table: list[list[str | None]], gap: bytes) -> None:
    """Columns of text, NULL and unchanged values laid out row by row with junk between them."""
    ncols, n = len(table), len(table[0])
    buf = bytearray(b"\xff")
    kinds = np.full((ncols, n), c.NULL, np.uint8)
    starts = np.zeros((ncols, n), np.int64)
    lengths = np.zeros((ncols, n), np.int64)
    for row in range(n):  # values in buffer order by row, as in the messages
        for col in range(ncols):
            value = table[col][row]
            if value is None or value == "u":
                kinds[col, row] = c.NULL if value is None else c.UNCHANGED_VALUE
                continue
            data = value.encode()
            kinds[col, row] = c.TEXT
            starts[col, row], lengths[col, row] = len(buf), len(data)
            buf += data + gap + b"\xfe"  # bytes that are no UTF-8 sit between the values
    got = c.strings(np.frombuffer(bytes(buf), np.uint8), kinds, starts, lengths)
    expected = [
        pa.array([v if v is not None and v != "u" else None for v in column], pa.string()) for column in table
    ]
    assert [g.to_pylist() for g in got] == [e.to_pylist() for e in expected]


def test_invalid_utf8_falls_back_to_the_precise_decoder() -> None:
    buf = np.frombuffer(b"ok\xc3\x28", np.uint8)
    kinds = np.full((1, 2), c.TEXT, np.uint8)
    with pytest.raises(c.Fallback, match="UTF-8"):
        c.strings(buf, kinds, np.array([[0, 2]]), np.array([[2, 2]]))


def test_overlapping_values_fall_back() -> None:
    buf = np.frombuffer(b"abcdef", np.uint8)
    kinds = np.full((1, 2), c.TEXT, np.uint8)
    with pytest.raises(c.Fallback):
        c.strings(buf, kinds, np.array([[0, 2]]), np.array([[4, 2]]))
