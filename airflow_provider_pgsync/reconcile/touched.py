"""The keys a reconciliation leaves out: touched by transactions its snapshot did not see that
a destination has applied; pure logic over the changelog.

The source is read in snapshot S, a destination at watermark W (>= every transaction S saw).
A key that a transaction S did not see changed, with its commit at or before W, may differ
between the two reads without anything being wrong, so it is left out on both sides (as a
backfill leaves out such keys, ``apply/backfill.py``). Transactions after W are in neither
read. A TRUNCATE S did not see leaves the table out altogether.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_pgsync.baseline.handoff import not_visible
from airflow_provider_pgsync.changelog.prune import may_hold_unseen
from airflow_provider_pgsync.changelog.schema import COMMIT_LSN, OP, XID, key_columns, old_key_column
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.state.model import SegmentInfo, TableState

KeyValues = tuple[str | None, ...]


@dataclass(frozen=True)
class LeftOut:
    """Key values (texts, in key column order) to leave out, or the whole table after a TRUNCATE."""

    keys: frozenset[KeyValues]
    truncated: bool = False


def left_out_keys(
    changelog: Changelog,
    table_state: TableState,
    segments: Sequence[SegmentInfo],
    *,
    xmin: int,
    xmax: int,
    xip: tuple[int, ...],
    upto_lsn: int,
) -> LeftOut:
    """Keys (new and old) of changes of transactions not visible in snapshot xmin:xmax:xip with
    a commit LSN at or before ``upto_lsn``, from the table's ``segments``."""
    names = key_columns(table_state.columns)
    relevant = [
        s
        for s in segments
        if s.table == table_state.key
        and may_hold_unseen(s, xmin)
        and int(s.first_commit_lsn) <= upto_lsn
    ]
    found: set[KeyValues] = set()
    for _, batch in changelog.read_changes(table_state.table, relevant, xid_reference=xmax):
        unseen = not_visible(batch.column(XID), xmin, xmax, xip)
        applied = (
            np.asarray(batch.column(COMMIT_LSN).to_numpy(zero_copy_only=False), dtype=np.uint64)
            <= upto_lsn
        )
        newer = batch.filter(pa.array(unseen & applied))
        if newer.num_rows == 0:
            continue
        if pc.any(pc.equal(newer.column(OP), "T")).as_py():
            return LeftOut(frozenset(), truncated=True)
        present = [n for n in names if n in newer.schema.names]
        if len(present) != len(names):
            continue  # another schema version's key: the destination rebaselines at such a change
        for columns in (names, [old_key_column(n) for n in names]):
            if not all(c in newer.schema.names for c in columns):
                continue
            rows = zip(*(newer.column(c).to_pylist() for c in columns), strict=True)
            found.update(tuple(r) for r in rows if any(v is not None for v in r))
    return LeftOut(frozenset(found))
