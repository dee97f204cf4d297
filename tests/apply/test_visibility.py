"""The vectorised visibility rule of apply agrees with the hand-off rule, on 64-bit xids of any epoch."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_pgsync.apply.run import _after_baseline
from airflow_provider_pgsync.baseline.handoff import applies_after_baseline
from airflow_provider_pgsync.changelog.schema import XID, segment_schema
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.state.phases import SyncDone
from airflow_provider_pgsync.testing.destination_kit import column

COLUMNS = [column("id", 23, key=True), column("a", 25)]


def _batch(xids: list[int]) -> pa.RecordBatch:
    schema = segment_schema(COLUMNS)
    n = len(xids)
    data = {name: [None] * n for name in schema.names}
    data.update(
        {
            "_op": ["I"] * n,
            "_commit_lsn": list(range(1, n + 1)),
            "_seq": [1] * n,
            XID: xids,
            "_commit_ts": [datetime(2026, 1, 1, tzinfo=UTC)] * n,
            "id": [str(i) for i in range(n)],
        }
    )
    return pa.RecordBatch.from_pydict(data, schema=schema)


@settings(max_examples=200, deadline=None)
@given(
    epoch=st.integers(0, 3),
    xmin_low=st.integers(3, 2**32 - 1),
    span=st.integers(0, 5000),
    offsets=st.lists(st.integers(-10_000, 10_000), min_size=1, max_size=50),
    data=st.data(),
)
def test_vectorised_rule_matches_the_handoff_rule(
    epoch: int, xmin_low: int, span: int, offsets: list[int], data: st.DataObject
) -> None:
    xmin = (epoch << 32) + xmin_low
    xmax = xmin + span
    xip = (
        tuple(sorted(set(data.draw(st.lists(st.integers(xmin, max(xmin, xmax - 1)), max_size=5)))))
        if span
        else ()
    )
    done = SyncDone("00000003-00000002-1", LSN(1), xmin, xmax, xip)
    xids = [max(xmin + o, 3) for o in offsets]  # 64-bit, as read_changes yields them
    kept = _after_baseline(_batch(xids), done).column(XID).to_pylist()
    assert kept == [x for x in xids if applies_after_baseline(x, done)]
