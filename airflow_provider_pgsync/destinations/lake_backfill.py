"""The lake destination's backfill: staged rows (and absent keys) as one lake segment.

A backfill's rows wait in ``<table dir>/backfill/<id>/`` (``LakeDestination.backfill_dir``):
Parquet typed like the base when the backfill's Spark job staged them (a filter backfill), or
PostgreSQL text (schema metadata ``pgsync_staged: text``) when ``stage_backfill`` wrote them
(a key-list backfill, read on the Airflow worker). A key-list backfill also leaves
``_absent.parquet``: the keys its snapshot holds no row of (the leading ``_`` keeps it out of
the rows' dataset). ``backfill`` writes one lake segment at the watermark: a ``P`` record per
staged row and a ``D`` record per absent key, both except for the keys touched since the
snapshot; ``apply/backfill.py`` says why that is exact. Streamed batch by batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from airflow_provider_pgsync.apply.backfill import TouchedKeys
from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.destinations.lake_tables import KIND, LSN_COL, POS_COL, SEQ_COL
from airflow_provider_pgsync.destinations.lake_values import text_to_arrow
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

if TYPE_CHECKING:
    from airflow_provider_pgsync.destinations.lake_changes import LakeChanges, _Table

ROWS_FILE = "rows.parquet"
ABSENT_FILE = "_absent.parquet"
TEXT_MARK = {b"pgsync_staged": b"text"}
"""Schema metadata of staged rows held as PostgreSQL text (typed at apply, like changes)."""


def stage_backfill(
    lake: LakeChanges,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    backfill_id: str,
    rows: pa.Table,
    absent: pa.Table,
) -> str:
    """Write a key-list backfill's text rows and absent keys under the table's backfill folder;
    the folder's location. Values are checked against the table's types now (by typing them)."""
    if table not in lake._tables:
        lake.open_table(table, columns, 0)
    opened = lake._tables[table]
    for name in opened.columns:  # a value the table's type cannot hold fails here, not at apply
        text_to_arrow(rows.column(name), opened.types[name], what=f"column {name!r} of table {table}")
    location = lake.lake.backfill_dir(table, backfill_id)
    folder = lake.files.path(location)
    fs = lake.files.fs
    lake.files.make_dir(folder)
    try:
        rows_file, absent_file = (
            lake.files.new_file(f"{folder}/{ROWS_FILE}"),
            lake.files.new_file(f"{folder}/{ABSENT_FILE}"),
        )
        pq.write_table(rows.replace_schema_metadata(TEXT_MARK), rows_file, filesystem=fs)
        pq.write_table(absent, absent_file, filesystem=fs)
    except Exception as exc:
        lake.files.remove(folder)
        raise DestinationError(
            f"lake table {table}: staging backfill {backfill_id} in {folder} failed: {exc}"
        ) from exc
    return location


def backfill(
    lake: LakeChanges,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    location: str,
    touched: TouchedKeys,
    upto: Key,
) -> int:
    """One lake segment at ``upto`` putting the staged rows and deleting the absent keys, except
    the ``touched`` ones (see the module docstring); the records written."""
    if table not in lake._tables:
        lake.open_table(table, columns, 0)
    opened = lake._tables[table]
    if touched.truncated:  # the stream holds every row there is: only the watermark moves
        _segment(lake, table, opened, pa.table({}), upto)
        return 0
    fs = lake.files.fs
    folder = lake.files.path(location)
    staged = ds.dataset(folder, filesystem=fs, format="parquet")
    if sorted(staged.schema.names) != sorted(opened.columns):
        raise DestinationError(
            f"lake table {table}: the backfill staged in {location} has columns "
            f"{', '.join(staged.schema.names)}, the table now {', '.join(opened.columns)}: "
            "the table's columns changed since; run the backfill again"
        )
    as_text = (staged.schema.metadata or {}).get(b"pgsync_staged") == b"text"
    if not opened.keyed:
        if not as_text:
            raise DestinationError(
                f"lake table {table} has no key short of the whole row: no filter backfill"
            )
        return _multiset(lake, table, opened, folder, touched, upto)
    keys = opened.keys

    def typed(part: pa.Table, names: Sequence[str]) -> pa.Table:
        if as_text:
            return pa.table(
                {
                    n: text_to_arrow(part.column(n), opened.types[n], what=f"column {n!r} of table {table}")
                    for n in names
                }
            )
        return pa.table({n: part.column(n).cast(opened.types[n]) for n in names})

    newer = pa.table(  # the changelog's keys are text
        {k: text_to_arrow(touched.keys.column(k), opened.types[k], what=f"key {k!r}") for k in keys}
    )
    schema = pa.schema(
        [
            (KIND, pa.string()),
            *((n, opened.types[n]) for n in opened.columns),
            *((name, pa.int64()) for name in (LSN_COL, SEQ_COL, POS_COL)),
        ]
    )
    segments = lake.files.segments_dir(table, opened.meta)
    lake.files.make_dir(segments)
    staging = lake.files.new_file(f"{segments}/_writing-{uuid.uuid4().hex}.parquet")
    written = 0

    def records(kind: str, part: pa.Table) -> pa.Table:
        count = part.num_rows
        return pa.table(
            [
                pa.array([kind] * count, pa.string()),
                *(
                    part.column(n) if n in part.column_names else pa.nulls(count, opened.types[n])
                    for n in opened.columns
                ),
                pa.array(np.full(count, upto[0], dtype=np.int64)),
                pa.array(np.full(count, upto[1], dtype=np.int64)),
                pa.array(np.arange(written, written + count, dtype=np.int64)),
            ],
            schema=schema,
        )

    absent_path = f"{folder}/{ABSENT_FILE}"
    try:
        with pq.ParquetWriter(staging, schema, filesystem=fs) as out:
            for batch in staged.to_batches(columns=opened.columns):
                rows = typed(pa.Table.from_batches([batch]), opened.columns)
                if newer.num_rows:
                    rows = _without(rows, newer, keys)
                if rows.num_rows:
                    out.write_table(records("P", rows))
                    written += rows.num_rows
            if fs.get_file_info(absent_path).is_file:
                gone = typed(pq.read_table(absent_path, filesystem=fs), keys)
                if newer.num_rows:
                    gone = _without(gone, newer, keys)
                if gone.num_rows:
                    out.write_table(records("D", gone))
                    written += gone.num_rows
        # also when empty: it is the watermark; only into the lineage that is still current
        lake.files.publish_segment(table, opened.meta, staging, upto)
    except Exception as exc:
        lake.files.remove(staging)
        if isinstance(exc, DestinationError):
            raise
        raise DestinationError(
            f"lake table {table}: writing the backfill from {location} failed: {exc}"
        ) from exc
    return written


def _without(rows: pa.Table, newer: pa.Table, keys: list[str]) -> pa.Table:
    """``rows`` without those whose key ``newer`` holds, in their order. The join takes the keys
    and a row number alone: Arrow's joins refuse list and struct columns beside the keys."""
    number = "__pgsync_row"
    left = rows.select(keys).append_column(number, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    kept = left.join(newer.select(keys), keys=keys, join_type="left anti").column(number)
    return rows.take(pa.array(np.sort(kept.to_numpy())))


def _multiset(
    lake: LakeChanges, table: TableRef, opened: _Table, folder: str, touched: TouchedKeys, upto: Key
) -> int:
    """A table whose identity is the row (counted ``+`` and ``-`` records): each staged or
    absent row not touched since the snapshot is made to count as many times as the snapshot
    holds it, by one lake segment of the ``+`` or ``-`` records that make up the difference
    with what the table holds now (its base, then its segments after the base's watermark)."""
    fs, names = lake.files.fs, opened.columns
    staged = _typed_text(pq.read_table(f"{folder}/{ROWS_FILE}", filesystem=fs), opened, table)
    absent = _typed_text(pq.read_table(f"{folder}/{ABSENT_FILE}", filesystem=fs), opened, table)
    newer = set(_row_keys(_typed_text(touched.keys, opened, table), names))
    want: dict[tuple[Any, ...], int] = {}
    examples: dict[tuple[Any, ...], dict[str, Any]] = {}
    for part, counts in ((staged, True), (absent, False)):
        for key, row in zip(_row_keys(part, names), part.to_pylist(), strict=True):
            if key not in newer:
                want[key] = want.get(key, 0) + (1 if counts else 0)
                examples.setdefault(key, row)
    have = _held(lake, table, opened, want, pa.concat_tables([staged, absent])) if want else {}
    records: list[tuple[str, dict[str, Any]]] = []
    for key, count in want.items():
        delta = count - have.get(key, 0)
        records += [("+" if delta > 0 else "-", examples[key])] * abs(delta)
    data = {KIND: pa.array([kind for kind, _ in records], pa.string())}
    data |= {n: pa.array([row[n] for _, row in records], opened.types[n]) for n in names}
    _segment(lake, table, opened, pa.table(data), upto)
    return len(records)


def _segment(lake: LakeChanges, table: TableRef, opened: _Table, records: pa.Table, upto: Key) -> None:
    """``records`` (``_kind`` and the table's columns; none: an empty segment) as the lake
    segment at ``upto``, published by a rename."""
    count = records.num_rows
    data = {KIND: records.column(KIND) if count else pa.array([], pa.string())}
    data |= {n: records.column(n) if count else pa.array([], opened.types[n]) for n in opened.columns}
    data[LSN_COL] = pa.array(np.full(count, upto[0], dtype=np.int64))
    data[SEQ_COL] = pa.array(np.full(count, upto[1], dtype=np.int64))
    data[POS_COL] = pa.array(np.arange(count, dtype=np.int64))
    fs = lake.files.fs
    segments = lake.files.segments_dir(table, opened.meta)
    lake.files.make_dir(segments)
    staging = lake.files.new_file(f"{segments}/_writing-{uuid.uuid4().hex}.parquet")
    try:
        pq.write_table(pa.table(data), staging, filesystem=fs)
        lake.files.publish_segment(table, opened.meta, staging, upto)
    except Exception as exc:
        lake.files.remove(staging)
        if isinstance(exc, DestinationError):
            raise
        raise DestinationError(
            f"lake table {table}: writing a backfill segment to {segments} failed: {exc}"
        ) from exc


def _held(
    lake: LakeChanges, table: TableRef, opened: _Table, wanted: dict[tuple[Any, ...], int], rows: pa.Table
) -> dict[tuple[Any, ...], int]:
    """How many times the table holds each row of ``wanted`` now: its base (unless a TRUNCATE
    came after), plus ``+`` and minus ``-`` records of its segments after the base's watermark
    (after their last TRUNCATE). Files are read filtered on a scalar column's values."""
    names, meta, fs = opened.columns, opened.meta, lake.files.fs
    scalar = next((n for n in names if not pa.types.is_nested(opened.types[n])), None)
    wanted_filter = None
    if scalar is not None:
        values = rows.column(scalar)
        wanted_filter = pc.field(scalar).isin(values.drop_null())
        if values.null_count:
            wanted_filter = wanted_filter | pc.field(scalar).is_null()
    counts: dict[tuple[Any, ...], int] = {}

    def count(part: pa.Table, kinds: list[str] | None) -> None:
        for i, key in enumerate(_row_keys(part.select(names), names)):
            if key in wanted:
                counts[key] = counts.get(key, 0) + (-1 if kinds is not None and kinds[i] == "-" else 1)

    base = ds.dataset(lake.files.path(meta.base), filesystem=fs, format="parquet")
    count(base.to_table(columns=names, filter=wanted_filter), None)
    truncates = pc.field(KIND) == "T"
    for key, path in lake.files.segments(table, meta):
        if meta.watermark is not None and key <= meta.watermark:
            continue
        part = pq.read_table(
            path, filesystem=fs, filters=truncates | wanted_filter if wanted_filter is not None else None
        )
        kinds = part.column(KIND).to_pylist()
        if "T" in kinds:  # everything before the last TRUNCATE is gone
            counts.clear()
            last = len(kinds) - 1 - kinds[::-1].index("T")
            part, kinds = part.slice(last + 1), kinds[last + 1 :]
        count(part, kinds)
    return counts


def _typed_text(part: pa.Table, opened: _Table, table: TableRef) -> pa.Table:
    """Text columns (PostgreSQL's output) typed as the lake table's columns."""
    return pa.table(
        {
            n: text_to_arrow(part.column(n), opened.types[n], what=f"column {n!r} of table {table}")
            for n in opened.columns
        }
    )


def _row_keys(part: pa.Table, names: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each row of ``part`` as a hashable tuple of its values (lists and structs as tuples)."""
    columns = [part.column(n).to_pylist() for n in names]
    return [tuple(_hashable(c[i]) for c in columns) for i in range(part.num_rows)]


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    return value
