"""Spark's hash() in NumPy: values Spark 4.2 itself computed (``SELECT hash(...)``), NULLs, the
seed chained over several columns, and pmod buckets. The comparison with Spark's own hash()
over many random values of every supported type is a step of ``tests/spark/compact_session.py``."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pytest

from airflow_provider_pgsync.destinations.spark_hash import spark_bucket, spark_hash, supported

UTC = datetime.UTC
STAMP = datetime.datetime(2024, 2, 29, 12, 34, 56, 789012, tzinfo=UTC)
# (Arrow array of one value, what Spark's hash() of that value is)
SPARK_VALUES = [
    (pa.array([-1], pa.int32()), -1604776387),
    (pa.array([2147483647], pa.int32()), 133916647),
    (pa.array([5], pa.int64()), 1607884268),
    (pa.array([-(2**63)], pa.int64()), -853646085),
    (pa.array([7], pa.int16()), 1079293707),
    (pa.array([True]), -559580957),
    (pa.array([False]), 933211791),
    (pa.array([datetime.date(2024, 2, 29)], pa.date32()), 653915859),
    (pa.array([STAMP], pa.timestamp("us", tz="UTC")), -1367554535),
    (pa.array([decimal.Decimal("12345.6789")], pa.decimal128(18, 4)), 198011545),
    (pa.array([""], pa.string()), 142593372),
    (pa.array(["a"], pa.string()), 1485273170),
    (pa.array(["abcd"], pa.large_string()), -396302900),
    (pa.array(["abcdefg"], pa.string()), 2132013596),
    (pa.array(["héllo"], pa.string()), 1212979866),
    (pa.array([b"\x00\xff\x80"], pa.binary()), -2052482636),
    (pa.array([None], pa.string()), 42),
]


@pytest.mark.parametrize(("array", "expected"), SPARK_VALUES, ids=lambda v: str(v)[:40])
def test_one_column_hashes_as_spark_does(array: pa.Array, expected: int) -> None:
    assert supported(array.type)
    assert spark_hash([array]).tolist() == [expected]


def test_columns_chain_the_seed_and_a_null_leaves_it() -> None:
    long, text = pa.array([5, None], pa.int64()), pa.array(["x", "x"])
    assert spark_hash([long, text]).tolist() == [-1684931965, -80340190]


def test_values_among_others_sliced_and_chunked_hash_alike() -> None:
    values = ["", "a", "abcd", "abcdefg", "héllo", None]
    expected = spark_hash([pa.array(values)]).tolist()
    chunked = pa.chunked_array([pa.array(values[:2]), pa.array(values[2:])])
    assert spark_hash([chunked]).tolist() == expected
    assert spark_hash([pa.array(["zz", *values])[1:]]).tolist() == expected
    assert expected[3] == 2132013596


def test_bucket_is_pmod() -> None:
    assert spark_bucket([pa.array(["abcdefg"])], 8).tolist() == [4]  # pmod(hash('abcdefg'), 8)
    negative = spark_bucket([pa.array([-1], pa.int32())], 7)  # hash -1604776387
    assert negative.tolist() == [-1604776387 % 7]
    with pytest.raises(ValueError, match="positive"):
        spark_bucket([pa.array([1])], 0)


def test_unsupported_types_are_said_so() -> None:
    for arrow_type in (pa.float64(), pa.decimal128(20, 2), pa.list_(pa.int32()), pa.timestamp("ns")):
        assert not supported(arrow_type)
    with pytest.raises(TypeError, match="does not hash"):
        spark_hash([pa.array([1.5])])
