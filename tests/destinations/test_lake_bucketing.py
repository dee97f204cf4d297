"""Bucketed lake segments: records sorted by their key's bucket, row groups that end with a bucket,
the number of buckets in the footer, and each bucket read back alone with nothing else."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from airflow_provider_pgsync.destinations import lake_bucketing
from airflow_provider_pgsync.destinations.lake_bucketing import (
    buckets_of,
    read_buckets,
    segment_buckets,
    with_buckets,
    write_bucketed,
)
from airflow_provider_pgsync.destinations.lake_tables import BUCKET
from airflow_provider_pgsync.destinations.spark_hash import spark_bucket

FS = pafs.LocalFileSystem()


def _records(count: int) -> pa.Table:
    return pa.table(
        {
            "_pgsync_kind": pa.array(["P"] * count),
            "id": pa.array(range(count), pa.int64()),
            "v": pa.array([f"value {i}" for i in range(count)]),
            # nested columns before the bucket's: Parquet has more leaf columns than Arrow fields
            "s": pa.array([{"a": i, "b": [i]} for i in range(count)]),
            "_pgsync_pos": pa.array(range(count), pa.int64()),
        }
    )


def test_only_tables_with_a_hashable_key_and_a_laid_out_base_get_buckets() -> None:
    types = {"id": pa.int64(), "f": pa.float64(), "v": pa.string()}
    assert segment_buckets(16, ["id", "v"], types) == 16
    assert segment_buckets(0, ["id"], types) == 0  # the base is not laid out
    assert segment_buckets(16, [], types) == 0  # no key
    assert segment_buckets(16, ["id", "f"], types) == 0  # a float key: Spark's path


def test_each_bucket_is_read_back_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = with_buckets(_records(5000), ["id"], 8)
    buckets = records.column(BUCKET).to_pylist()
    assert buckets == sorted(buckets)
    assert buckets == sorted(spark_bucket([_records(5000).column("id")], 8).tolist())
    path = str(tmp_path / "segment.parquet")
    monkeypatch.setattr(lake_bucketing, "_ROW_GROUP_ROWS", 1000)  # row groups of several buckets
    write_bucketed(records, path, FS, 8)
    meta = pq.ParquetFile(path).metadata
    assert buckets_of(meta) == 8
    index = [meta.schema.column(i).path for i in range(meta.num_columns)].index(BUCKET)
    ranges = [
        (meta.row_group(g).column(index).statistics.min, meta.row_group(g).column(index).statistics.max)
        for g in range(meta.num_row_groups)
    ]
    # a row group ends where a bucket ends: no bucket is in two of them
    assert all(high < low for (_, high), (low, _) in itertools.pairwise(ranges))
    seen = 0
    for bucket in range(8):
        found = read_buckets(FS, [path, path], bucket, bucket, ["id", "_pgsync_pos"])
        assert found is not None and found.column_names == ["id", "_pgsync_pos", BUCKET]
        ids = found.column("id").to_pylist()
        assert ids[: len(ids) // 2] == ids[len(ids) // 2 :]  # once from each of the two paths
        expected = [i for i, b in zip(records.column("id").to_pylist(), buckets, strict=True) if b == bucket]
        assert sorted(ids[: len(ids) // 2]) == sorted(expected)
        seen += len(expected)
    assert seen == 5000
    # a run of buckets at once: every record of those buckets, none of the others
    run = read_buckets(FS, [path], 2, 5, ["id"])
    assert run is not None
    assert sorted(run.column(BUCKET).to_pylist()) == sorted(b for b in buckets if 2 <= b <= 5)


def test_a_bucket_without_records_and_an_empty_segment(tmp_path: Path) -> None:
    path = str(tmp_path / "one.parquet")
    records = with_buckets(_records(1), ["id"], 4096)
    write_bucketed(records, path, FS, 4096)
    (bucket,) = records.column(BUCKET).to_pylist()
    other = (bucket + 1) % 4096
    assert read_buckets(FS, [path], other, other, ["id"]) is None
    empty = str(tmp_path / "empty.parquet")
    write_bucketed(with_buckets(_records(0), ["id"], 4), empty, FS, 4)
    assert pq.read_table(empty).num_rows == 0 and buckets_of(pq.ParquetFile(empty).metadata) == 4
    assert buckets_of(pq.ParquetFile(path).metadata) == 4096
    pq.write_table(_records(1), str(tmp_path / "plain.parquet"))
    assert buckets_of(pq.ParquetFile(str(tmp_path / "plain.parquet")).metadata) == 0
