"""Decoding ``numeric`` type modifiers (PostgreSQL 15 allows negative scale and scale > precision)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_pgsync.typemap.pgtypes import PgType, numeric_precision_scale

# atttypmod values read from a PostgreSQL 15 server for the declared types
SERVER_TYPMODS = [
    ("numeric(10,2)", 655366, (10, 2)),
    ("numeric(5,-2)", 329730, (5, -2)),
    ("numeric(3,5)", 196617, (3, 5)),
    ("numeric(1000,-1000)", 65537052, (1000, -1000)),
    ("numeric(1000,1000)", 65537004, (1000, 1000)),
    ("numeric(38,0)", 2490372, (38, 0)),
    ("numeric(1,0)", 65540, (1, 0)),
]


def make_typmod(precision: int, scale: int) -> int:
    """PostgreSQL's ``make_numeric_typmod``."""
    return ((precision << 16) | (scale & 0x7FF)) + 4


@pytest.mark.parametrize(
    ("declared", "typmod", "expected"), SERVER_TYPMODS, ids=[d for d, _, _ in SERVER_TYPMODS]
)
def test_server_typmods(declared: str, typmod: int, expected: tuple[int, int]) -> None:
    assert numeric_precision_scale(typmod) == expected


@pytest.mark.parametrize("typmod", [-1, 0, 1, 2, 3])
def test_unconstrained(typmod: int) -> None:
    assert numeric_precision_scale(typmod) is None


def test_scale_sign_boundary() -> None:
    # 11-bit two's complement: 1023 is the largest positive scale, 1024 reads as -1024
    assert numeric_precision_scale(make_typmod(10, 1023)) == (10, 1023)
    assert numeric_precision_scale(make_typmod(10, -1)) == (10, -1)
    assert numeric_precision_scale(make_typmod(10, -1024)) == (10, -1024)


@given(st.integers(1, 1000), st.integers(-1000, 1000))
def test_round_trip(precision: int, scale: int) -> None:
    assert numeric_precision_scale(make_typmod(precision, scale)) == (precision, scale)


def test_pgtype_defaults_and_frozen() -> None:
    t = PgType("integer", "int4")
    assert (t.kind, t.element, t.ndims, t.fields, t.precision, t.scale) == ("b", None, 0, (), None, None)
    with pytest.raises(AttributeError):
        t.kind = "a"  # type: ignore[misc]
    assert PgType("integer", "int4") == t
