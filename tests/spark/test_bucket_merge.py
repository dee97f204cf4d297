"""The Arrow merge of one bucket (``spark/bucket_merge.py``) against a model of the view's
merge (the latest record of each key wins; the base's rows come before every record), on
random changes with composite keys, several segments and records in any order; and the
file a task writes: Spark's schema and version in its footer, types as they were."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from airflow_provider_pgsync.destinations.lake_tables import KIND, LSN_COL, POS_COL, SEQ_COL
from airflow_provider_pgsync.spark.bucket_merge import (
    SPARK_SCHEMA_KEY,
    SPARK_VERSION_KEY,
    BucketTask,
    conform,
    merge_bucket,
)

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string()), ("v", pa.decimal128(12, 2)), ("t", pa.int32())])
KEYS, COLUMNS = ("a", "b"), ("a", "b", "v", "t")
RECORD = pa.schema(
    [*SCHEMA, (KIND, pa.string()), (LSN_COL, pa.int64()), (SEQ_COL, pa.int64()), (POS_COL, pa.int64())]
)


def _model(base: list[tuple], records: list[tuple]) -> list[tuple]:
    rows = {(r[0], r[1]): r for r in base}
    for rec in sorted(records, key=lambda r: (r[5], r[6], r[7])):
        if rec[4] == "P":
            rows[(rec[0], rec[1])] = rec[:4]
        elif rec[4] == "D":
            rows.pop((rec[0], rec[1]), None)
    return sorted(rows.values(), key=lambda r: (r[0], r[1]))


def _table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


@pytest.mark.parametrize("seed", range(20))
def test_merge_bucket_matches_the_views_merge(seed: int) -> None:
    rng = random.Random(seed)
    keys = [(rng.randrange(30), rng.choice("xyz")) for _ in range(60)]
    base = [(a, b, Decimal(rng.randrange(10_000)) / 100, rng.randrange(5)) for a, b in set(keys[:30])]
    records = []
    for segment in range(rng.randrange(1, 5)):
        lsn, seq = 100 * (segment + 1), rng.randrange(3)
        for pos in range(rng.randrange(0, 40)):
            a, b = rng.choice(keys)
            if rng.random() < 0.3:  # a DELETE sets the key only
                records.append((a, b, None, None, "D", lsn, seq, pos))
            else:
                value = None if rng.random() < 0.1 else Decimal(rng.randrange(10_000)) / 100
                records.append((a, b, value, rng.randrange(5), "P", lsn, seq, pos))
    rng.shuffle(records)  # a Spark group's records come in no particular order
    merged = merge_bucket(_table(base, SCHEMA) if base else None, _table(records, RECORD), KEYS, COLUMNS)
    assert [tuple(r.values()) for r in merged.to_pylist()] == _model(base, records)
    assert merged.schema == SCHEMA


def test_merge_bucket_without_records_keeps_the_base_and_ignores_markers() -> None:
    base = [(1, "x", Decimal("1.50"), 1), (2, "y", None, 2)]
    marker = [(None, None, None, None, "B", None, None, None)]
    merged = merge_bucket(_table(base, SCHEMA), _table(marker, RECORD), KEYS, COLUMNS)
    assert [tuple(r.values()) for r in merged.to_pylist()] == base
    emptied = merge_bucket(
        _table(base, SCHEMA), _table([(1, "x", None, None, "D", 5, 0, 0)], RECORD), KEYS, COLUMNS
    )
    assert [tuple(r.values()) for r in emptied.to_pylist()] == base[1:]


def test_conform_adds_missing_columns_as_null_and_casts() -> None:
    old = pa.table({"a": pa.array([1], pa.int32()), "b": ["x"]})
    assert conform(old, SCHEMA).to_pylist() == [{"a": 1, "b": "x", "v": None, "t": None}]


def test_a_task_writes_its_bucket_with_sparks_footer(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
            ("tags", pa.list_(pa.string())),
            ("attrs", pa.map_(pa.string(), pa.string())),
            ("pair", pa.struct([("x", pa.int32()), ("y", pa.string())])),
        ]
    )
    far = dt.datetime(1, 1, 1, tzinfo=dt.UTC)  # before 1582: no calendar rebase may apply
    base_row = {"id": 1, "at": far, "day": dt.date(1, 1, 1), "tags": ["a", None], "attrs": [("k", "v")]}
    base_row["pair"] = {"x": 1, "y": "p"}
    pq.write_table(pa.Table.from_pylist([base_row], schema=schema), tmp_path / "b00003-old.parquet")
    new = {**base_row, "id": 2, "tags": [], "pair": None, "attrs": None}
    records = pa.Table.from_pylist(
        [{**new, KIND: "P", LSN_COL: 7, SEQ_COL: 0, POS_COL: 0, "_pgsync_bucket": 3}],
        schema=pa.schema([*schema, *list(RECORD)[4:], ("_pgsync_bucket", pa.int32())]),
    )
    out = tmp_path / "new"
    out.mkdir()
    task = BucketTask(
        fs=pafs.LocalFileSystem(),
        base_files={3: [str(tmp_path / "b00003-old.parquet")]},
        location=str(out),
        keys=("id",),
        columns=tuple(schema.names),
        spark_schema='{"type":"struct","fields":[]}',
        spark_version="4.2.0",
        bucket_column="_pgsync_bucket",
    )
    summary = task((pa.scalar(3, pa.int32()),), records).to_pylist()
    assert summary == [{"_pgsync_bucket": 3, "file": "b00003-arrow.parquet", "rows": 2}]
    written = pq.read_table(out / "b00003-arrow.parquet")
    assert (
        written.schema.metadata[SPARK_VERSION_KEY] == b"4.2.0" and SPARK_SCHEMA_KEY in written.schema.metadata
    )
    assert written.to_pylist() == [base_row, new]
