"""Property: changes split into random overlapping segments read back once each, in order."""

from __future__ import annotations

import tempfile
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_pgsync.changelog import Changelog
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo
from tests.changelog.helpers import COLUMNS, change, table_of

TABLE = TableRef("Sales Data", "Odd.Name")
V2 = (*COLUMNS, ColumnInfo("added", 16, -1, False))


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=12))
    gaps = draw(st.lists(st.integers(1, 2**33), min_size=len(sizes), max_size=len(sizes)))
    lsn, txns = 0, []
    for size, gap in zip(sizes, gaps, strict=True):
        lsn += gap
        txns.append((lsn, size))
    keys = [(lsn, s) for lsn, n in txns for s in range(n)]
    switch = draw(st.integers(0, len(keys)))  # rows from here on are schema version 2
    cuts = sorted(set(draw(st.lists(st.integers(1, len(keys) - 1), max_size=6))) if len(keys) > 1 else [])
    ranges = list(zip([0, *cuts], [*cuts, len(keys)], strict=True))  # a partition covers everything
    ranges += draw(
        st.lists(st.tuples(st.integers(0, len(keys) - 1), st.integers(1, len(keys))), max_size=5)
    )  # plus re-run overlaps
    after = draw(st.none() | st.sampled_from([(0, 0), *keys, (keys[-1][0] + 1, 0)]))
    return {
        "keys": keys,
        "switch": switch,
        "ranges": [(a, b) for a, b in ranges if a < b],
        "after": after,
        "batch_rows": draw(st.integers(1, 7)),
        "order": draw(st.randoms(use_true_random=False)),
    }


def row(key: tuple[int, int], version: int) -> dict[str, Any]:
    return change(key[0], key[1], xid=key[0] % 2**32, columns=COLUMNS if version == 1 else V2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_overlapping_segments_read_back_exactly_once(case: dict[str, Any]) -> None:
    keys, switch = case["keys"], case["switch"]
    versions = [1 if i < switch else 2 for i in range(len(keys))]
    with tempfile.TemporaryDirectory() as root:
        log = Changelog(root)
        segments = []
        for part, (start, stop) in enumerate(case["ranges"]):
            for version, lo, hi in ((1, start, min(stop, switch)), (2, max(start, switch), stop)):
                if lo < hi:
                    columns = COLUMNS if version == 1 else V2
                    data = table_of([row(keys[i], version) for i in range(lo, hi)], columns)
                    segments.append(log.write_segment(TABLE, version, columns, data, part=part))
        case["order"].shuffle(segments)
        got = list(log.read_changes(TABLE, segments, after=case["after"], batch_rows=case["batch_rows"]))

    after = case["after"] or (-1, -1)
    want = [(versions[i], row(k, versions[i])) for i, k in enumerate(keys) if k > after]
    flat = [(version, r) for version, batch in got for r in batch.to_pylist()]
    assert flat == want
    assert all(0 < b.num_rows <= case["batch_rows"] for _, b in got)
    assert [v for v, _ in got] == sorted(v for v, _ in got)
