"""The visibility rule of the baseline hand-off (DESIGN §2 rule 5); pure logic.

A change of transaction X is applied to a freshly baselined table iff X is not visible in
the baseline's snapshot S: X >= S.xmax, or X is in S.xip. Both sides are 64-bit xids
(epoch << 32 | xid): ``pg_current_snapshot()`` gives them for S, and the changelog's
``_xid`` holds them for X (capture widens pgoutput's 32-bit xids when it writes them;
``Changelog.read_changes`` widens those of segments written before, given S.xmax as the
reference). They compare as plain integers, whatever the age of the changelog.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from airflow_provider_pgsync.changelog.xids import widen_xid, widen_xids
from airflow_provider_pgsync.state.phases import SyncDone

__all__ = ["applies_after_baseline", "not_visible", "visible_in_snapshot", "widen_xid", "widen_xids"]


def visible_in_snapshot(xid: int, xmin: int, xmax: int, xip: tuple[int, ...] | frozenset[int]) -> bool:
    """Whether committed transaction ``xid`` (64 bits) is visible in snapshot xmin:xmax:xip."""
    if xid >= xmax:
        return False
    if xid < xmin:
        return True
    return xid not in xip


def applies_after_baseline(xid: int, done: SyncDone) -> bool:
    """Whether a change of transaction ``xid`` (64 bits) must be applied on top of the base of ``done``."""
    return not visible_in_snapshot(xid, done.xmin, done.xmax, done.xip)


def not_visible(xids: pa.Array | pa.ChunkedArray, xmin: int, xmax: int, xip: tuple[int, ...]) -> np.ndarray:
    """``visible_in_snapshot`` negated for an array of 64-bit xids at once: a boolean mask of
    the transactions the snapshot did not see."""
    full = np.asarray(xids.to_numpy(zero_copy_only=False), dtype=np.int64)
    visible = (full < xmin) | ((full < xmax) & ~np.isin(full, np.array(xip, dtype=np.int64)))
    return ~visible
