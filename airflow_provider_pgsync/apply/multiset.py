"""The batch of a table whose identity is the whole row, as multiset operations; pure logic.

A table with REPLICA IDENTITY FULL and no primary key may hold identical rows, so a change
names a row only by its values: a DELETE removes one row equal to its old row, an INSERT adds
one row, an UPDATE does both. Applied one by one, every change must find a row equal to its
old row; then the table ends as the multiset ``M + I - D`` (``M`` its rows before, ``I`` the
changes' new rows, ``D`` their old rows), whatever the order of the changes, because adding
and removing single elements of a multiset commute. Between two TRUNCATEs a batch is
therefore two sets a destination applies in bulk (``MultisetRun``): the new rows added, then
one equal row removed for each old row. The destination ends exactly as change by change;
what it no longer checks is the order: a change that removes a row the destination lacks,
put back by a later change of the same batch, is not reported as a lost row.

Unchanged TOAST values of an UPDATE come from its old row (REPLICA IDENTITY FULL sends the
whole old row), as ``row_changes`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_pgsync.apply.net import Truncate
from airflow_provider_pgsync.changelog.schema import OP, UNCHANGED, old_key_column
from airflow_provider_pgsync.state.model import ColumnInfo


@dataclass(frozen=True)
class MultisetRun:
    """The changes between two TRUNCATEs: ``inserts`` (whole rows, PostgreSQL text) to add,
    then ``deletes``, each removing one row equal to it."""

    inserts: pa.Table
    deletes: pa.Table


def multiset_runs(columns: Sequence[ColumnInfo], batch: pa.RecordBatch) -> list[MultisetRun | Truncate]:
    """The batch of a row-identity table as runs cut at each TRUNCATE, in Arrow (no loop per row)."""
    names = [c.name for c in columns]
    n = batch.num_rows
    ops = batch.column(OP)
    # only the columns runs are made of: ``take`` copies every column it is given
    rows = pa.Table.from_batches([batch]).select([*names, *(old_key_column(c) for c in names)])
    # REPLICA IDENTITY FULL sends the whole old row of every UPDATE, so an UPDATE's old row
    # is its old columns even when all of them are NULL (a row of NULLs only); a DELETE's row
    # is in the row's own columns (the changelog's layout) unless old columns are there
    updates = pc.equal(ops, "U").to_numpy(zero_copy_only=False)
    has_old = updates | _any_valid([batch.column(old_key_column(c)) for c in names], n)
    unchanged = _unchanged_masks(batch.column(UNCHANGED), names, n)
    adds = pc.is_in(ops, pa.array(["I", "U"])).to_numpy(zero_copy_only=False)
    removes = pc.is_in(ops, pa.array(["U", "D"])).to_numpy(zero_copy_only=False)
    cuts = np.flatnonzero(pc.equal(ops, "T").to_numpy(zero_copy_only=False))
    runs: list[MultisetRun | Truncate] = []
    start = 0
    for end in [*cuts.tolist(), n]:
        if end > start:
            positions = np.arange(start, end)
            added, removed = positions[adds[start:end]], positions[removes[start:end]]
            taken = rows.take(added)
            inserts = taken.select(names)
            for c, mask in unchanged.items():  # an UPDATE's unchanged TOAST: its old row's value
                kept = mask[added]
                if kept.any():
                    old = _before(taken, c, has_old[added])
                    index = inserts.schema.get_field_index(c)
                    inserts = inserts.set_column(index, c, pc.if_else(pa.array(kept), old, inserts.column(c)))
            gone = rows.take(removed)
            deletes = pa.table({c: _before(gone, c, has_old[removed]) for c in names})
            runs.append(MultisetRun(inserts=inserts, deletes=deletes))
        if end < n:
            runs.append(Truncate())
        start = end + 1
    return runs


def _before(rows: pa.Table, column: str, has_old: np.ndarray) -> pa.ChunkedArray:
    """``column`` of the old rows: the old value where the change has an old row, else (a
    DELETE keyed by its row, the changelog's layout) the row's, as ``row_changes``."""
    return pc.if_else(pa.array(has_old), rows.column(old_key_column(column)), rows.column(column))


def _any_valid(arrays: list[pa.Array], n: int) -> np.ndarray:
    """Per row, whether any of ``arrays`` holds a value there."""
    valid = np.zeros(n, dtype=bool)
    for array in arrays:
        valid |= pc.is_valid(array).to_numpy(zero_copy_only=False)
    return valid


def _unchanged_masks(unchanged: pa.Array, names: list[str], n: int) -> dict[str, np.ndarray]:
    """Per column named in ``_unchanged`` of some change, the rows that sent it as unchanged."""
    flat = pc.list_flatten(unchanged)
    if len(flat) == 0:
        return {}
    parents = pc.list_parent_indices(unchanged).to_numpy(zero_copy_only=False)
    masks: dict[str, np.ndarray] = {}
    for name in names:
        hits = pc.equal(flat, name).fill_null(False).to_numpy(zero_copy_only=False)
        if hits.any():
            mask = np.zeros(n, dtype=bool)
            mask[parents[hits]] = True
            masks[name] = mask
    return masks
