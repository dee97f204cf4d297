"""The fields of Insert, Update and Delete messages of one table version, read for all the
messages of a fetch at once with NumPy gathers (``columns.py`` cuts the fetch into messages).

Every reader checks what it reads; whatever it does not expect raises ``Fallback``, and the
caller reads the payloads again one by one with the reference decoder, which names the tag
and the byte offset of the fault.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from airflow_provider_pgsync.changelog.schema import UNCHANGED, old_key_column
from airflow_provider_pgsync.pgoutput import RelationColumn

_I, _U, _D = ord("I"), ord("U"), ord("D")
_N, _K, _OLD = ord("N"), ord("K"), ord("O")
NULL, UNCHANGED_VALUE, TEXT = ord("n"), ord("u"), ord("t")


class Fallback(Exception):
    """The vectorised reading met something unexpected: decode one by one instead."""


def be_ints(buf: np.ndarray, positions: np.ndarray, dtype: str) -> np.ndarray:
    """Big-endian integers of ``dtype`` read at each position of ``buf``.

    A view with a stride of one byte makes element ``i`` the integer stored at byte
    ``i``, so reading at arbitrary (unaligned) positions is one 1-D gather.
    """
    native = np.dtype(dtype).newbyteorder("=")
    size = np.dtype(dtype).itemsize
    if len(positions) == 0:
        return np.empty(0, native)
    if len(buf) < size:
        raise Fallback("a field runs past the end of the payloads")
    view = np.ndarray(shape=(len(buf) - size + 1,), dtype=dtype, buffer=buf, strides=(1,))
    return view[positions].astype(native)


def read_changes(
    relation_columns: Sequence[RelationColumn],
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    tags: np.ndarray,
) -> tuple[np.ndarray, dict[str, pa.Array]]:
    """Op codes, and old key and row columns, of Insert/Update/Delete messages of one table
    version (whose Relation has ``relation_columns``)."""
    n = len(starts)
    ncols = len(relation_columns)
    if n and (ends - starts < 8).any():
        raise Fallback("change message too short")
    sub = buf[starts + 5] if n else np.empty(0, np.uint8)
    is_i, is_u, is_d = tags == _I, tags == _U, tags == _D
    if (is_i & (sub != _N)).any() or (is_u & ~np.isin(sub, (_N, _K, _OLD))).any():
        raise Fallback("bad tuple sub-tag")
    if (is_d & ~np.isin(sub, (_K, _OLD))).any():
        raise Fallback("bad tuple sub-tag")
    has_old = is_d | (is_u & (sub != _N))
    new_ptr = np.where(has_old, -1, starts + 6)

    old = np.flatnonzero(has_old)
    old_kinds, old_start, old_len, old_end = _tuples(buf, starts[old] + 6, ends[old], ncols)
    old_updates = is_u[old]
    if len(old):
        after = old_end[old_updates]
        if (after >= ends[old][old_updates]).any() or (buf[after] != _N).any():
            raise Fallback("no new tuple after the old one")
        if (old_end[~old_updates] != ends[old][~old_updates]).any():
            raise Fallback("trailing bytes after a Delete")
        new_ptr[old[old_updates]] = after + 1
    new = np.flatnonzero(new_ptr >= 0)
    new_kinds, new_start, new_len, new_end = _tuples(buf, new_ptr[new], ends[new], ncols)
    if (new_end != ends[new]).any():
        raise Fallback("trailing bytes after the new tuple")

    names = [c.name for c in relation_columns]
    keys = [j for j, c in enumerate(relation_columns) if c.is_key]
    ops = np.where(is_i, 0, np.where(is_u, 1, 2)).astype(np.uint8)
    # every string column in one pass: the old keys, then the row columns
    kinds = np.full((len(keys) + ncols, n), NULL, np.uint8)
    starts_ = np.zeros((len(keys) + ncols, n), np.int64)
    lengths = np.zeros((len(keys) + ncols, n), np.int64)
    kinds[: len(keys), old] = old_kinds[:, keys].T
    starts_[: len(keys), old] = old_start[:, keys].T
    lengths[: len(keys), old] = old_len[:, keys].T
    kinds[len(keys) :, new] = new_kinds.T
    starts_[len(keys) :, new] = new_start.T
    lengths[len(keys) :, new] = new_len.T
    columns = strings(buf, kinds, starts_, lengths)
    out: dict[str, pa.Array] = {UNCHANGED: _unchanged(names, n, new, new_kinds)}
    for k, j in enumerate(keys):
        out[old_key_column(names[j])] = columns[k]
    for j, name in enumerate(names):
        out[name] = columns[len(keys) + j]
    return ops, out


def _tuples(
    buf: np.ndarray, ptr: np.ndarray, end: np.ndarray, ncols: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Kinds, value starts and lengths of TupleData at each pointer; and where each ends."""
    n = len(ptr)
    kinds = np.empty((n, ncols), np.uint8)
    vstart = np.empty((n, ncols), np.int64)
    vlen = np.zeros((n, ncols), np.int64)
    if n == 0:
        return kinds, vstart, vlen, ptr
    if (ptr + 2 > end).any() or (be_ints(buf, ptr, ">i2") != ncols).any():
        raise Fallback("tuple column count differs from the Relation")
    off = ptr + 2
    limit = len(buf) - 4
    for j in range(ncols):
        if (off >= end).any():
            raise Fallback("tuple ends early")
        kind = buf[off]
        text = kind == TEXT
        if (~text & (kind != NULL) & (kind != UNCHANGED_VALUE)).any():
            raise Fallback("unexpected tuple kind (binary values are not requested)")
        length = np.where(text, be_ints(buf, np.minimum(off + 1, limit), ">i4"), 0).astype(np.int64)
        nxt = np.where(text, off + 5 + length, off + 1)
        if (length < 0).any() or (nxt > end).any():
            raise Fallback("bad value length")
        kinds[:, j] = kind
        vstart[:, j] = off + 5
        vlen[:, j] = length
        off = nxt
    return kinds, vstart, vlen, off


def strings(buf: np.ndarray, kinds: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> list[pa.Array]:
    """String columns from (columns, rows) arrays of tuple kinds, value starts and lengths.

    The values are cut out of the payloads by Arrow's ``take`` (one copy per value, in C++)
    instead of a NumPy gather of every byte through an index: a binary array over the whole
    buffer whose offsets alternate between value starts and ends (in buffer order) holds
    every value at an even position. The values are checked as UTF-8 once, and each column
    is a zero-copy slice of the one array taken.
    """
    ncols, n = kinds.shape
    valid = (kinds == TEXT).ravel()
    nulls = ncols * n - int(valid.sum())
    if len(buf) >= 2**31:
        raise Fallback("more than 2 GiB of payloads in one fetch")  # pragma: no cover
    present = np.flatnonzero(valid)
    if len(present) == 0:
        return [pa.nulls(n, pa.string()) for _ in range(ncols)]
    first = starts.ravel()[present]
    order = np.argsort(first, kind="stable")
    bounds = np.empty(2 * len(present), np.int32)
    bounds[0::2] = first[order]
    bounds[1::2] = first[order] + lengths.ravel()[present][order]
    if (np.diff(bounds) < 0).any() or bounds[-1] > len(buf):
        raise Fallback("values overlap or run past the payloads")
    buffers = [None, pa.py_buffer(bounds), pa.py_buffer(buf)]
    pieces = pa.BinaryArray.from_buffers(pa.binary(), len(bounds) - 1, buffers)
    rank = np.empty(len(present), np.int64)
    rank[order] = np.arange(len(present))
    index = np.zeros(ncols * n, np.int64)
    index[present] = 2 * rank
    taken = pieces.take(pa.array(index, mask=~valid) if nulls else pa.array(index))
    values = taken.view(pa.string())
    try:
        values.validate(full=True)
    except pa.ArrowInvalid:
        raise Fallback("a text value is not valid UTF-8") from None
    return [values.slice(c * n, n) for c in range(ncols)]


def _unchanged(names: list[str], n: int, rows: np.ndarray, kinds: np.ndarray) -> pa.Array:
    """Per row, the names of the columns sent as unchanged TOAST (null when none)."""
    flags = np.zeros((n, len(names)), dtype=bool)
    flags[rows] = kinds == UNCHANGED_VALUE
    counts = flags.sum(axis=1)
    if not counts.any():
        return pa.nulls(n, pa.list_(pa.string()))
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    _, cols = np.nonzero(flags)
    values = pa.array(names, pa.string()).take(pa.array(cols))
    mask = pa.array(counts == 0)
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=mask)
