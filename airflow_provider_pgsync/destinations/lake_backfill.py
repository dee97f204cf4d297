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
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from airflow_provider_pgsync.apply.backfill import TouchedKeys
from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.destinations.lake_tables import KIND, LSN_COL, POS_COL, SEQ_COL, segment_name
from airflow_provider_pgsync.destinations.lake_values import text_to_arrow
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

if TYPE_CHECKING:
    from airflow_provider_pgsync.destinations.lake_changes import LakeChanges

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
    if not opened.keyed:
        raise DestinationError(f"lake table {table} has no key short of the whole row: no backfill")
    for name in opened.columns:  # a value the table's type cannot hold fails here, not at apply
        text_to_arrow(rows.column(name), opened.types[name], what=f"column {name!r} of table {table}")
    location = lake.lake.backfill_dir(table, backfill_id)
    folder = lake.files.path(location)
    fs = lake.files.fs
    fs.create_dir(folder, recursive=True)
    try:
        pq.write_table(rows.replace_schema_metadata(TEXT_MARK), f"{folder}/{ROWS_FILE}", filesystem=fs)
        pq.write_table(absent, f"{folder}/{ABSENT_FILE}", filesystem=fs)
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
    if not opened.keyed:
        raise DestinationError(f"lake table {table} has no key short of the whole row: no backfill")
    if touched.truncated:
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
    fs.create_dir(segments, recursive=True)
    staging = f"{segments}/_writing-{uuid.uuid4().hex}.parquet"
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
                    rows = rows.join(newer, keys=keys, join_type="left anti")
                if rows.num_rows:
                    out.write_table(records("P", rows))
                    written += rows.num_rows
            if fs.get_file_info(absent_path).is_file:
                gone = typed(pq.read_table(absent_path, filesystem=fs), keys)
                if newer.num_rows:
                    gone = gone.join(newer, keys=keys, join_type="left anti")
                if gone.num_rows:
                    out.write_table(records("D", gone))
                    written += gone.num_rows
        if written:
            fs.move(staging, f"{segments}/{segment_name(upto)}")
        else:
            lake.files.remove(staging)
    except Exception as exc:
        lake.files.remove(staging)
        if isinstance(exc, DestinationError):
            raise
        raise DestinationError(
            f"lake table {table}: writing the backfill from {location} failed: {exc}"
        ) from exc
    return written
