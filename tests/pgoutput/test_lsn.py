"""Tests of the LSN value type."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pgoutput.lsn import LSN, ZERO


def test_parse_and_print() -> None:
    lsn = LSN.parse("16/B374D848")
    assert lsn.value == 0x16_B374D848
    assert str(lsn) == "16/B374D848"
    assert repr(lsn) == "LSN('16/B374D848')"
    assert int(lsn) == 0x16_B374D848


def test_parse_accepts_lowercase_short_and_padded_text() -> None:
    assert LSN.parse("0/0") == ZERO
    assert LSN.parse(" a/1b ").value == (0xA << 32) | 0x1B
    assert str(LSN.parse("0/0016B374")) == "0/16B374"
    assert str(LSN.parse("FFFFFFFF/FFFFFFFF")) == "FFFFFFFF/FFFFFFFF"


@pytest.mark.parametrize("text", ["", "16B374D848", "0/", "/0", "G/0", "1/123456789", "123456789/1", "1/2/3"])
def test_parse_rejects_bad_text(text: str) -> None:
    with pytest.raises(ConfigError, match="is not an LSN"):
        LSN.parse(text)


@pytest.mark.parametrize("value", [-1, 2**64])
def test_rejects_out_of_range_values(value: int) -> None:
    with pytest.raises(ConfigError, match=r"0\.\.2\^64-1"):
        LSN(value)


def test_order_and_distance() -> None:
    low, high = LSN.parse("0/FFFFFFFF"), LSN.parse("1/0")
    assert low < high
    assert high - low == 1
    assert low - high == -1
    assert sorted([high, low]) == [low, high]
    assert {LSN(5), LSN(5)} == {LSN(5)}


@settings(max_examples=300, derandomize=True, database=None)
@given(st.integers(0, 2**64 - 1))
def test_text_round_trip(value: int) -> None:
    assert LSN.parse(str(LSN(value))) == LSN(value)
