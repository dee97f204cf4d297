"""Retention: which changelog segments no consumer needs any more (a pure decision)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from airflow_provider_pgsync.state.model import SegmentInfo

_XID_MOD = 2**32
_XID_HALF = 2**31


def xid_precedes(a: int, b: int) -> bool:
    """Whether 32-bit xid ``a`` is older than ``b`` in PostgreSQL's modulo-2^32 order (the
    order of the xids of legacy segments, written before capture stored 64-bit xids).

    ``b`` may be a 64-bit (epoch-qualified) xid; only its low 32 bits count.
    """
    return (a - b) % _XID_MOD >= _XID_HALF


def segments_to_prune(
    segments: Sequence[SegmentInfo],
    watermarks: Mapping[str, tuple[int, int]],
    *,
    now: datetime,
    retention: timedelta,
    created_at: Mapping[str, datetime],
    protect_from_xid: int | None = None,
) -> list[SegmentInfo]:
    """The segments that may be deleted, in the order given.

    A segment is deletable only when all of these hold:

    - there is at least one destination and every destination's watermark
      ``(commit_lsn, seq)`` has a commit LSN strictly greater than the segment's
      ``last_commit_lsn`` (a destination part-way through that last transaction still
      needs it; with no destination at all nothing is deleted);
    - it is at least ``retention`` old: ``now - created_at[path] >= retention`` (a
      segment missing from ``created_at`` is kept; ``Changelog.created_at`` gives file
      modification times);
    - if ``protect_from_xid`` is given (the xmin of the snapshot of an unfinished
      baseline hand-off, 64 bits), the segment holds no transaction from that xid on
      (``may_hold_unseen``).
    """
    if not watermarks:
        return []
    oldest = min(lsn for lsn, _ in watermarks.values())
    result = []
    for seg in segments:
        if oldest <= seg.last_commit_lsn.value:
            continue
        created = created_at.get(seg.path)
        if created is None or now - created < retention:
            continue
        if protect_from_xid is not None and may_hold_xid_from(seg, protect_from_xid):
            continue
        result.append(seg)
    return result


def may_hold_unseen(segment: SegmentInfo, xmin64: int) -> bool:
    """Whether ``segment`` may hold a transaction that a snapshot with 64-bit xmin ``xmin64``
    did not see, i.e. one whose xid is not older than ``xmin64``.

    A segment with 64-bit xids (``xid_bits == 64``) may iff its ``max_xid >= xmin64``: exact,
    however old the segment. A legacy segment (32-bit xids) compares modulo 2^32 like
    PostgreSQL (only right while its transactions are within 2^31 of ``xmin64``), and one
    whose xids straddle the wrap-around point may.
    """
    if segment.xid_bits == 64:
        return segment.max_xid >= xmin64
    if segment.max_xid - segment.min_xid >= _XID_HALF:
        return True
    return not xid_precedes(segment.max_xid, xmin64)


def may_hold_xid_from(seg: SegmentInfo, xid: int) -> bool:
    """Whether ``seg`` may hold a transaction that is not older than 64-bit ``xid`` (see
    ``may_hold_unseen``)."""
    return may_hold_unseen(seg, xid)
