"""32 -> 64-bit xid widening, scalar and vectorised (capture and the reader's legacy path)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_pgsync.changelog.xids import FULL, HALF, widen_xid, widen_xids

MASK = FULL - 1


@given(
    reference=st.integers(0, 2**62),
    xids=st.lists(st.integers(0, MASK), min_size=0, max_size=40),
)
def test_vectorised_widening_agrees_with_the_scalar_one(reference: int, xids: list[int]) -> None:
    # exactly 2^31 above the reference both candidates are equally near: the vectorised form
    # takes the older one (capture's transactions are below its reference), so skip that one
    xids = [x for x in xids if (x - reference) % FULL != HALF]
    wide = widen_xids(np.array(xids, dtype=np.uint32), reference)
    assert wide.dtype == np.int64
    assert wide.tolist() == [widen_xid(x, reference) for x in xids]


@given(reference=st.integers(HALF, 2**62), deltas=st.lists(st.integers(-HALF, HALF - 1), max_size=40))
def test_widening_recovers_xids_within_half_an_epoch(reference: int, deltas: list[int]) -> None:
    """What capture relies on: a transaction less than 2^31 below the reference (or a little
    above it) gets its exact 64-bit xid back from its low 32 bits."""
    exact = [reference + d for d in deltas]
    low = np.array([x & MASK for x in exact], dtype=np.int64)
    assert widen_xids(low, reference).tolist() == exact


def test_widening_across_an_epoch_boundary() -> None:
    reference = 5 * FULL + 10  # the next xid has just wrapped into epoch 5
    low = np.array([FULL - 3, FULL - 1, 0, 9, 12], dtype=np.uint32)
    expected = [5 * FULL - 3, 5 * FULL - 1, 5 * FULL, 5 * FULL + 9, 5 * FULL + 12]
    assert widen_xids(low, reference).tolist() == expected
    # half an epoch away: the older of the two candidates; further: the older epoch's
    assert widen_xids(np.array([HALF + 10, HALF + 11], np.int64), reference).tolist() == [
        4 * FULL + HALF + 10,
        4 * FULL + HALF + 11,
    ]
