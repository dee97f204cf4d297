"""Retention: which segments may be deleted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow_provider_pgsync.changelog import Changelog, segments_to_prune
from airflow_provider_pgsync.changelog.prune import xid_precedes
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import SegmentInfo
from tests.changelog.helpers import COLUMNS, changes

NOW = datetime(2024, 6, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def seg(name: str, first: int, last: int, min_xid: int = 100, max_xid: int = 200) -> SegmentInfo:
    return SegmentInfo(name, "public.orders", 1, LSN(first), LSN(last), min_xid, max_xid, 1)


A, B, C = seg("a", 10, 20), seg("b", 20, 30), seg("c", 30, 40)
OLD = {"a": NOW - 3 * DAY, "b": NOW - 3 * DAY, "c": NOW - 3 * DAY}


def prune(
    watermarks: dict[str, tuple[int, int]],
    created: dict[str, datetime] = OLD,
    protect: int | None = None,
    segments: tuple[SegmentInfo, ...] = (A, B, C),
) -> list[str]:
    chosen = segments_to_prune(
        segments, watermarks, now=NOW, retention=DAY, created_at=created, protect_from_xid=protect
    )
    return [s.path for s in chosen]


def test_every_destination_must_be_past_the_last_commit() -> None:
    assert prune({"lake": (35, 0)}) == ["a", "b"]
    assert prune({"lake": (35, 0), "pg": (25, 3)}) == ["a"]
    assert prune({"lake": (30, 999)}) == ["a"]  # at the last commit is not past it
    assert prune({"lake": (10**9, 0), "late": (0, 0)}) == []


def test_no_destination_deletes_nothing() -> None:
    assert prune({}) == []


def test_retention() -> None:
    created = {"a": NOW - 2 * DAY, "b": NOW - DAY, "c": NOW - DAY + timedelta(seconds=1)}
    assert prune({"lake": (99, 0)}, created) == ["a", "b"]
    assert prune({"lake": (99, 0)}, {"b": NOW - 2 * DAY}) == ["b"]  # unknown age is kept


def test_unfinished_baseline_protects_segments_with_its_xids() -> None:
    segs = (seg("a", 10, 20, 100, 149), seg("b", 20, 30, 120, 150), seg("c", 30, 40, 151, 300))
    assert prune({"lake": (99, 0)}, protect=150, segments=segs) == ["a"]
    assert prune({"lake": (99, 0)}, protect=None, segments=segs) == ["a", "b", "c"]
    # a 64-bit (epoch-qualified) xid compares by its low 32 bits
    assert prune({"lake": (99, 0)}, protect=(5 << 32) | 150, segments=segs) == ["a"]


def test_xids_compare_across_wraparound() -> None:
    assert xid_precedes(2**32 - 10, 5) and not xid_precedes(5, 2**32 - 10)
    assert xid_precedes(100, 101) and not xid_precedes(101, 101)
    straddling = seg("w", 10, 20, 3, 2**32 - 5)  # xids on both sides of the wrap-around point
    before = seg("x", 10, 20, 2**32 - 50, 2**32 - 5)
    assert prune({"lake": (99, 0)}, {"w": OLD["a"], "x": OLD["a"]}, 10, (straddling, before)) == ["x"]


def test_with_file_times(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    table = TableRef("public", "orders")
    infos = [log.write_segment(table, 1, COLUMNS, changes([(lsn, 1)])) for lsn in (10, 20)]
    created = log.created_at(i.path for i in infos)
    now = datetime.now(UTC)
    chosen = segments_to_prune(infos, {"lake": (15, 0)}, now=now + DAY, retention=DAY, created_at=created)
    assert chosen == infos[:1]
    assert segments_to_prune(infos, {"lake": (99, 0)}, now=now, retention=DAY, created_at=created) == []
    log.delete_segments(s.path for s in chosen)
    assert not (tmp_path / infos[0].path).exists() and (tmp_path / infos[1].path).exists()


def test_64_bit_segments_compare_as_plain_integers() -> None:
    """Segments with 64-bit xids: kept iff they may hold an xid from the hand-off's xmin on,
    however many epochs lie between (the modulo rule would keep or drop them by their low bits)."""
    xmin = 7 * 2**32 + 150

    def wide(name: str, lo: int, hi: int) -> SegmentInfo:
        return SegmentInfo(name, "public.orders", 1, LSN(10), LSN(20), lo, hi, 1, xid_bits=64)

    segs = (
        wide("a", xmin - 2**32 + 100, xmin - 2**32 + 900),  # an epoch older, low bits "after" xmin
        wide("b", xmin - 3 * 2**31, xmin - 3 * 2**31 + 5),  # 1.5 epochs older
        wide("c", xmin - 10, xmin),  # may hold xmin itself
        wide("d", xmin + 1, xmin + 2**33),
        wide("e", xmin - 10, xmin - 1),
    )
    created = dict.fromkeys("abcde", NOW - 3 * DAY)
    assert prune({"lake": (99, 0)}, created, protect=xmin, segments=segs) == ["a", "b", "e"]
