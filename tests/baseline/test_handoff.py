"""The visibility rule of the baseline hand-off (DESIGN §2 rule 5) on 64-bit xids; xid widening."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_pgsync.baseline.handoff import (
    applies_after_baseline,
    not_visible,
    visible_in_snapshot,
    widen_xid,
)
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.phases import SyncDone

FULL = 1 << 32
HALF = 1 << 31
MASK = FULL - 1

# ---- widen_xid --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xid", "reference", "expected"),
    [
        # epoch 0, no wrap
        (100, 200, 100),
        (300, 200, 300),
        # same epoch, far from the boundary
        (1000, 7 * FULL + 5000, 7 * FULL + 1000),
        (9000, 7 * FULL + 5000, 7 * FULL + 9000),
        # reference just above a multiple of 2^32, xid from just before the wrap: previous epoch
        (FULL - 5, 3 * FULL + 10, 2 * FULL + FULL - 5),
        (FULL - 1, 3 * FULL + 10, 3 * FULL - 1),
        (3, 3 * FULL + 10, 3 * FULL + 3),
        # reference just below a multiple of 2^32, xid from just after the wrap: next epoch
        (3, 3 * FULL - 10, 3 * FULL + 3),
        (0, 3 * FULL - 10, 3 * FULL),
        (FULL - 20, 3 * FULL - 10, 3 * FULL - 20),
        (FULL - 1, 3 * FULL - 10, 3 * FULL - 1),
        # exactly half an epoch away stays on the side of the reference's epoch
        (HALF, 4 * FULL, 4 * FULL + HALF),
        (HALF + 1, 4 * FULL, 3 * FULL + HALF + 1),
        # a 64-bit value's high bits are ignored
        (9 * FULL + 42, 2 * FULL + 40, 2 * FULL + 42),
    ],
)
def test_widen_xid(xid: int, reference: int, expected: int) -> None:
    assert widen_xid(xid, reference) == expected


@given(reference=st.integers(FULL, 2**63), xid=st.integers(0, MASK))
def test_widen_xid_is_nearest_with_same_low_bits(reference: int, xid: int) -> None:
    wide = widen_xid(xid, reference)
    assert wide & MASK == xid
    assert -HALF <= wide - reference <= HALF


@given(reference=st.integers(HALF, 2**63), delta=st.integers(-HALF + 1, HALF - 1))
def test_widen_xid_recovers_nearby_xids(reference: int, delta: int) -> None:
    x = reference + delta
    assert widen_xid(x & MASK, reference) == x


# ---- visible_in_snapshot ----------------------------------------------------------------------

XMIN, XMAX, XIP = 100, 110, (103, 107)


@pytest.mark.parametrize(
    ("xid", "visible"),
    [
        (1, True),
        (99, True),  # x < xmin
        (100, True),  # x == xmin, not in xip
        (103, False),  # in xip: still running when the snapshot was taken
        (105, True),
        (107, False),
        (109, True),
        (110, False),  # x == xmax
        (111, False),  # x > xmax
        (5000, False),
    ],
)
def test_truth_table(xid: int, visible: bool) -> None:
    assert visible_in_snapshot(xid, XMIN, XMAX, XIP) is visible
    assert visible_in_snapshot(xid, XMIN, XMAX, frozenset(XIP)) is visible


def test_empty_snapshot_range() -> None:
    # xmin == xmax: nothing in progress, everything below is visible
    assert visible_in_snapshot(49, 50, 50, ()) is True
    assert visible_in_snapshot(50, 50, 50, ()) is False


E = 6 * FULL  # a snapshot that straddles the start of epoch 6
WRAP_XMIN, WRAP_XMAX = E - 3, E + 4
WRAP_XIP = (E - 2, E + 1)


@pytest.mark.parametrize(
    ("xid32", "visible"),
    [
        (FULL - 100, True),  # below xmin in epoch 5
        (FULL - 4, True),
        (FULL - 3, True),  # xmin itself
        (FULL - 2, False),  # in xip, epoch 5
        (FULL - 1, True),
        (0, True),
        (1, False),  # in xip, epoch 6
        (3, True),
        (4, False),  # xmax
        (10, False),
        (HALF, False),  # half an epoch ahead: still the future
    ],
)
def test_widened_32_bit_xids_across_an_epoch_boundary(xid32: int, visible: bool) -> None:
    """pgoutput's 32-bit xids, widened against the snapshot's xmax (a legacy segment's path)."""
    wide = widen_xid(xid32, WRAP_XMAX)
    assert visible_in_snapshot(wide, WRAP_XMIN, WRAP_XMAX, WRAP_XIP) is visible


def test_64_bit_xids_compare_exactly() -> None:
    # a 64-bit xid one epoch away is not confused with the snapshot's own epoch
    assert visible_in_snapshot(E + 2, WRAP_XMIN, WRAP_XMAX, WRAP_XIP) is True
    assert visible_in_snapshot(E + 2 + FULL, WRAP_XMIN, WRAP_XMAX, WRAP_XIP) is False
    assert visible_in_snapshot(E + 1 - FULL, WRAP_XMIN, WRAP_XMAX, WRAP_XIP) is True
    assert visible_in_snapshot(E + 1, WRAP_XMIN, WRAP_XMAX, WRAP_XIP) is False


def test_64_bit_xids_far_older_than_the_snapshot_are_visible() -> None:
    """A changelog holding transactions more than 2^31 xids older than a new snapshot (a
    rebaseline months later): they are in the base. Their low 32 bits would have been
    widened into the future and taken as not visible."""
    xmin, xmax = 9 * FULL + 100, 9 * FULL + 110
    for age in (HALF, HALF + 1, FULL - 5, 3 * FULL + 7):
        old = xmin - age
        assert visible_in_snapshot(old, xmin, xmax, ()) is True
        assert not not_visible(pa.array([old], pa.int64()), xmin, xmax, ()).any()
    # the bug this fixes: widening the low bits puts such a transaction after the snapshot
    assert widen_xid((xmin - HALF - 200) & MASK, xmax) > xmax


@st.composite
def snapshot_and_xid(draw: st.DrawFn) -> tuple[int, int, tuple[int, ...], int]:
    """A snapshot xmin:xmax:xip (64 bits) and a 64-bit xid, anywhere or near the snapshot."""
    xmax = draw(st.integers(3, 2**62))
    xmin = xmax - draw(st.integers(0, min(xmax - 3, 2**20)))
    xip = tuple(sorted(draw(st.sets(st.integers(xmin, xmax - 1), max_size=8)))) if xmin < xmax else ()
    choices = [st.integers(0, 2**62 + 2**32), st.integers(max(0, xmax - HALF + 1), xmax + HALF - 1)]
    if xip:
        choices.append(st.sampled_from(xip))
    choices.append(st.integers(max(0, xmin - 3), xmax + 3))
    x = draw(st.one_of(*choices))
    return xmin, xmax, xip, x


@given(snapshot_and_xid())
def test_the_rule_is_plain_integer_comparison(case: tuple[int, int, tuple[int, ...], int]) -> None:
    xmin, xmax, xip, x = case
    expected = x < xmin or (x < xmax and x not in xip)
    assert visible_in_snapshot(x, xmin, xmax, xip) is expected
    if abs(x - xmax) < HALF:  # near the snapshot, the widened 32-bit form agrees
        assert visible_in_snapshot(widen_xid(x & MASK, xmax), xmin, xmax, xip) is expected


Case = tuple[int, int, tuple[int, ...], int]


@settings(deadline=None)  # the first call loads pyarrow's compute kernels
@given(st.lists(snapshot_and_xid(), min_size=1, max_size=5))
def test_the_vectorised_rule_agrees_with_the_scalar_one(cases: list[Case]) -> None:
    xmin, xmax, xip, _ = cases[0]  # one snapshot, the 64-bit xids of every case
    xids = [x for *_, x in cases]
    unseen = not_visible(pa.array(xids, pa.int64()), xmin, xmax, xip)
    assert unseen.tolist() == [not visible_in_snapshot(x, xmin, xmax, xip) for x in xids]


# ---- applies_after_baseline -------------------------------------------------------------------


def test_applies_after_baseline() -> None:
    done = SyncDone("00000003-00000002-1", LSN(0x1_6B37_48), XMIN, XMAX, XIP)
    assert [x for x in range(95, 115) if applies_after_baseline(x, done)] == [
        103,
        107,
        110,
        111,
        112,
        113,
        114,
    ]


def test_applies_after_baseline_across_an_epoch_boundary() -> None:
    done = SyncDone("00000003-00000002-1", LSN(0x1_0000_0000), WRAP_XMIN, WRAP_XMAX, WRAP_XIP)
    assert applies_after_baseline(E - 2, done) is True  # in xip, before the wrap
    assert applies_after_baseline(E - 1, done) is False  # committed before the snapshot
    assert applies_after_baseline(E + 1, done) is True  # in xip, after the wrap
    assert applies_after_baseline(E + 2, done) is False
    assert applies_after_baseline(E + 4, done) is True  # xmax: started after the snapshot
    assert applies_after_baseline(E + 2 - FULL, done) is False  # an epoch older: long in the base
