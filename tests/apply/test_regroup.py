"""Apply's batches: joined up to a limit, cut between transactions, one schema version each."""

from __future__ import annotations

import itertools

import pyarrow as pa

from airflow_provider_pgsync.apply.run import _regroup


def _batch(lsns: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"_commit_lsn": pa.array(lsns, pa.uint64()), "_seq": list(range(len(lsns)))}
    )


def test_batches_end_with_whole_transactions() -> None:
    read = [(0, _batch([1, 1, 2])), (0, _batch([2, 2, 3])), (0, _batch([3, 4, 4, 4])), (0, _batch([5]))]

    out = list(_regroup(iter(read), rows=5, size=1 << 30))

    lsns = [b.column("_commit_lsn").to_pylist() for _, b in out]
    assert [x for part in lsns for x in part] == [1, 1, 2, 2, 2, 3, 3, 4, 4, 4, 5]
    for part, following in itertools.pairwise(lsns):
        assert part[-1] != following[0], f"a transaction is split between {part} and {following}"


def test_a_transaction_larger_than_the_limit_is_split_and_versions_never_mix() -> None:
    read = [(0, _batch([7, 7, 7])), (0, _batch([7, 7])), (1, _batch([8]))]

    out = list(_regroup(iter(read), rows=2, size=1 << 30))

    assert [(v, b.column("_commit_lsn").to_pylist()) for v, b in out] == [
        (0, [7, 7, 7]),
        (0, [7, 7]),
        (1, [8]),
    ]
