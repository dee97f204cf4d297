"""The backfill hand-off: which staged rows a destination may take; pure logic over the changelog.

A backfill re-reads rows of a Ready table in an exported snapshot S (like a baseline, but
only the rows matching a condition, and into a staging area instead of a new base). Per row,
the changes of transactions S saw come before those it did not see (a transaction that
changes a row waits for the last one that changed it to end), so a staged row is the row's
state after every change S saw and before every change it did not see.

Apply merges the staged rows into a destination once capture has passed the snapshot's
``baseline_lsn`` and every captured change is applied: by then every change S saw is in the
destination, and so may be some S did not see. A staged row whose key such a change touched
(as its key, its old key, or by a TRUNCATE) is older than the destination's row and is
dropped; every other staged row is exactly the row's current state, so writing it at the
destination's watermark repairs the row without moving anything else. Writing the same
backfill again later is harmless (the touched keys only grow), so a crash between the write
and the state update is repaired by the next apply.

A key-list backfill also stages its absent keys: keys S holds no row of (nor a row the
publication's row filter keeps). The same argument holds for them: a key no change S did not
see has touched has, at the watermark, the state it had in S, i.e. no row, so deleting the
destination's row of that key (a row the destination holds and the source does not) is
exact; a key such a change touched (inserted again, say) is left to the stream, which has
it. After a TRUNCATE since S nothing is written nor deleted: the stream holds every row the
table has had since. Deleting again later is harmless for the same reason as writing again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_pgsync.apply.net import is_keyed
from airflow_provider_pgsync.baseline.handoff import not_visible
from airflow_provider_pgsync.changelog.prune import may_hold_unseen
from airflow_provider_pgsync.changelog.schema import OP, XID, key_columns, old_key_column
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.state.model import Backfill, ColumnInfo, SegmentInfo, TableState


@dataclass(frozen=True)
class TouchedKeys:
    """The keys that changes newer than a backfill's snapshot touched: key columns as text
    (PostgreSQL's output, as the changelog has them), or every key after a TRUNCATE."""

    keys: pa.Table
    truncated: bool = False


def touched_keys(
    changelog: Changelog,
    table_state: TableState,
    segments: Sequence[SegmentInfo],
    columns_by_version: dict[int, list[ColumnInfo]],
    backfill: Backfill,
) -> TouchedKeys:
    """The keys that captured changes of transactions ``backfill``'s snapshot did not see touched.

    Only segments that may hold such transactions (xids from the snapshot's xmin on) are read.
    """
    names = key_columns(table_state.columns)
    relevant = [s for s in segments if may_hold_unseen(s, backfill.xmin)]
    found: list[pa.Table] = []
    for version, batch in changelog.read_changes(table_state.table, relevant, xid_reference=backfill.xmax):
        unseen = not_visible(batch.column(XID), backfill.xmin, backfill.xmax, backfill.xip)
        newer = batch.filter(pa.array(unseen))
        if newer.num_rows == 0:
            continue
        if pc.any(pc.equal(newer.column(OP), "T")).as_py():
            return TouchedKeys(pa.table({n: pa.array([], pa.string()) for n in names}), truncated=True)
        keys = key_columns(columns_by_version.get(version, table_state.columns))
        if keys != names:  # the destination sends the table back to baseline at such a change
            continue
        # by operation, not by NULLs: a table without a key may hold a row of NULLs
        op = newer.column(OP)
        written = newer.filter(pc.is_in(op, pa.array(["I", "U"])))
        found.append(pa.table({n: written.column(n) for n in names}))
        old = newer.filter(pc.is_in(op, pa.array(["U", "D"])))
        if is_keyed(table_state.columns):  # an UPDATE keeping its key has no old key
            old = old.filter(pc.invert(pc.is_null(old.column(old_key_column(names[0])))))
        found.append(pa.table({n: old.column(old_key_column(n)) for n in names}))
    if not found:
        return TouchedKeys(pa.table({n: pa.array([], pa.string()) for n in names}))
    every = pa.concat_tables(found)
    return TouchedKeys(every.group_by(names).aggregate([]) if names else every)
