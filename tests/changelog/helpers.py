"""Building change tables in the segment schema for the changelog tests."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_pgsync.changelog.schema import segment_schema
from airflow_provider_pgsync.state.model import ColumnInfo

COLUMNS = (
    ColumnInfo("id", 23, -1, True),
    ColumnInfo("name", 1043, 68, False),
    ColumnInfo("doc", 25, -1, False),
)
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def change(
    lsn: int,
    seq: int,
    *,
    op: str = "I",
    xid: int | None = None,
    values: dict[str, str | None] | None = None,
    unchanged: list[str] | None = None,
    old_key: dict[str, str | None] | None = None,
    columns: Sequence[ColumnInfo] = COLUMNS,
) -> dict[str, Any]:
    """One change row as a dict of the segment schema."""
    row: dict[str, Any] = {
        "_op": op,
        "_commit_lsn": lsn,
        "_seq": seq,
        "_xid": lsn % 100_000 if xid is None else xid,
        "_commit_ts": T0 + timedelta(microseconds=lsn),
        "_unchanged": unchanged,
    }
    for c in columns:
        if c.is_key:
            row[f"_old_key_{c.name}"] = (old_key or {}).get(c.name)
    for c in columns:
        row[c.name] = (values or {}).get(c.name, f"{c.name}-{lsn}-{seq}" if op != "T" else None)
    return row


def table_of(rows: Iterable[dict[str, Any]], columns: Sequence[ColumnInfo] = COLUMNS) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=segment_schema(columns))


def changes(txns: Iterable[tuple[int, int]], columns: Sequence[ColumnInfo] = COLUMNS) -> pa.Table:
    """A table with ``n`` inserts for each (commit lsn, n) transaction."""
    return table_of([change(lsn, s, columns=columns) for lsn, n in txns for s in range(n)], columns)


def keys(batches: Iterable[tuple[int, pa.RecordBatch]]) -> list[tuple[int, int]]:
    """The (commit lsn, seq) keys of everything yielded by read_changes, in order."""
    out: list[tuple[int, int]] = []
    for _, batch in batches:
        out += zip(batch.column("_commit_lsn").to_pylist(), batch.column("_seq").to_pylist(), strict=True)
    return out


def bulk(first_lsn: int, txns: int, per_txn: int) -> pa.Table:
    """A large table (``txns * per_txn`` rows) built with vectorised Arrow calls."""
    n = txns * per_txn
    lsn = np.repeat(np.arange(txns, dtype=np.uint64) * 16 + first_lsn, per_txn)
    seq = np.tile(np.arange(per_txn, dtype=np.int64), txns)
    ids = pc.cast(pa.array(lsn.astype(np.int64) * 1000 + seq), pa.string())  # a function of the key
    arrays = [
        pa.repeat("I", n),
        pa.array(lsn, pa.uint64()),
        pa.array(seq, pa.int64()),
        pa.array((lsn % 4_000_000_000).astype(np.int64), pa.int64()),
        pa.repeat(pa.scalar(T0, pa.timestamp("us", tz="UTC")), n),
        pa.nulls(n, pa.list_(pa.string())),
        pa.nulls(n, pa.string()),
        ids,
        pa.nulls(n, pa.string()),
        pa.nulls(n, pa.string()),
    ]
    return pa.Table.from_arrays(arrays, schema=segment_schema(COLUMNS))


def drain(batches: Iterator[tuple[int, pa.RecordBatch]]) -> pa.Table:
    return pa.Table.from_batches([b for _, b in batches])
