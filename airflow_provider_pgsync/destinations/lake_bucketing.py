"""A lake segment's records laid out by the key-hash buckets of the table's base.

Once a keyed table's base is laid out by ``pmod(hash(keys), buckets)`` (``LakeTableMeta.buckets``,
``spark/lake_buckets.py``), apply gives each record of a segment the bucket of its key, computed
as Spark does (``spark_hash.py``), in a column ``_pgsync_bucket``; it writes the records sorted by
bucket, a row group ending only at a bucket's end, and records the number of buckets in the
file's metadata. A compaction then reads, for each bucket it rewrites, only that bucket's row
groups of each segment (``read_buckets``), and needs no shuffle of the changes. The view reads
the segments by their declared columns and never sees the bucket column.

A segment written before the base was laid out, by a backfill, or of a table whose key type
``spark_hash`` does not cover, has no buckets: the compaction then groups the records itself.
Imports pyarrow and NumPy only: used by apply (the Airflow worker) and the Spark jobs' tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_pgsync.destinations.lake_tables import BUCKET
from airflow_provider_pgsync.destinations.spark_hash import spark_bucket, supported

#: the footer metadata key holding the number of buckets a segment's records were given
BUCKETS_KEY = b"pgsync.buckets"
# a row group ends at the end of a bucket once it holds this many rows: a large batch has a
# row group per bucket, a small one a few row groups of many buckets
_ROW_GROUP_ROWS = 64 * 1024


def segment_buckets(buckets: int, keys: Sequence[str], types: dict[str, pa.DataType]) -> int:
    """How many buckets apply gives a segment's records: the base's, when the table has a key
    of types ``spark_hash`` covers; 0 (no buckets) otherwise."""
    if buckets <= 0 or not keys or not all(supported(types[k]) for k in keys):
        return 0
    return buckets


def with_buckets(records: pa.Table, keys: Sequence[str], buckets: int) -> pa.Table:
    """``records`` with each record's bucket (of its key columns) in ``BUCKET``, sorted by it
    (the order of records is their ``_pgsync_pos``, not their place in the file)."""
    bucket = spark_bucket([records.column(k) for k in keys], buckets)
    order = np.argsort(bucket, kind="stable")
    return records.take(pa.array(order)).append_column(BUCKET, pa.array(bucket[order], pa.int32()))


def write_bucketed(records: pa.Table, path: str, fs: pafs.FileSystem, buckets: int) -> None:
    """Write ``records`` (sorted by ``BUCKET``, of ``buckets`` buckets) to ``path``: a row group
    ends only where a bucket ends, once it holds enough rows; the footer names ``buckets``."""
    metadata = dict(records.schema.metadata or {})
    metadata[BUCKETS_KEY] = str(buckets).encode()
    table = records.replace_schema_metadata(metadata)
    bucket = table.column(BUCKET).to_numpy()
    ends = [*(np.flatnonzero(np.diff(bucket)) + 1).tolist(), table.num_rows]
    with pq.ParquetWriter(path, table.schema, filesystem=fs) as out:
        if table.num_rows == 0:
            out.write_table(table)
            return
        start = 0
        for end in ends:
            if end - start >= _ROW_GROUP_ROWS or end == table.num_rows:
                out.write_table(table.slice(start, end - start), row_group_size=end - start)
                start = end


def buckets_of(metadata: pq.FileMetaData) -> int:
    """The number of buckets a segment's records were given (its footer); 0 when none."""
    value = (metadata.metadata or {}).get(BUCKETS_KEY)
    return int(value) if value is not None and value.isdigit() else 0


def read_buckets(
    fs: pafs.FileSystem, paths: Sequence[str], first: int, last: int, columns: Sequence[str]
) -> pa.Table | None:
    """The records of buckets ``first`` to ``last`` in the bucketed segments ``paths`` (None:
    there are none), each file opened once and only its row groups whose bucket range meets
    those buckets read; columns ``columns`` and ``BUCKET``, in file order."""
    parts = []
    for path in paths:
        with fs.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            index = _leaf_column(parquet.metadata, BUCKET)
            groups = []
            for group in range(parquet.metadata.num_row_groups):
                stats = parquet.metadata.row_group(group).column(index).statistics
                if stats is None or not stats.has_min_max or (stats.min <= last and stats.max >= first):
                    groups.append(group)
            if not groups:
                continue
            read = parquet.read_row_groups(groups, columns=[*columns, BUCKET])
        bucket = read.column(BUCKET)
        inside = pc.and_(pc.greater_equal(bucket, first), pc.less_equal(bucket, last))
        found = read.filter(inside).select([*columns, BUCKET])
        if found.num_rows:
            parts.append(found)
    if not parts:
        return None
    return pa.concat_tables(parts, promote_options="permissive")


def _leaf_column(metadata: pq.FileMetaData, name: str) -> int:
    """The index of top-level column ``name`` among the file's leaf columns (a nested column
    before it has several)."""
    for index in range(metadata.num_columns):
        if metadata.schema.column(index).path == name:
            return index
    raise KeyError(f"no column {name!r} in the segment")
