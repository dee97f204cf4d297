"""A keyed lake table's new base version laid out by key-hash buckets, on its files' side.

The merge's tasks write one file per bucket they rewrite (``bucket_merge.py``) and return
``TASK_SUMMARY`` rows; ``finish_buckets`` links the previous version's files of every other
bucket into the new version (a hard link on a local warehouse, a copy elsewhere), counts the
rows and stages the version for the swap. ``move_out`` names the files Spark's writer left
in ``<bucket column>=<b>`` folders by their bucket (``lake_tables.bucket_file``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_tables import BUCKET, LakeTableMeta, bucket_file, file_bucket
from airflow_provider_pgsync.spark.bucket_merge import BucketTask
from airflow_provider_pgsync.spark.lake import LakeBaseWriter, StagedBase

log = logging.getLogger("pgsync.spark")

#: what a bucket's task returns: the bucket, its new file (None when no row is left), its rows
TASK_SUMMARY = StructType(
    [
        StructField(BUCKET, IntegerType()),
        StructField("file", StringType()),
        StructField("rows", LongType()),
    ]
)


@dataclass(frozen=True)
class BucketedBase:
    """A new base version written and counted, not yet visible: ``rewritten`` files were written,
    ``kept`` files of untouched buckets linked from the previous version."""

    staged: StagedBase
    buckets: int
    buckets_rewritten: int
    rewritten: int
    kept: int
    rewritten_rows: int
    merged_by: str
    """How: ``segments`` (each bucket's task read its records from bucketed segments),
    ``arrow`` (Spark grouped the records by bucket for the tasks), ``sql`` (Spark SQL)."""


def base_files(files: LakeFiles, meta: LakeTableMeta, names: list[str]) -> dict[int, list[str]]:
    """The paths of the base version's files ``names``, by bucket (files of no bucket left out)."""
    found: dict[int, list[str]] = {}
    for name in names:
        bucket = file_bucket(name)
        if bucket is not None:
            found.setdefault(bucket, []).append(f"{files.path(meta.base)}/{name}")
    return found


def new_version(
    spark: SparkSession,
    writer: LakeBaseWriter,
    files: LakeFiles,
    meta: LakeTableMeta,
    schema: StructType,
    base: dict[int, list[str]],
) -> tuple[str, StructType, BucketTask]:
    """A new version folder for the merged buckets (made), its columns (``schema``'s, every
    field nullable as Spark reads them), and the task that merges a bucket into it, reading the
    previous version's files ``base`` of each bucket."""
    location = writer.new_location()
    writer.make_location(location)
    target = nullable(schema)
    task = BucketTask(
        fs=files.fs,
        base_files=base,
        location=files.path(location),
        keys=tuple(meta.keys),
        columns=tuple(f.name for f in schema.fields),
        spark_schema=target.json(),
        spark_version=spark.version,
        bucket_column=BUCKET,
    )
    return location, target, task


def finish_buckets(
    spark: SparkSession,
    writer: LakeBaseWriter,
    files: LakeFiles,
    meta: LakeTableMeta,
    location: str,
    target: StructType,
    done: list[Any],
    linked: list[str],
    *,
    every: bool,
    by: str,
) -> BucketedBase:
    """The new version at ``location`` once the bucket tasks wrote ``done`` (rows of
    ``TASK_SUMMARY``, or dicts of its fields): the ``linked`` files of the previous version whose
    buckets were not rewritten are linked into it, and it is staged with its rows counted;
    ``every``: each bucket was rewritten; ``by``: ``BucketedBase.merged_by``."""
    buckets = meta.buckets
    rewritten = {int(r[BUCKET]) for r in done}
    rewritten_rows = sum(int(r["rows"]) for r in done)
    written = sum(1 for r in done if r["file"] is not None)
    kept_rows, kept = link_untouched(files, meta, linked, rewritten, location)
    if written + kept == 0:  # no row left: an empty file keeps the version's columns readable
        empty = f"{location}/_empty"
        spark.createDataFrame([], target).write.parquet(empty)
        written = move_out(files, empty, location, bucket=0)
    staged = writer.stage_files(location, rewritten_rows + kept_rows, target)
    buckets_rewritten = buckets if every else len(rewritten)
    log.info(
        "%s: %d of %d bucket(s) rewritten in Arrow%s (%s rows in %d file(s)), %d file(s) of %s rows kept",
        writer.table,
        buckets_rewritten,
        buckets,
        " from bucketed segments" if by == "segments" else "",
        f"{rewritten_rows:,}",
        written,
        kept,
        f"{kept_rows:,}",
    )
    return BucketedBase(staged, buckets, buckets_rewritten, written, kept, rewritten_rows, by)


def nullable(data_type: Any) -> Any:
    """``data_type`` with every field and element nullable, as Spark reads files with a schema."""
    if isinstance(data_type, StructType):
        return StructType(
            [StructField(f.name, nullable(f.dataType), True, f.metadata) for f in data_type.fields]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(nullable(data_type.keyType), nullable(data_type.valueType), True)
    return data_type


def move_out(files: LakeFiles, staging: str, location: str, bucket: int | None = None) -> int:
    """Move the files Spark wrote under ``staging/_pgsync_bucket=<b>/`` (or in ``staging``, all
    of ``bucket``) to ``location`` named by bucket, then remove ``staging``; how many files."""
    root = files.path(staging)
    folders = [(root, bucket)] if bucket is not None else []
    for folder in files.fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
        if bucket is None and folder.base_name.startswith(BUCKET + "="):
            folders.append((folder.path, int(folder.base_name.split("=", 1)[1])))
    moved = 0
    for path, number in folders:
        for part in files.list(path):
            if part.endswith(".parquet") and not part.startswith((".", "_")):
                files.fs.move(f"{path}/{part}", f"{files.path(location)}/{bucket_file(number, part)}")
                moved += 1
    files.fs.delete_dir(root)
    return moved


def link_untouched(
    files: LakeFiles, meta: LakeTableMeta, old_files: list[str], rewrite: set[int], location: str
) -> tuple[int, int]:
    """Link the previous version's files of buckets not rewritten into ``location``; their rows
    (from the Parquet footers) and how many files."""
    source, target = files.path(meta.base), files.path(location)
    local = files.lake.local_path is not None
    rows = count = 0
    for name in old_files:
        bucket = file_bucket(name)
        if bucket is None or bucket in rewrite:
            continue
        if local:  # the same file under a second name: nothing is copied or changed
            os.link(f"{source}/{name}", f"{target}/{name}")
        else:
            files.fs.copy_file(f"{source}/{name}", f"{target}/{name}")
        with files.fs.open_input_file(f"{target}/{name}") as handle:
            rows += pq.ParquetFile(handle).metadata.num_rows
        count += 1
    return rows, count
