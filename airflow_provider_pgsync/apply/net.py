"""The net effect of a batch of changes on a keyed table; pure logic (no I/O).

A batch (``(commit_lsn, seq)`` order, changelog layout, values as PostgreSQL text) becomes
a few set operations a destination can run in bulk: for every key touched, its final state
(absent, or present with its values), cut at each TRUNCATE. Unchanged TOAST values (DESIGN
§2 rule 6) are carried forward from an earlier change of the same row in the batch; what is
left unknown stays in the destination (an in-place update of the other columns) or, for a
row whose key changed, is read from the destination's old row (``carry_from``).

Most batches have no TRUNCATE, no key change and no unchanged TOAST: ``bulk_net`` computes
their net effect in Arrow (the last change of each key wins) without a Python loop per row.

Tables whose identity is the whole row (REPLICA IDENTITY FULL without a primary key: every
column is a key column) may hold duplicate rows; they are applied change by change
(``row_changes``) or as multiset operations (``apply/multiset.py``) instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_pgsync.changelog.schema import OP, UNCHANGED, key_columns, old_key_column
from airflow_provider_pgsync.state.model import ColumnInfo

Values = dict[str, str | None]
KeyValues = tuple[str | None, ...]


@dataclass(frozen=True)
class Truncate:
    """TRUNCATE: every row of the table goes, including those of earlier steps."""


@dataclass
class Present:
    """A key's final state: present with ``values``; ``unchanged`` columns keep the value
    the destination holds for the row at ``carry_from`` (its own key when None)."""

    values: Values
    unchanged: frozenset[str] = frozenset()
    carry_from: KeyValues | None = None


@dataclass
class NetStep:
    """Final states of the keys a run of changes touched: None means absent."""

    final: dict[KeyValues, Present | None] = field(default_factory=dict)

    @property
    def deletes(self) -> list[KeyValues]:
        return [k for k, v in self.final.items() if v is None]

    def present(self) -> Iterator[tuple[KeyValues, Present]]:
        return ((k, v) for k, v in self.final.items() if v is not None)


@dataclass(frozen=True)
class RowChange:
    """One change of a row-identity table: ``old`` row to remove (U, D), ``new`` to add (I, U)."""

    op: str
    old: Values | None
    new: Values | None


def is_keyed(columns: Sequence[ColumnInfo]) -> bool:
    """Whether rows have a key short of the whole row (else a change names its row by its values)."""
    keys = key_columns(columns)
    return bool(keys) and len(keys) < len(columns)


@dataclass(frozen=True)
class BulkNet:
    """A batch's net effect as Arrow tables of PostgreSQL text, by what the destination holds:

    - ``deletes``: key columns of the keys it holds that are absent after the batch;
    - ``updates``: whole rows of the keys it holds that are present after the batch;
    - ``inserts``: whole rows of the keys it lacks that are present after the batch.

    The destination holds a key iff the batch's first change of it is an UPDATE or DELETE (a
    key whose first change is an INSERT had no row: the source's key is unique). Keys both
    inserted and deleted in the batch are in none of them."""

    deletes: pa.Table
    updates: pa.Table
    inserts: pa.Table


def bulk_net(columns: Sequence[ColumnInfo], batch: pa.RecordBatch) -> BulkNet | None:
    """The net effect of a keyed table's batch without TRUNCATE, key changes or unchanged
    TOAST, computed in Arrow; None for any other batch (``net_steps`` takes those)."""
    if not is_keyed(columns) or batch.num_rows == 0:
        return None
    names, keys = [c.name for c in columns], key_columns(columns)
    ops = batch.column(OP)
    if (
        pc.any(pc.equal(ops, "T")).as_py()
        or pc.any(pc.greater(pc.list_value_length(batch.column(UNCHANGED)), 0)).as_py()
    ):
        return None
    updates = pc.equal(ops, "U")
    if any(pc.any(pc.and_(updates, pc.is_valid(batch.column(old_key_column(k))))).as_py() for k in keys):
        return None
    # a DELETE carries its key in the old key columns, an INSERT or UPDATE in the row
    key_values = {k: pc.coalesce(batch.column(old_key_column(k)), batch.column(k)) for k in keys}
    position = pa.array(np.arange(batch.num_rows))
    grouped = (
        pa.table({**key_values, "_position": position})
        .group_by(keys, use_threads=False)
        .aggregate([("_position", "min"), ("_position", "max")])
    )
    last = grouped.column("_position_max")
    present = pc.not_equal(pc.take(ops, last), "D")
    held = pc.not_equal(pc.take(ops, grouped.column("_position_min")), "I")
    rows = pa.Table.from_batches([batch]).select(names)
    return BulkNet(
        deletes=grouped.select(keys).filter(pc.and_(held, pc.invert(present))),
        updates=rows.take(last.filter(pc.and_(held, present))),
        inserts=rows.take(last.filter(pc.and_(pc.invert(held), present))),
    )


def net_steps(columns: Sequence[ColumnInfo], batch: pa.RecordBatch) -> list[NetStep | Truncate]:
    """The batch of a keyed table as net steps, cut at each TRUNCATE."""
    names = [c.name for c in columns]
    keys = key_columns(columns)
    data = batch.to_pydict()
    ops = data[OP]
    steps: list[NetStep | Truncate] = []
    step = NetStep()
    for i, op in enumerate(ops):
        if op == "T":
            if step.final:
                steps.append(step)
            steps.append(Truncate())
            step = NetStep()
            continue
        row = {n: data[n][i] for n in names}
        new_key = tuple(row[k] for k in keys)
        old = tuple(data[old_key_column(k)][i] for k in keys)
        old_key = old if any(v is not None for v in old) else None
        if op == "D":
            step.final[old_key if old_key is not None else new_key] = None
        elif op == "I":
            step.final[new_key] = Present(row)
        else:  # U
            source = old_key if old_key is not None else new_key
            unchanged = frozenset(data[UNCHANGED][i] or ())
            previous = step.final.get(source, _IN_DESTINATION)
            step.final[new_key] = _updated(previous, row, unchanged, source, new_key)
            if source != new_key:
                step.final[source] = None
    if step.final:
        steps.append(step)
    return steps


_IN_DESTINATION = Present({})  # a key the batch has not touched yet: as the destination has it


def _updated(
    previous: Present | None, row: Values, unchanged: frozenset[str], source: KeyValues, new_key: KeyValues
) -> Present:
    """The state after an UPDATE of the row at key ``source`` (now at ``new_key``) whose state
    was ``previous`` (``_IN_DESTINATION`` when the batch has not touched it)."""
    moved_from = None if source == new_key else source
    if previous is None or previous is _IN_DESTINATION:
        values = {k: v for k, v in row.items() if k not in unchanged}
        return Present(values, unchanged, moved_from if unchanged else None)
    values = dict(row)
    still = set()
    for name in unchanged:
        if name in previous.values and name not in previous.unchanged:
            values[name] = previous.values[name]
        else:
            values.pop(name, None)
            still.add(name)
    if not still:
        return Present(values)
    # what is still unknown sits in the destination, at the row the previous state came from
    origin = previous.carry_from if previous.carry_from is not None else moved_from
    return Present(values, frozenset(still), origin)


def row_changes(columns: Sequence[ColumnInfo], batch: pa.RecordBatch) -> Iterator[RowChange | Truncate]:
    """The batch of a row-identity table, change by change; unchanged TOAST values of an
    UPDATE come from its old row (REPLICA IDENTITY FULL sends the whole old row)."""
    names = [c.name for c in columns]
    data = batch.to_pydict()
    for i, op in enumerate(data[OP]):
        if op == "T":
            yield Truncate()
            continue
        new = {n: data[n][i] for n in names}
        old_values = {n: data[old_key_column(n)][i] for n in names}
        # an UPDATE always carries its whole old row, NULLs only too; a DELETE's is its row
        has_old = op == "U" or any(v is not None for v in old_values.values())
        old = old_values if has_old else None
        if op == "I":
            yield RowChange("I", None, new)
        elif op == "D":
            yield RowChange("D", old if old is not None else new, None)
        else:
            unchanged = set(data[UNCHANGED][i] or ())
            before = old if old is not None else new
            after = {n: (before[n] if n in unchanged else v) for n, v in new.items()}
            yield RowChange("U", before, after)
