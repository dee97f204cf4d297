"""Test helper, run as a process of its own (the embedded Derby metastore is one process's) or in the
worker's resident driver (``run``): lake tables built by hand in one Spark session (bases staged and
published as a baseline does, lake segments written as apply writes them), compacted step by step; prints
on its last line, as JSON, per step: the view's rows before and after the compaction, the model's rows,
the compaction's result and the base version's files with their inode and mtime."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_bucketing import segment_buckets, with_buckets, write_bucketed
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_tables import changes_dir, file_bucket, segment_name, view_name
from airflow_provider_pgsync.destinations.spark_hash import spark_hash
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.spark.compact_job import compact
from airflow_provider_pgsync.spark.lake import LakeBaseWriter
from airflow_provider_pgsync.spark.lake_buckets import stage_bucketed
from tests.spark.lake_spark import lake_test_session

KEYED, KEYLESS = TableRef("public", "items"), TableRef("public", "bag")


class Lake:
    def __init__(self, spark: SparkSession, lake: LakeDestination) -> None:
        self.spark, self.lake, self.files = spark, lake, LakeFiles(lake)
        self.lsn = 1000

    def baseline(
        self,
        table: TableRef,
        rows: list[tuple[Any, ...]],
        names: list[str],
        keys: tuple[str, ...],
        bucketed: bool = False,
    ) -> None:
        """A baseline's base of ``rows``; ``bucketed``: laid out by key hash as it is written."""
        df = self.spark.createDataFrame(rows, "id long, v string" if keys else "x int, y string")
        writer = LakeBaseWriter(self.spark, self.lake, table, keys)
        if bucketed:
            staged, buckets = stage_bucketed(writer, df.toDF(*names), keys, size_bytes=0)
        else:
            staged, buckets = writer.stage(df.toDF(*names)), 0
        written = writer.publish(staged, buckets=buckets)
        writer.clean_up()
        assert written["rows"] == len(rows)

    def segment(
        self, table: TableRef, records: list[tuple[Any, ...]], names: list[str], plain: bool = False
    ) -> None:
        """One lake segment of ``records`` (kind, then the columns), after every earlier one, as
        apply writes it (bucketed once the base is laid out); ``plain``: without buckets, as a
        backfill writes it."""
        meta = self.files.current(table)
        assert meta is not None
        self.lsn += 1000
        folder = changes_dir(self.lake, table, meta.lineage)
        Path(folder).mkdir(parents=True, exist_ok=True)
        types = [pa.int64(), pa.string()] if names[0] == "id" else [pa.int32(), pa.string()]
        data = {
            "_pgsync_kind": pa.array([r[0] for r in records], pa.string()),
            "_pgsync_lsn": pa.array([self.lsn] * len(records), pa.int64()),
            "_pgsync_seq": pa.array([1] * len(records), pa.int64()),
            "_pgsync_pos": pa.array(list(range(len(records))), pa.int64()),
        }
        for i, (name, type_) in enumerate(zip(names, types, strict=True)):
            data[name] = pa.array([r[i + 1] for r in records], type_)
        path = f"{folder}/{segment_name((self.lsn, 1))}"
        typed = dict(zip(names, types, strict=True))
        buckets = 0 if plain else segment_buckets(meta.buckets, meta.keys, typed)
        if buckets:  # as apply writes a segment once the base is laid out
            write_bucketed(with_buckets(pa.table(data), meta.keys, buckets), path, self.files.fs, buckets)
        else:
            pq.write_table(pa.table(data), path)

    def view(self, table: TableRef) -> list[list[Any]]:
        for t in self.spark.catalog.listTables(self.lake.database):
            if t.tableType != "VIEW" and not t.isTemporary:
                self.spark.catalog.refreshTable(f"{self.lake.database}.{t.name}")
        found = self.spark.sql(f"SELECT * FROM {view_name(self.lake, table)}").collect()  # noqa: S608
        return sorted(([list(r) for r in found]), key=lambda r: (r[0] is None, r[0], r[1] is None, r[1]))

    def base_files(self, table: TableRef) -> dict[str, list[int]]:
        """The current base version's Parquet files: name -> [bucket, inode, mtime_ns]."""
        meta = self.files.current(table)
        assert meta is not None
        out: dict[str, list[int]] = {}
        for name in os.listdir(meta.base):
            if name.endswith(".parquet"):
                st, bucket = os.stat(f"{meta.base}/{name}"), file_bucket(name)
                out[name] = [-1 if bucket is None else bucket, st.st_ino, st.st_mtime_ns]
        return out

    def bucket_ids(self, table: TableRef, bucket: int) -> list[int]:
        meta = self.files.current(table)
        assert meta is not None
        ids: list[int] = []
        for name in os.listdir(meta.base):
            if file_bucket(name) == bucket:
                ids += pq.read_table(f"{meta.base}/{name}", columns=["id"]).column("id").to_pylist()
        return ids


def model_rows(model: dict[int, str]) -> list[list[Any]]:
    return [[k, v] for k, v in sorted(model.items())]


def run(spark: SparkSession, lake: LakeDestination) -> Any:
    """The steps in ``spark`` on ``lake``; what they saw."""
    steps: list[dict[str, Any]] = []
    at = Lake(spark, lake)
    names = ["id", "v"]
    model = {i: f"v{i}" for i in range(1, 2001)}

    def step(name: str, table: TableRef = KEYED, expected: list[list[Any]] | None = None) -> None:
        before_files = at.base_files(table)
        before = at.view(table)
        (result,) = compact(spark, lake, [table])
        steps.append(
            {
                "step": name,
                "before": before,
                "after": at.view(table),
                "expected": model_rows(model) if expected is None else expected,
                "result": result,
                "files_before": before_files,
                "files_after": at.base_files(table),
            }
        )

    with LakeBaseWriter(spark, lake, KEYED).catalog():
        at.baseline(KEYED, [(k, v) for k, v in model.items()], names, ("id",))
        # 1: a base from a baseline: every bucket written, laid out by key hash
        records = [("P", i, f"u{i}") for i in range(1, 301)] + [("D", i, None) for i in range(301, 401)]
        records += [("P", i, f"n{i}") for i in range(2001, 2301)] + [("P", 7, "twice")]
        at.segment(KEYED, records, names)
        model.update({i: f"u{i}" for i in range(1, 301)})
        for i in range(301, 401):
            del model[i]
        model.update({i: f"n{i}" for i in range(2001, 2301)} | {7: "twice"})
        step("first")
        # 2: one key changed: its bucket alone is rewritten
        at.segment(KEYED, [("P", 1500, "one"), ("D", 1500, None), ("P", 1500, "again")], names)
        model[1500] = "again"
        step("one key")
        # 3: every row of one bucket deleted: the bucket has no file any more
        bucket = next(b for b, *_ in at.base_files(KEYED).values() if b != step_bucket(steps[-1], 1500))
        gone = at.bucket_ids(KEYED, bucket)
        at.segment(KEYED, [("D", i, None) for i in gone], names)
        for i in gone:
            del model[i]
        step("bucket emptied")
        steps[-1]["emptied"] = bucket
        # 4: a TRUNCATE, then rows after it
        at.segment(
            KEYED, [("P", 5, "before"), ("T", None, None), ("P", 9, "after"), ("P", 10, "after")], names
        )
        model = {9: "after", 10: "after"}
        step("truncate")
        at.segment(KEYED, [("P", 11, "gone"), ("T", None, None)], names)
        model = {}
        step("truncated, nothing after")
        # 5: a rebaseline (a new lineage, a base not laid out yet), then changes
        model = {i: f"r{i}" for i in range(1, 501)}
        at.baseline(KEYED, [(k, v) for k, v in model.items()], names, ("id",))
        at.segment(KEYED, [("P", 3, "x"), ("D", 4, None), ("P", 900, "y")], names)
        model.update({3: "x", 900: "y"})
        del model[4]
        step("rebaselined")
        at.segment(KEYED, [("P", 3, "z")], names)
        model[3] = "z"
        step("after rebaseline")
        # a segment with buckets and one without (a backfill's): Spark groups them both
        at.segment(KEYED, [("P", 3, "m1")], names)
        at.segment(KEYED, [("P", 4, "m2")], names, plain=True)
        model.update({3: "m1", 4: "m2"})
        step("mixed")
        # 6: a baseline that lays its base out by key hash: the first compaction rewrites one bucket
        model = {i: f"b{i}" for i in range(1, 801)}
        at.baseline(KEYED, [(k, v) for k, v in model.items()], names, ("id",), bucketed=True)
        at.segment(KEYED, [("P", 5, "bb"), ("D", 5, None), ("P", 5, "bbb")], names)
        model[5] = "bbb"
        step("bucketed baseline")
        # 7: a table without a key: rows counted
        bag = [(1, "a"), (1, "a"), (2, "b"), (3, None)]
        at.baseline(KEYLESS, bag, ["x", "y"], ())
        at.segment(KEYLESS, [("-", 1, "a"), ("+", 2, "b"), ("+", 4, "d"), ("-", 3, None)], ["x", "y"])
        step("keyless", KEYLESS, [[1, "a"], [2, "b"], [2, "b"], [4, "d"]])
        # 8: nothing new: nothing changes
        step("again", KEYLESS, [[1, "a"], [2, "b"], [2, "b"], [4, "d"]])
    steps.append({"step": "hash", "mismatches": hash_mismatches(spark)})
    return steps


def main(warehouse: str) -> None:
    lake = LakeDestination.from_config({"warehouse": warehouse})
    spark = lake_test_session(lake, "pgsync compaction test")
    steps = run(spark, lake)
    spark.stop()
    print("RESULT " + json.dumps(steps, default=str))


def hash_mismatches(spark: SparkSession, rows: int = 3000) -> list[str]:
    """Spark's hash() and ``spark_hash`` of the same random values of every type it covers, one
    column and several at once (NULLs among them); the rows where they differ."""
    columns = {
        "b": "CAST(rand(1) * 256 - 128 AS TINYINT)",
        "s": "CAST(rand(2) * 65536 - 32768 AS SMALLINT)",
        "i": "CAST(rand(3) * 4294967296 - 2147483648 AS INT)",
        "l": "CAST(rand(4) * 1.8e19 - 9e18 AS BIGINT)",
        "t": "rand(5) < 0.5",
        "d": "date_add(DATE'0001-01-01', CAST(rand(6) * 3652058 AS INT))",
        "ts": "timestamp_micros(CAST(rand(7) * 6e16 - 3e16 AS BIGINT))",
        "ntz": "CAST(timestamp_micros(CAST(rand(8) * 6e15 AS BIGINT)) AS TIMESTAMP_NTZ)",
        "dec": "CAST(rand(9) * 2e13 - 1e13 AS DECIMAL(18,4))",
        "str": "substr(repeat(concat(uuid(), 'é€𝄞'), 3), 1, CAST(rand(10) * 60 AS INT))",
        "bin": "unhex(substr(sha2(CAST(rand(11) AS STRING), 256), 1, CAST(rand(12) * 30 AS INT) * 2))",
    }
    some_null = [
        f"CASE WHEN rand({20 + n}) < 0.05 THEN NULL ELSE {e} END AS {c}"
        for n, (c, e) in enumerate(columns.items())
    ]
    combos = [[c] for c in columns] + [list(columns), ["l", "str"], ["dec", "d", "bin"]]
    values = spark.range(rows).selectExpr(*some_null)
    # the values and their hashes in one pass (uuid() and rand() are drawn once)
    both = values.select("*", *(F.hash(*c).alias("hash " + "|".join(c)) for c in combos)).toArrow()
    found = []
    for combo in combos:
        ours = spark_hash([both.column(c) for c in combo]).tolist()
        theirs = both.column("hash " + "|".join(combo)).to_pylist()
        pairs = enumerate(zip(ours, theirs, strict=True))
        found += [f"{combo} row {n}: {a} != {b}" for n, (a, b) in pairs if a != b]
    return found[:20]


def step_bucket(step: dict[str, Any], key: int) -> int:
    """The bucket a step rewrote for ``key``: the one file whose inode changed."""
    changed = [
        f[0] for n, f in step["files_after"].items() if step["files_before"].get(n, [None, -1])[1] != f[1]
    ]
    return int(changed[0]) if changed else -1


if __name__ == "__main__":
    main(sys.argv[1])
