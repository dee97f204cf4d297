"""A keyed lake table's compaction by key-hash buckets: only buckets with changes are rewritten.

The base's files are laid out by ``pmod(hash(keys), buckets)`` (Spark's Murmur3, the same in
every run); file ``b<bucket>-*.parquet`` of a version holds the rows of its bucket
(``lake_tables.bucket_file``). Here, Spark groups the changes by bucket: a compaction reads
the base files of the buckets its changes touch, merges them with the changes in one shuffle
by bucket (the latest record of each key wins, as in the view), writes one file per bucket,
and links the files of every other bucket into the new version as they are
(``bucket_versions.py``). A TRUNCATE among the changes drops the whole base: every bucket is
rewritten from the changes after it. Segments that apply wrote bucket by bucket need no
shuffle (``bucketed_segments.py``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from pyspark.sql import DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DoubleType,
    FloatType,
    MapType,
    StructType,
)

from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_tables import (
    BUCKET,
    KIND,
    LSN_COL,
    POS_COL,
    SEQ_COL,
    LakeTableMeta,
    file_bucket,
)
from airflow_provider_pgsync.spark.bucket_merge import REWRITE
from airflow_provider_pgsync.spark.bucket_versions import (
    TASK_SUMMARY,
    BucketedBase,
    base_files,
    finish_buckets,
    link_untouched,
    move_out,
    new_version,
)
from airflow_provider_pgsync.spark.convert import column_ref
from airflow_provider_pgsync.spark.lake import LakeBaseWriter, StagedBase

log = logging.getLogger("pgsync.spark")

_RANK = "_pgsync_rank"
# a bucket's file of about 32 MB: few enough files for readers, small enough that a compaction
# of few changes rewrites a small part of a big table; at least 8 so every core writes
_BUCKET_BYTES = 32 * 1024 * 1024
_MIN_BUCKETS, _MAX_BUCKETS = 8, 4096
# up to this many changes, their keys are broadcast to the tasks that read the base's files
_BROADCAST_CHANGES = 500_000

def bucket_count(base_bytes: int) -> int:
    """The number of buckets of a base of ``base_bytes`` bytes of Parquet."""
    return max(_MIN_BUCKETS, min(_MAX_BUCKETS, math.ceil(base_bytes / _BUCKET_BYTES)))


def with_bucket(df: DataFrame, keys: Sequence[str], buckets: int, schema: StructType) -> DataFrame:
    """``df`` with its rows' bucket; keys are cast to the base's types first (a hash depends on
    the type: 5 as an int and as a long hash differently)."""
    types = {f.name: f.dataType for f in schema.fields}
    hashed = F.hash(*(column_ref(k).cast(types[k]) for k in keys))
    return df.withColumn(BUCKET, F.pmod(hashed, F.lit(buckets)))


def stage_bucketed(
    writer: LakeBaseWriter, df: DataFrame, keys: Sequence[str], size_bytes: int, location: str | None = None
) -> tuple[StagedBase, int]:
    """Write ``df`` (rows with unique ``keys``, about ``size_bytes`` of Parquet) as a base version
    laid out by key hash, one file per bucket, for ``writer.publish(..., buckets=)``: so the
    first compaction merges its buckets in Arrow instead of shuffling the whole base (a
    baseline's option: its write then costs one shuffle of the rows). Returns the staged base
    and its number of buckets."""
    files = LakeFiles(writer.destination)
    buckets = bucket_count(size_bytes)
    location = location or writer.new_location()
    staging = f"{location}/_staging"
    counted = Observation("pgsync_rows")
    laid_out = with_bucket(df, keys, buckets, df.schema).repartition(buckets, BUCKET)
    (
        laid_out.observe(counted, F.count(F.lit(1)).alias("rows"))
        .write.mode("errorifexists")
        .option("parquet.dictionary.page.size", 64 * 1024)
        .partitionBy(BUCKET)
        .parquet(staging)
    )
    if move_out(files, staging, location) == 0:  # no row: an empty file keeps the columns readable
        empty = f"{location}/_empty"
        df.limit(0).write.parquet(empty)
        move_out(files, empty, location, bucket=0)
    return writer.stage_files(location, int(counted.get["rows"]), df.schema), buckets


def touched(changes: DataFrame) -> tuple[list[int], tuple[int, ...] | None, int]:
    """The buckets ``changes`` (with ``BUCKET``) touch, the position (lsn, seq, pos) of the
    last TRUNCATE among them (None: no TRUNCATE) and their number, in one pass."""
    order = F.struct(F.col(LSN_COL), F.col(SEQ_COL), F.col(POS_COL))
    row = changes.agg(
        F.collect_set(BUCKET).alias("buckets"),
        F.max(F.when(F.col(KIND) == "T", order)).alias("cut"),
        F.count(F.lit(1)).alias("count"),
    ).first()
    assert row is not None
    cut = tuple(row["cut"]) if row["cut"] is not None else None
    return sorted(int(b) for b in row["buckets"]), cut, int(row["count"])


def merge_buckets(
    spark: SparkSession,
    writer: LakeBaseWriter,
    files: LakeFiles,
    meta: LakeTableMeta,
    changes: DataFrame,
    schema: StructType,
    *,
    rewrite_all: bool = False,
    truncates: bool = True,
) -> BucketedBase:
    """Fold ``changes`` (the records after the base's watermark) into a new bucketed base
    version whose columns are ``schema``'s (the base's, and any added since); ``rewrite_all``:
    every bucket (the columns changed); ``truncates``: the changes may hold a TRUNCATE.

    A base laid out by key hash: Spark groups the records by bucket and a task per bucket
    merges them with the bucket's base files in Arrow (``bucket_merge.py``). A base not laid
    out yet, and keys Arrow cannot group exactly (floating point, nested): Spark SQL
    (``_merge_in_sql``)."""
    keys = meta.keys
    columns = [f.name for f in schema.fields]
    types = {f.name: f.dataType for f in schema.fields}
    # a base not laid out yet moves through one shuffle anyway: Spark's window and writer are
    # faster there than moving every row of the base into Python (measured: 8 s against 14 s)
    if not meta.buckets or any(not _arrow_groupable(types[k]) for k in keys):
        return _merge_in_sql(
            spark, writer, files, meta, changes, schema, rewrite_all=rewrite_all, truncates=truncates
        )
    old_files = files.list(files.path(meta.base))
    buckets = meta.buckets
    changes = with_bucket(changes, keys, buckets, schema)
    cut = _cut(changes) if truncates else None
    if cut is not None:  # a TRUNCATE: nothing before it stays, of the base or of the changes
        order = F.struct(F.col(LSN_COL), F.col(SEQ_COL), F.col(POS_COL))
        changes = changes.where(order > F.struct(*(F.lit(v).cast("long") for v in cut)))
    records = changes.where(F.col(KIND) != "T").select(
        *(column_ref(c).cast(types[c]).alias(c) for c in columns), KIND, LSN_COL, SEQ_COL, POS_COL, BUCKET
    )
    every = cut is not None or rewrite_all  # every bucket is written
    base = base_files(files, meta, old_files) if cut is None else {}  # each task reads its bucket's
    if rewrite_all and cut is None:  # a record per bucket: its task runs
        records = records.unionByName(
            spark.range(buckets).select(F.col("id").cast("int").alias(BUCKET), F.lit(REWRITE).alias(KIND)),
            allowMissingColumns=True,
        )
    location, target, task = new_version(spark, writer, files, meta, schema, base)
    # fewer tasks than buckets when they are many: a task merges several, one after the other
    tasks = min(buckets, 4 * spark.sparkContext.defaultParallelism)
    grouped = records.repartition(tasks, BUCKET).groupBy(BUCKET)
    # a function of two arguments (Spark counts a callable object's ``self`` as one)
    done = grouped.applyInArrow(lambda group, rows: task(group, rows), TASK_SUMMARY).collect()
    linked = old_files if cut is None else []
    return finish_buckets(spark, writer, files, meta, location, target, done, linked, every=every, by="arrow")


def _arrow_groupable(data_type: DataType) -> bool:
    """Whether Arrow groups keys of ``data_type`` as Spark and PostgreSQL compare them (not
    floating point: NaN and -0.0; not nested types: Arrow has no hash grouping for them)."""
    return not isinstance(data_type, (FloatType, DoubleType, StructType, ArrayType, MapType))


def _cut(changes: DataFrame) -> tuple[int, ...] | None:
    """The position (lsn, seq, pos) of the last TRUNCATE among ``changes``; None: no TRUNCATE."""
    order = F.struct(F.col(LSN_COL), F.col(SEQ_COL), F.col(POS_COL))
    row = changes.where(F.col(KIND) == "T").agg(F.max(order).alias("cut")).first()
    return tuple(row["cut"]) if row is not None and row["cut"] is not None else None


def _merge_in_sql(
    spark: SparkSession,
    writer: LakeBaseWriter,
    files: LakeFiles,
    meta: LakeTableMeta,
    changes: DataFrame,
    schema: StructType,
    *,
    rewrite_all: bool = False,
    truncates: bool = True,
) -> BucketedBase:
    """``merge_buckets`` by Spark SQL: the latest record of each key by a window (keys Arrow
    cannot group exactly)."""
    keys = meta.keys
    columns = [f.name for f in schema.fields]
    types = {f.name: f.dataType for f in schema.fields}
    old_files = files.list(files.path(meta.base))
    buckets = meta.buckets or bucket_count(
        sum(files.fs.get_file_info(f"{files.path(meta.base)}/{n}").size for n in old_files)
    )
    changes = with_bucket(changes, keys, buckets, schema)
    if meta.buckets or truncates:
        changed, cut, count = touched(changes)
    else:  # every bucket is written anyway, and no TRUNCATE cuts: no pass over the changes
        changed, cut, count = list(range(buckets)), None, 0
    if cut is not None:  # a TRUNCATE: nothing before it stays, of the base or of the changes
        order = F.struct(F.col(LSN_COL), F.col(SEQ_COL), F.col(POS_COL))
        changes = changes.where(order > F.struct(*(F.lit(v).cast("long") for v in cut)))
    rewrite = changed if meta.buckets and cut is None and not rewrite_all else list(range(buckets))
    linked = old_files if cut is None else []
    changes = changes.where(F.col(KIND) != "T")
    records = changes.select(
        *(column_ref(c).cast(types[c]).alias(c) for c in columns), KIND, LSN_COL, SEQ_COL, POS_COL, BUCKET
    )
    base_paths = [meta.base]  # a base not laid out yet: all of it
    if meta.buckets:
        wanted = set(rewrite)
        base_paths = [
            files.location(f"{files.path(meta.base)}/{name}")
            for name in old_files
            if file_bucket(name) in wanted
        ]
    latest = Window.partitionBy(BUCKET, *(column_ref(k) for k in keys)).orderBy(
        F.col(LSN_COL).desc(), F.col(SEQ_COL).desc(), F.col(POS_COL).desc()
    )
    tasks = max(1, len(rewrite))
    base = None
    if cut is None and base_paths:
        base = with_bucket(spark.read.schema(schema).parquet(*base_paths), keys, buckets, schema)
    if base is not None and meta.buckets:
        # laid out already: the latest record of each changed key (one shuffle of the changes
        # by bucket), the base's other rows kept by an anti-join that does not move the base
        # when the changes are few enough to broadcast their keys
        last = records.repartition(tasks, BUCKET).withColumn(_RANK, F.row_number().over(latest))
        last = last.where(F.col(_RANK) == 1)
        changed_keys = last.select(*(column_ref(k) for k in keys))
        if count <= _BROADCAST_CHANGES:
            changed_keys = F.broadcast(changed_keys)
        others = base.join(changed_keys, on=list(keys), how="left_anti")
        merged = others.select(*(column_ref(c) for c in columns), BUCKET).unionByName(
            last.where(F.col(KIND) == "P").select(*(column_ref(c) for c in columns), BUCKET)
        )
    else:
        if base is not None:
            records = base.select(
                *(column_ref(c) for c in columns),
                F.lit("P").alias(KIND),
                F.lit(-1).cast("long").alias(LSN_COL),
                F.lit(0).cast("long").alias(SEQ_COL),
                F.lit(0).cast("long").alias(POS_COL),
                BUCKET,
            ).unionByName(records)
        # one shuffle by bucket: the window's partitions (bucket, keys) and the write's by
        # bucket are both satisfied by it, so the base and the changes move once
        merged = (
            records.repartition(tasks, BUCKET)
            .withColumn(_RANK, F.row_number().over(latest))
            .where((F.col(_RANK) == 1) & (F.col(KIND) == "P"))
            .select(*(column_ref(c) for c in columns), BUCKET)
        )
    location = writer.new_location()
    staging = f"{location}/_staging"
    counted = Observation("pgsync_rows")
    (
        merged.observe(counted, F.count(F.lit(1)).alias("rows"))
        .write.mode("errorifexists")
        .option("parquet.dictionary.page.size", 64 * 1024)
        .partitionBy(BUCKET)
        .parquet(staging)
    )
    rewritten_rows = int(counted.get["rows"])
    written = move_out(files, staging, location)
    kept_rows, kept = link_untouched(files, meta, linked, set(rewrite), location)
    if written + kept == 0:  # no row left: an empty file keeps the version's columns readable
        empty = f"{location}/_empty"
        spark.createDataFrame([], merged.drop(BUCKET).schema).write.parquet(empty)
        written = move_out(files, empty, location, bucket=0)
    staged = writer.stage_files(location, rewritten_rows + kept_rows, merged.drop(BUCKET).schema)
    log.info(
        "%s: %d of %d bucket(s) rewritten (%s rows in %d file(s)), %d file(s) of %s rows kept",
        writer.table,
        len(rewrite),
        buckets,
        f"{rewritten_rows:,}",
        written,
        kept,
        f"{kept_rows:,}",
    )
    return BucketedBase(staged, buckets, len(rewrite), written, kept, rewritten_rows, "sql")
