"""32-bit transaction ids (as pgoutput sends them) widened to 64 bits; pure logic.

PostgreSQL's 64-bit xids are ``epoch << 32 | xid``. A 32-bit xid is widened against a 64-bit
``reference`` known to be less than 2^31 from the transaction (PostgreSQL's wraparound
protection guarantees that for every transaction whose xid a recent snapshot or a replication
slot still holds back): its 64-bit value is the one nearest to ``reference`` with the same
low 32 bits.
"""

from __future__ import annotations

import numpy as np

HALF = 1 << 31
FULL = 1 << 32
_MASK = FULL - 1


def widen_xid(xid: int, reference: int) -> int:
    """The 64-bit transaction id whose low 32 bits are ``xid``, nearest to 64-bit ``reference``."""
    candidate = (reference & ~_MASK) | (xid & _MASK)
    if candidate > reference + HALF:
        candidate -= FULL
    elif candidate < reference - HALF:
        candidate += FULL
    return candidate


def widen_xids(xids: np.ndarray, reference: int) -> np.ndarray:
    """``widen_xid`` for an array of xids at once (int64 in, int64 out, a few NumPy passes).

    The result is ``reference + d`` where ``d`` is the signed 32-bit difference of the low bits,
    in ``-2^31 .. 2^31-1`` (the same values as ``widen_xid`` but for an xid exactly 2^31
    above ``reference``, which no caller may pass: it is ambiguous).
    """
    low = np.asarray(xids).astype(np.int64, copy=False) & _MASK
    delta = (low - (reference & _MASK) + HALF) % FULL - HALF
    return reference + delta
