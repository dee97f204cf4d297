"""Spark SQL's ``hash()`` (Murmur3 x86 32-bit, seed 42) of Arrow key columns, vectorised with NumPy.

A keyed lake table's base is laid out by ``pmod(hash(keys), buckets)`` computed by Spark
(``spark/lake_buckets.py``). Apply writes lake segments without Spark, in the Airflow worker;
giving each record the bucket Spark would give its key lets a compaction merge each bucket with
the records of that bucket alone, with no shuffle of the changes. No maintained Python library
computes Spark's variant of Murmur3 (its ``hashUnsafeBytes`` mixes the bytes past the last
whole 4-byte word one by one, unlike the reference algorithm) over whole columns, so it is
written here, after Spark's ``Murmur3_x86_32`` and ``HashExpression``; the tests compare it
with Spark's own ``hash()`` on the same values.

Supported Arrow types (as the lake holds keys): bool, int8/16/32, date32 (as Spark's int),
int64, timestamp[us] (as Spark's long), decimal128 of precision up to 18 (its unscaled long),
string and binary (their bytes). ``supported`` tells whether a key type is; a NULL leaves the
running hash as it was, as in Spark.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEED = 42
_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)
_MAX_LONG_DIGITS = 18  # Spark hashes a decimal of this precision or less by its unscaled long


def supported(arrow_type: pa.DataType) -> bool:
    """Whether ``spark_hash`` hashes columns of ``arrow_type`` as Spark does."""
    t = arrow_type
    if pa.types.is_decimal128(t):
        return bool(t.precision <= _MAX_LONG_DIGITS)
    if pa.types.is_timestamp(t):
        return bool(t.unit == "us")
    return bool(
        pa.types.is_boolean(t)
        or pa.types.is_int8(t)
        or pa.types.is_int16(t)
        or pa.types.is_int32(t)
        or pa.types.is_int64(t)
        or pa.types.is_date32(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def spark_hash(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """Spark's ``hash(c1, c2, ...)`` of each row of ``columns`` (equal lengths), as int32."""
    if not columns:
        raise ValueError("spark_hash needs at least one column")
    count = len(columns[0])
    h = np.full(count, SEED, dtype=np.uint32)
    with np.errstate(over="ignore"):
        for column in columns:
            array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
            if len(array) != count:
                raise ValueError("spark_hash: columns of different lengths")
            hashed = _hash_column(array, h)
            if array.null_count:
                valid = np.asarray(pc.is_valid(array).to_numpy(zero_copy_only=False), dtype=bool)
                hashed = np.where(valid, hashed, h)
            h = hashed
    return h.view(np.int32)


def spark_bucket(columns: Sequence[pa.Array | pa.ChunkedArray], buckets: int) -> np.ndarray:
    """``pmod(hash(columns), buckets)`` of each row, as int32 (Spark's bucket of a key)."""
    if buckets <= 0:
        raise ValueError(f"buckets must be positive, not {buckets}")
    return np.mod(spark_hash(columns).astype(np.int64), buckets).astype(np.int32)


def _hash_column(array: pa.Array, seed: np.ndarray) -> np.ndarray:
    t = array.type
    if pa.types.is_boolean(t):
        ints = np.asarray(array.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.uint32)
        return _hash_int(ints, seed)
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return _hash_int(_ints(array, np.int32).view(np.uint32), seed)
    if pa.types.is_date32(t):
        return _hash_int(_ints(array.cast(pa.int32()), np.int32).view(np.uint32), seed)
    if pa.types.is_int64(t):
        return _hash_long(_ints(array, np.int64), seed)
    if pa.types.is_timestamp(t) and t.unit == "us":
        return _hash_long(_ints(array.cast(pa.int64()), np.int64), seed)
    if pa.types.is_decimal128(t) and t.precision <= _MAX_LONG_DIGITS:
        return _hash_long(_unscaled(array), seed)
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return _hash_bytes(array, seed, np.int32)
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return _hash_bytes(array, seed, np.int64)
    raise TypeError(f"spark_hash does not hash Arrow type {t}")


def _ints(array: pa.Array, dtype: type[np.signedinteger]) -> np.ndarray:
    """The values of an integer array as ``dtype`` (a NULL's slot as 0: it is not used)."""
    return np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False)).astype(dtype, copy=False)


def _unscaled(array: pa.Array) -> np.ndarray:
    """The unscaled values of a decimal128 array whose values fit 64 bits, as int64."""
    data = array.buffers()[1]
    assert data is not None
    words = np.frombuffer(data, dtype=np.int64)[2 * array.offset : 2 * (array.offset + len(array))]
    return np.ascontiguousarray(words[0::2])  # little-endian: the low word, sign-extended above


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    return _rotl(k1 * _C1, 15) * _C2


def _mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    return _rotl(h1 ^ k1, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h1 = h1 ^ np.asarray(length).astype(np.uint32)
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * np.uint32(0x85EBCA6B)
    h1 = h1 ^ (h1 >> np.uint32(13))
    h1 = h1 * np.uint32(0xC2B2AE35)
    return h1 ^ (h1 >> np.uint32(16))


def _hash_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    return _fmix(_mix_h1(seed, _mix_k1(values.astype(np.uint32, copy=False))), 4)


def _hash_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    unsigned = values.view(np.uint64)
    low = (unsigned & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    high = (unsigned >> np.uint64(32)).astype(np.uint32)
    return _fmix(_mix_h1(_mix_h1(seed, _mix_k1(low)), _mix_k1(high)), 8)


def _hash_bytes(array: pa.Array, seed: np.ndarray, offset_type: type[np.signedinteger]) -> np.ndarray:
    """Spark's ``hashUnsafeBytes``: whole little-endian 4-byte words, then each byte left over
    (sign-extended) on its own, then the length."""
    count = len(array)
    offsets_buffer, data_buffer = array.buffers()[1], array.buffers()[2]
    assert offsets_buffer is not None
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[array.offset : array.offset + count + 1]
    starts = offsets[:-1].astype(np.int64)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    h = seed.copy()
    words = lengths // 4
    for w in range(int(words.max()) if count else 0):
        rows = np.flatnonzero(words > w)
        at = starts[rows] + 4 * w
        word = (
            data[at].astype(np.uint32)
            | (data[at + 1].astype(np.uint32) << np.uint32(8))
            | (data[at + 2].astype(np.uint32) << np.uint32(16))
            | (data[at + 3].astype(np.uint32) << np.uint32(24))
        )
        h[rows] = _mix_h1(h[rows], _mix_k1(word))
    for t in range(3):
        rows = np.flatnonzero(lengths % 4 > t)
        if rows.size == 0:
            break
        byte = data[starts[rows] + 4 * words[rows] + t].view(np.int8).astype(np.int32).view(np.uint32)
        h[rows] = _mix_h1(h[rows], _mix_k1(byte))
    return _fmix(h, lengths)
