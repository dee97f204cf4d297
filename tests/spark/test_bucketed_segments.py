"""How a compaction from bucketed segments splits its work (``spark/bucketed_segments.plan``):
the buckets the records touch, tasks as the changes and the cores warrant, more when a task's
share would be too large, and none (Spark's shuffle instead) when every task would read too
many segments."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_bucketing import with_buckets, write_bucketed
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_tables import BUCKET
from airflow_provider_pgsync.spark import bucketed_segments
from airflow_provider_pgsync.spark.bucketed_segments import plan


def _segments(tmp_path: Path, files: LakeFiles, count: int, rows: int) -> tuple[list[str], set[int]]:
    paths, touched = [], set()
    for n in range(count):
        ids = pa.array(range(n * rows, (n + 1) * rows), pa.int64())
        records = with_buckets(pa.table({"_pgsync_kind": pa.array(["P"] * rows), "id": ids}), ["id"], 64)
        touched.update(records.column(BUCKET).to_pylist())
        path = str(tmp_path / f"segment-{n}.parquet")
        write_bucketed(records, path, files.fs, 64)
        paths.append(path)
    return paths, touched


def test_the_plan_follows_the_changes_and_the_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = LakeFiles(LakeDestination.from_config({"warehouse": str(tmp_path / "lake")}))
    paths, touched = _segments(tmp_path, files, 3, 2000)
    small = plan(files, paths, cores=8)
    assert small is not None and small.buckets == sorted(touched)
    assert small.tasks == 1  # a few kB of changes: one task reads each segment once

    monkeypatch.setattr(bucketed_segments, "_TASK_BYTES_MIN", 1)
    assert plan(files, paths, cores=8) == bucketed_segments.BucketPlan(sorted(touched), 8)  # a task a core

    monkeypatch.setattr(bucketed_segments, "_TASK_BYTES_MAX", 1)
    capped = plan(files, paths, cores=8)  # each task's share bounded: more tasks than cores
    assert capped is not None and capped.tasks == len(touched)

    monkeypatch.setattr(bucketed_segments, "_MAX_READS", 3 * len(touched) - 1)
    assert plan(files, paths, cores=8) is None  # every task reading every segment: too many reads
