"""One bucket of a keyed lake table compacted in Arrow, inside a Spark task.

A ``BucketTask`` gets a bucket's records as an Arrow table: from Spark, which grouped the
changes by bucket (``lake_buckets.py``), or from a ``SegmentBucketTask``, which reads them from
bucketed lake segments itself (``bucketed_segments.py``). It reads the bucket's base files with
pyarrow (any pyarrow filesystem), keeps the latest record of each key exactly as the view's
``merge_sql`` does (the base's rows come first, then the records by ``(lsn, seq, pos)``; ``P``
keeps the key's row, ``D`` drops it), and writes the bucket's new file with pyarrow's Parquet
writer. A TRUNCATE is cut before the records reach a task. Imports pyarrow and the package's
pure lake modules only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_pgsync.destinations.lake_bucketing import read_buckets
from airflow_provider_pgsync.destinations.lake_tables import (
    BUCKET,
    KIND,
    LSN_COL,
    POS_COL,
    SEQ_COL,
    bucket_file,
)

#: the marker record that asks for a bucket's rewrite without any change of it
REWRITE = "B"
_INDEX = "_pgsync_index"
# what Spark's own Parquet writer records: the Spark schema (so a reader infers exactly the
# lake's types) and its version (files of Spark >= 3 hold proleptic Gregorian dates, as
# pyarrow writes them: no calendar rebase on read, whatever the date)
SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
SPARK_VERSION_KEY = b"org.apache.spark.version"


def merge_bucket(
    base: pa.Table | None, records: pa.Table, keys: Sequence[str], columns: Sequence[str]
) -> pa.Table:
    """The rows of a bucket: ``base`` (rows with unique keys, or None) with ``records`` (``P``
    and ``D`` records, any order; other kinds ignored) applied, the latest record of each key
    winning; sorted by key. Columns: ``columns``, of the records' types."""
    records = records.filter(pc.is_in(records.column(KIND), pa.array(["P", "D"])))
    records = records.sort_by([(LSN_COL, "ascending"), (SEQ_COL, "ascending"), (POS_COL, "ascending")])
    rows = records.select(list(columns))
    kinds = records.column(KIND)
    if base is not None and base.num_rows:
        rows = pa.concat_tables([conform(base, rows.schema), rows])
        kinds = pa.chunked_array(
            [pa.array(["P"] * base.num_rows, pa.string()), *kinds.cast(pa.string()).chunks]
        )
    if rows.num_rows == 0:
        return rows
    index = pa.table(
        {**{k: rows.column(k) for k in keys}, _INDEX: pa.array(range(rows.num_rows), pa.int64())}
    )
    # the last position of each key in that order is its latest record (the base's row: first)
    latest = index.group_by(list(keys)).aggregate([(_INDEX, "max")]).column(f"{_INDEX}_max")
    present = pc.equal(pc.take(kinds, latest), "P")
    kept = rows.take(pc.filter(latest, present))
    return kept.sort_by([(k, "ascending") for k in keys])


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns in its order and types; a column it lacks (added to
    the source table since it was written) is null."""
    arrays = []
    for field in schema:
        if field.name in table.column_names:
            arrays.append(table.column(field.name).cast(field.type))
        else:
            arrays.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class BucketTask:
    """Compacts one bucket per call (``GroupedData.applyInArrow``): ``base_files``, the previous
    version's files of each bucket (paths of ``fs``); ``location``, the new version's folder;
    ``spark_schema``, the Spark schema (JSON) of ``columns``; returns one row
    ``(bucket, file or None when no row is left, rows)``."""

    fs: pafs.FileSystem
    base_files: dict[int, list[str]]
    location: str
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    spark_schema: str
    spark_version: str
    bucket_column: str

    def __call__(self, group: tuple[Any, ...], records: pa.Table) -> pa.Table:
        return self.write(int(group[0].as_py()), records)

    def write(self, bucket: int, records: pa.Table) -> pa.Table:
        """Merge ``records`` into ``bucket``'s base rows and write its new file."""
        base = self.read_base(bucket)
        rows = merge_bucket(base, records, self.keys, self.columns)
        name = None
        if rows.num_rows:
            name = bucket_file(bucket, "arrow.parquet")  # one file a bucket: a retried task overwrites it
            metadata = {
                SPARK_SCHEMA_KEY: self.spark_schema.encode(),
                SPARK_VERSION_KEY: self.spark_version.encode(),
            }
            pq.write_table(
                rows.replace_schema_metadata(metadata), f"{self.location}/{name}", filesystem=self.fs
            )
        return pa.table(
            {
                self.bucket_column: pa.array([bucket], pa.int32()),
                "file": pa.array([name], pa.string()),
                "rows": pa.array([rows.num_rows], pa.int64()),
            }
        )

    def read_base(self, bucket: int) -> pa.Table | None:
        tables = []
        for path in self.base_files.get(bucket, []):
            with self.fs.open_input_file(path) as handle:
                tables.append(pq.ParquetFile(handle).read())
        if not tables:
            return None
        return pa.concat_tables(tables, promote_options="permissive")


def spark_schema_json(fields: list[dict[str, Any]]) -> str:
    """The JSON of a Spark schema of ``fields`` (as Spark's writer records it)."""
    return json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))


@dataclass(frozen=True)
class SegmentBucketTask:
    """Compacts the buckets it is given (``RDD.mapPartitions`` over a run of the touched buckets'
    numbers, in order), reading their records from the bucketed lake ``segments`` itself
    (``lake_bucketing.read_buckets``: each segment opened once, only the row groups of those
    buckets read): no shuffle brings them, and no Spark row is made. ``arrow_schema``: the Arrow
    types of the columns, as the new base holds them. Yields ``{bucket column: bucket, "file":
    name or None, "rows": rows}`` per bucket."""

    task: BucketTask
    segments: tuple[str, ...]
    arrow_schema: pa.Schema

    def __call__(self, buckets: Iterable[int]) -> Iterator[dict[str, Any]]:
        wanted = sorted(buckets)
        if not wanted:
            return
        names = [*self.task.columns, KIND, LSN_COL, SEQ_COL, POS_COL]
        found = read_buckets(self.task.fs, self.segments, wanted[0], wanted[-1], names)
        if found is None:  # pragma: no cover - only buckets with records are given
            return
        of_record = found.column(BUCKET).to_numpy()
        order = np.argsort(of_record, kind="stable")  # records by bucket, each in file order
        ordered, of_ordered = found.take(pa.array(order)), of_record[order]
        starts = np.searchsorted(of_ordered, wanted, side="left")
        ends = np.searchsorted(of_ordered, wanted, side="right")
        for bucket, start, end in zip(wanted, starts.tolist(), ends.tolist(), strict=True):
            if start == end:  # pragma: no cover - a touched bucket has records
                continue
            rows = ordered.slice(start, end - start)
            records = pa.table(
                {
                    **{f.name: rows.column(f.name).cast(f.type) for f in self.arrow_schema},
                    **{n: rows.column(n) for n in (KIND, LSN_COL, SEQ_COL, POS_COL)},
                }
            )
            yield self.task.write(bucket, records).to_pylist()[0]
