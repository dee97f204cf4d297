"""Reading changes: ordered, each once across overlapping segments and parts, after a key."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_pgsync.changelog import Changelog
from airflow_provider_pgsync.changelog.segments import _row_groups_after
from airflow_provider_pgsync.errors import ChangelogError, ConfigError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo, SegmentInfo
from tests.changelog.helpers import COLUMNS, bulk, change, changes, drain, keys, table_of

ORDERS = TableRef("public", "orders")


@pytest.fixture
def log(tmp_path: Path) -> Changelog:
    return Changelog(str(tmp_path))


def expected(txns: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(lsn, s) for lsn, n in txns for s in range(n)]


def test_overlapping_rerun_segments_read_once(log: Changelog) -> None:
    a_b = log.write_segment(ORDERS, 1, COLUMNS, changes([(10, 2), (20, 3)]))
    a_c = log.write_segment(ORDERS, 1, COLUMNS, changes([(10, 2), (20, 3), (30, 1)]))
    later = log.write_segment(ORDERS, 1, COLUMNS, changes([(20, 3), (30, 1), (40, 2)]), part=1)
    want = expected([(10, 2), (20, 3), (30, 1), (40, 2)])
    for order in ([a_b, a_c, later], [later, a_c, a_b], [a_c, a_b, later, a_b]):
        assert keys(log.read_changes(ORDERS, order)) == want
    rows = drain(log.read_changes(ORDERS, [a_b, a_c, later])).to_pylist()
    assert rows == [change(lsn, s) for lsn, s in want]


def test_parts_of_a_huge_transaction_are_ordered(log: Changelog) -> None:
    huge = changes([(100, 10)])
    parts = [
        log.write_segment(ORDERS, 1, COLUMNS, huge.slice(0, 4), part=0),
        log.write_segment(ORDERS, 1, COLUMNS, huge.slice(4, 4), part=1),
        log.write_segment(ORDERS, 1, COLUMNS, pa.concat_tables([huge.slice(8), changes([(110, 2)])]), part=2),
        log.write_segment(ORDERS, 1, COLUMNS, changes([(90, 1)]), part=0),
        # a re-run that cut the same transaction differently
        log.write_segment(ORDERS, 1, COLUMNS, huge.slice(2, 5), part=7),
    ]
    assert len({p.path for p in parts}) == 5
    random.Random(4).shuffle(parts)
    got = list(log.read_changes(ORDERS, parts, batch_rows=3))
    assert keys(got) == expected([(90, 1), (100, 10), (110, 2)])
    assert all(b.num_rows <= 3 for _, b in got)
    assert [b.num_rows for _, b in got] == [3, 3, 3, 3, 1]  # small pieces are joined


def test_after_is_exclusive_and_skips_whole_segments(log: Changelog, tmp_path: Path) -> None:
    old = log.write_segment(ORDERS, 1, COLUMNS, changes([(10, 2)]))
    mid = log.write_segment(ORDERS, 1, COLUMNS, changes([(20, 3), (30, 2)]))
    new = log.write_segment(ORDERS, 1, COLUMNS, changes([(30, 2), (40, 1)]), part=1)
    segs = [old, mid, new]
    assert keys(log.read_changes(ORDERS, segs, after=(20, 1))) == [(20, 2), (30, 0), (30, 1), (40, 0)]
    assert keys(log.read_changes(ORDERS, segs, after=(20, 99))) == [(30, 0), (30, 1), (40, 0)]
    assert keys(log.read_changes(ORDERS, segs, after=(0, 0))) == expected(
        [(10, 2), (20, 3), (30, 2), (40, 1)]
    )
    assert keys(log.read_changes(ORDERS, segs, after=(40, 0))) == []
    (tmp_path / old.path).unlink()  # a segment wholly before `after` is not even opened
    assert keys(log.read_changes(ORDERS, segs, after=(11, 0))) == expected([(20, 3), (30, 2), (40, 1)])
    with pytest.raises(ChangelogError, match=r"is missing.*rebaseline"):
        list(log.read_changes(ORDERS, segs))


def test_after_uses_row_group_statistics(log: Changelog, tmp_path: Path) -> None:
    info = log.write_segment(ORDERS, 1, COLUMNS, bulk(16, 300, 1000))  # 3 row groups
    parquet = pq.ParquetFile(tmp_path / info.path)
    after = (16 + 16 * 280, 5)
    assert _row_groups_after(parquet, after) == [2]
    got = keys(log.read_changes(ORDERS, [info], after=after))
    assert got[0] == (after[0], 6) and len(got) == 19 * 1000 + 994


def test_schema_versions_are_yielded_in_order(log: Changelog) -> None:
    v2_columns = (*COLUMNS, ColumnInfo("added", 16, -1, False))
    v1 = [
        log.write_segment(ORDERS, 1, COLUMNS, changes([(10, 2), (20, 1)])),
        # ALTER TABLE inside transaction 30: its first changes are still version 1
        log.write_segment(ORDERS, 1, COLUMNS, changes([(30, 2)])),
    ]
    v2_rows = [change(30, 2, columns=v2_columns), *(change(lsn, 0, columns=v2_columns) for lsn in (40, 50))]
    v2 = [log.write_segment(ORDERS, 2, v2_columns, table_of(v2_rows, v2_columns))]
    got = list(log.read_changes(ORDERS, [*v2, *reversed(v1)], batch_rows=2))
    assert [(v, b.num_rows) for v, b in got] == [(1, 2), (1, 2), (1, 1), (2, 2), (2, 1)]
    assert keys(got) == [(10, 0), (10, 1), (20, 0), (30, 0), (30, 1), (30, 2), (40, 0), (50, 0)]
    assert all("added" in b.schema.names for v, b in got if v == 2)
    assert not any("added" in b.schema.names for v, b in got if v == 1)


def test_other_tables_are_ignored(log: Changelog, tmp_path: Path) -> None:
    mine = log.write_segment(ORDERS, 1, COLUMNS, changes([(10, 1)]))
    other = log.write_segment(TableRef("public", "Orders"), 1, COLUMNS, changes([(5, 1), (10, 1)]))
    (tmp_path / other.path).unlink()
    assert keys(log.read_changes("public.orders", [other, mine])) == [(10, 0)]
    assert keys(log.read_changes('public."Orders"', [mine])) == []


def test_state_that_disagrees_with_the_file_is_an_error(log: Changelog) -> None:
    info = log.write_segment(ORDERS, 1, COLUMNS, changes([(10, 1), (20, 1)]))
    wrong = SegmentInfo(
        info.path, info.table, 2, info.first_commit_lsn, info.last_commit_lsn, info.min_xid, info.max_xid, 2
    )
    with pytest.raises(ChangelogError, match="state records"):
        list(log.read_changes(ORDERS, [wrong]))


def test_damaged_file_is_an_error(log: Changelog, tmp_path: Path) -> None:
    info = log.write_segment(ORDERS, 1, COLUMNS, changes([(10, 1)]))
    (tmp_path / info.path).write_bytes(b"PAR1 not really")
    with pytest.raises(ChangelogError, match="not a readable Parquet file"):
        list(log.read_changes(ORDERS, [info]))
    with pytest.raises(ChangelogError):
        log.segment_metadata(info.path)


def test_batch_rows_must_be_positive(log: Changelog) -> None:
    with pytest.raises(ConfigError, match="batch_rows"):
        log.read_changes(ORDERS, [], batch_rows=0)
    for wrong in (0, True, 1.5):
        with pytest.raises(ConfigError, match="batch_bytes"):
            log.read_changes(ORDERS, [], batch_bytes=wrong)  # type: ignore[arg-type]
    assert list(log.read_changes(ORDERS, [])) == []


def test_two_million_rows_stream_in_bounded_batches(log: Changelog) -> None:
    """2M distinct changes in overlapping segments (2.8M rows written) read with bounded memory."""
    per = 1000
    segs = [
        log.write_segment(ORDERS, 1, COLUMNS, bulk(16, 800, per)),  # txns 0..799
        log.write_segment(ORDERS, 1, COLUMNS, bulk(16 + 16 * 400, 800, per)),  # txns 400..1199
        log.write_segment(ORDERS, 1, COLUMNS, bulk(16 + 16 * 1200, 800, per)),  # txns 1200..1999
    ]
    total_bytes = 2_000_000 * bulk(16, 1, per).nbytes // per
    base = pa.total_allocated_bytes()
    peak, rows, last = 0, 0, (-1, -1)
    for version, batch in log.read_changes(ORDERS, segs, batch_rows=65536):
        assert version == 1 and batch.num_rows <= 65536
        lsn = batch.column("_commit_lsn").to_numpy()
        seq = batch.column("_seq").to_numpy()
        assert (int(lsn[0]), int(seq[0])) > last
        assert np.all((lsn[1:] > lsn[:-1]) | ((lsn[1:] == lsn[:-1]) & (seq[1:] > seq[:-1])))
        ids = batch.column("id").to_numpy(zero_copy_only=False).astype(np.int64)
        assert np.array_equal(ids, lsn.astype(np.int64) * 1000 + seq)
        last = (int(lsn[-1]), int(seq[-1]))
        rows += batch.num_rows
        peak = max(peak, pa.total_allocated_bytes() - base)
    assert rows == 2_000_000 and last == (16 + 16 * 1999, per - 1)
    assert peak < total_bytes / 2, (peak, total_bytes)


def test_after_must_be_a_key(log: Changelog) -> None:
    for bad in [(1,), (-1, 0), ("0/10", 0), (2**64, 0)]:
        with pytest.raises(ConfigError, match="after="):
            log.read_changes(ORDERS, [], after=bad)  # type: ignore[arg-type]


def test_batches_stay_within_about_batch_bytes(log: Changelog) -> None:
    """``batch_bytes``: a batch stops near that size although ``batch_rows`` would allow more,
    and every change still comes once, in order."""
    info = log.write_segment(ORDERS, 1, COLUMNS, changes([(lsn, 100) for lsn in range(10, 40)]))
    whole = sum(b.nbytes for _, b in log.read_changes(ORDERS, [info], batch_rows=10**6))
    got = list(log.read_changes(ORDERS, [info], batch_rows=10**6, batch_bytes=whole // 4))
    assert 4 <= len(got) <= 5
    assert all(b.nbytes < whole // 3 for _, b in got)
    assert keys(iter(got)) == expected([(lsn, 100) for lsn in range(10, 40)])
