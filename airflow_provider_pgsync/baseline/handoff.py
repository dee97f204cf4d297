"""The visibility rule of the baseline hand-off (DESIGN §2 rule 5); pure logic.

A change of transaction X is applied to a freshly baselined table iff X is not visible in
the baseline's snapshot S: X >= S.xmax, or X is in S.xip. pgoutput carries 32-bit xids
and ``pg_current_snapshot()`` 64-bit ones (epoch << 32 | xid); a captured transaction is
always within 2^31 of the snapshot (PostgreSQL's wraparound protection guarantees it), so
its 64-bit value is the one nearest to S.xmax with the same low 32 bits.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from airflow_provider_pgsync.state.phases import SyncDone

_HALF = 1 << 31
_FULL = 1 << 32


def widen_xid(xid: int, reference: int) -> int:
    """The 64-bit transaction id whose low 32 bits are ``xid``, nearest to 64-bit ``reference``."""
    candidate = (reference & ~(_FULL - 1)) | (xid & (_FULL - 1))
    if candidate > reference + _HALF:
        candidate -= _FULL
    elif candidate < reference - _HALF:
        candidate += _FULL
    return candidate


def visible_in_snapshot(xid: int, xmin: int, xmax: int, xip: tuple[int, ...] | frozenset[int]) -> bool:
    """Whether committed transaction ``xid`` (32 or 64 bits) is visible in snapshot xmin:xmax:xip."""
    full = widen_xid(xid, xmax) if xid < _FULL else xid
    if full >= xmax:
        return False
    if full < xmin:
        return True
    return full not in xip


def applies_after_baseline(xid: int, done: SyncDone) -> bool:
    """Whether a change of transaction ``xid`` must be applied on top of the base of ``done``."""
    return not visible_in_snapshot(xid, done.xmin, done.xmax, done.xip)


def not_visible(xids: pa.Array | pa.ChunkedArray, xmin: int, xmax: int, xip: tuple[int, ...]) -> np.ndarray:
    """``visible_in_snapshot`` negated for an array of 32-bit xids at once: a boolean mask of
    the transactions the snapshot did not see."""
    low = np.asarray(xids.to_numpy(zero_copy_only=False), dtype=np.int64)
    full = (xmax & ~(_FULL - 1)) | (low & (_FULL - 1))
    full = np.where(full > xmax + _HALF, full - _FULL, full)
    full = np.where(full < xmax - _HALF, full + _FULL, full)
    visible = (full < xmin) | ((full < xmax) & ~np.isin(full, np.array(xip, dtype=np.int64)))
    return ~visible
