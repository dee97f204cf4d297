"""Segments hold 64-bit xids (``xid_bits: 64``); segments written before (32-bit xids, no
marker) stay readable, and ``read_changes`` widens their xids against a caller's reference."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_pgsync.changelog import Changelog
from airflow_provider_pgsync.changelog.metadata import METADATA_KEY
from airflow_provider_pgsync.changelog.prune import may_hold_unseen
from airflow_provider_pgsync.errors import ChangelogError, ConfigError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state import codec
from airflow_provider_pgsync.state.model import SegmentInfo
from tests.changelog.helpers import COLUMNS, change, table_of

ORDERS = TableRef("public", "orders")
FULL, HALF, MASK = 1 << 32, 1 << 31, (1 << 32) - 1


def write_legacy(
    log: Changelog, root: Path, xids: list[int], first_lsn: int = 10, part: int = 0
) -> SegmentInfo:
    """A segment as pgsync wrote it before 64-bit xids: 32-bit ``_xid``, no ``xid_bits`` key."""
    data = table_of([change(first_lsn + i, 0, xid=x & MASK) for i, x in enumerate(xids)])
    info = log.write_segment(ORDERS, 1, COLUMNS, data, part=part)
    file = root / info.path
    table = pq.read_table(file)
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    del meta["xid_bits"]
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), file)
    return log.segment_info(info.path)


def xids_read(log: Changelog, segments: list[SegmentInfo], reference: int | None) -> list[int]:
    return [
        x
        for _, b in log.read_changes(ORDERS, segments, xid_reference=reference)
        for x in b.column("_xid").to_pylist()
    ]


def test_new_segments_are_marked_64_bit_and_read_as_they_are(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    xids = [5 * FULL - 3, 5 * FULL + 2]
    info = log.write_segment(
        ORDERS, 1, COLUMNS, table_of([change(10 + i, 0, xid=x) for i, x in enumerate(xids)])
    )
    assert log.segment_metadata(info.path)["xid_bits"] == 64
    assert (info.xid_bits, info.min_xid, info.max_xid) == (64, 5 * FULL - 3, 5 * FULL + 2)
    # a reference never changes a 64-bit segment's xids, however far it is
    for reference in (None, 5 * FULL, 40 * FULL):
        assert xids_read(log, [info], reference) == xids


def test_legacy_segments_stay_readable(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    info = write_legacy(log, tmp_path, [5 * FULL - 3, 5 * FULL + 2])
    assert "xid_bits" not in log.segment_metadata(info.path)
    assert (info.xid_bits, info.min_xid, info.max_xid) == (32, 2, FULL - 3)
    assert xids_read(log, [info], None) == [FULL - 3, 2]  # as stored, without a reference
    # widened against a reference near the transactions: the exact 64-bit xids
    assert xids_read(log, [info], 5 * FULL + 10) == [5 * FULL - 3, 5 * FULL + 2]
    assert xids_read(log, [info], 5 * FULL - 10) == [5 * FULL - 3, 5 * FULL + 2]


def test_legacy_and_new_segments_read_together(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    old = write_legacy(log, tmp_path, [3 * FULL - 7, 3 * FULL + 1], first_lsn=10)
    data = table_of([change(30, 0, xid=3 * FULL + 5), change(31, 0, xid=3 * FULL + 6)])
    new = log.write_segment(ORDERS, 1, COLUMNS, data, part=1)
    out = list(log.read_changes(ORDERS, [new, old], xid_reference=3 * FULL + 8, batch_rows=1))
    assert [b.column("_xid").to_pylist()[0] for _, b in out] == [
        3 * FULL - 7,
        3 * FULL + 1,
        3 * FULL + 5,
        3 * FULL + 6,
    ]
    assert all(b.schema.field("_xid").type == pa.int64() for _, b in out)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    reference=st.integers(HALF, 2**62),
    deltas=st.lists(st.integers(-HALF + 1, HALF - 1), min_size=1, max_size=8),
)
def test_legacy_widening_is_exact_near_the_reference(
    tmp_path_factory: pytest.TempPathFactory, reference: int, deltas: list[int]
) -> None:
    root = tmp_path_factory.mktemp("legacy")
    log = Changelog(str(root))
    exact = [reference + d for d in deltas]
    info = write_legacy(log, root, exact)
    assert xids_read(log, [info], reference) == exact


def test_bad_reference_and_marker(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    info = write_legacy(log, tmp_path, [7])
    for bad in (-1, 2**63, True, 1.5):
        with pytest.raises(ConfigError, match="xid_reference"):
            list(log.read_changes(ORDERS, [info], xid_reference=bad))  # type: ignore[arg-type]
    file = tmp_path / info.path
    table = pq.read_table(file)
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    meta["xid_bits"] = 48
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), file)
    with pytest.raises(ChangelogError, match="xid_bits"):
        log.segment_info(info.path)


def test_xid_bits_survive_the_state() -> None:
    new = SegmentInfo("a", "public.orders", 1, LSN(10), LSN(20), 5 * FULL, 5 * FULL + 9, 2, xid_bits=64)
    legacy = SegmentInfo("b", "public.orders", 1, LSN(10), LSN(20), 3, 9, 2)
    assert legacy.xid_bits == 32
    for segment in (new, legacy):
        assert codec._read_segment(codec._segment_json(segment)) == segment
    without = {k: v for k, v in codec._segment_json(legacy).items() if k != "xid_bits"}
    assert codec._read_segment(without) == legacy  # state saved by an older version


# ---- may_hold_unseen --------------------------------------------------------------------------


def seg(min_xid: int, max_xid: int, bits: int) -> SegmentInfo:
    return SegmentInfo("s", "public.orders", 1, LSN(1), LSN(2), min_xid, max_xid, 1, xid_bits=bits)


def test_may_hold_unseen_64_bit_is_plain_comparison() -> None:
    xmin = 9 * FULL + 100
    assert may_hold_unseen(seg(xmin - 5, xmin, 64), xmin)
    assert may_hold_unseen(seg(xmin + 1, xmin + 9, 64), xmin)
    assert not may_hold_unseen(seg(xmin - 5, xmin - 1, 64), xmin)
    # far older than the snapshot (a rebaseline months later): never needed, whatever the low bits
    for age in (HALF - 1, HALF, HALF + 1, FULL, FULL + 150, 5 * FULL):
        old = xmin - age
        assert not may_hold_unseen(seg(old - 10, old, 64), xmin)


def test_may_hold_unseen_legacy_keeps_the_modulo_rule() -> None:
    xmin = 9 * FULL + 100
    assert may_hold_unseen(seg(90, 100, 32), xmin)
    assert not may_hold_unseen(seg(90, 99, 32), xmin)
    assert not may_hold_unseen(seg(FULL - 50, FULL - 5, 32), 9 * FULL + 3)  # before the wrap
    assert may_hold_unseen(seg(3, FULL - 5, 32), xmin)  # straddles the wrap-around point: kept


@given(xmin=st.integers(0, 2**62), lo=st.integers(0, 2**62), span=st.integers(0, 2**40))
def test_may_hold_unseen_64_bit_property(xmin: int, lo: int, span: int) -> None:
    assert may_hold_unseen(seg(lo, lo + span, 64), xmin) is (lo + span >= xmin)
