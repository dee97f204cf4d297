"""A row-identity batch as multiset runs equals its changes applied one by one (the kit's model)."""

from __future__ import annotations

from collections import Counter

import pytest

from airflow_provider_pgsync.apply.multiset import MultisetRun, multiset_runs
from airflow_provider_pgsync.apply.net import Truncate
from airflow_provider_pgsync.testing.destination_kit import Change, Model, change_batch, column
from tests.support.random_changes import random_changes

COLUMNS = [
    column("a", 23, key=True),
    column("b", 25, key=True),
    column("n", 1700, key=True),
    column("j", 114, key=True),
]


def as_multiset(runs: list[MultisetRun | Truncate]) -> Counter[tuple[str | None, ...]]:
    """What a destination does with the runs, in memory: adds, then one equal row per delete."""
    table: Counter[tuple[str | None, ...]] = Counter()
    for run in runs:
        if isinstance(run, Truncate):
            table.clear()
            continue
        table.update(tuple(r.values()) for r in run.inserts.to_pylist())
        gone = Counter(tuple(r.values()) for r in run.deletes.to_pylist())
        assert all(table[k] >= n for k, n in gone.items()), "a delete of a row the table lacks"
        table.subtract(gone)
    return +table


@pytest.mark.parametrize("seed", range(20))
def test_runs_equal_the_changes_one_by_one(seed: int) -> None:
    changes = random_changes(seed, 200)
    model = Model(COLUMNS)
    for change in changes:
        model.apply(change)
    runs = multiset_runs(COLUMNS, change_batch(COLUMNS, changes, first_lsn=16))
    assert as_multiset(runs) == Counter(tuple(r.values()) for r in model.rows)
    truncates = sum(1 for c in changes if c.op == "T")
    assert sum(isinstance(r, Truncate) for r in runs) == truncates


def test_a_batch_of_truncates_only() -> None:
    runs = multiset_runs(COLUMNS, change_batch(COLUMNS, [Change("T"), Change("T")], first_lsn=16))
    assert runs == [Truncate(), Truncate()]
