"""The lake table's names, generations and added-column types (pure logic)."""

from __future__ import annotations

import pytest

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_tables import (
    LakeTableMeta,
    added_column_type,
    changes_table,
    merge_sql,
    meta_name,
    meta_number,
    segment_key,
    segment_name,
)
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.testing.destination_kit import column


def test_segment_names_sort_by_watermark_and_parse_back() -> None:
    keys = [(0x16B3F10, 2), (0x16B3F10, 10), (0x2_0000_0000, 1), (0xFFFF_FFFF_FFFF_FFFF, 0)]
    names = [segment_name(k) for k in keys]
    assert names == sorted(names)
    assert [segment_key(n) for n in names] == keys
    assert segment_key("_writing-abc.parquet") is None
    assert segment_key("0000000001-1.parquet") is None


def test_meta_files_round_trip_and_number() -> None:
    meta = LakeTableMeta(7, "/w/pgsync/t/base/v1", "v1", (5, 2), {"type": "struct", "fields": []}, ("id",))
    assert LakeTableMeta.from_json(meta.to_json()) == meta
    assert meta_number(meta_name(7)) == 7
    assert meta_number("_writing-1") is None and meta_number("7.json.tmp") is None


def test_changes_tables_are_named_per_lineage() -> None:
    lake = LakeDestination(warehouse="/w")
    name = changes_table(lake, TableRef("public", "orders"), "v20261123T101010Z-ab12cd34")
    assert name == "pgsync.public__orders__changes_v20261123t101010z_ab12cd34"


@pytest.mark.parametrize(
    ("oid", "typmod", "expected"),
    [
        (23, -1, "integer"),
        (1700, (12 << 16 | 2) + 4, "decimal(12,2)"),
        (1700, -1, "string"),
        (1184, -1, "timestamp"),
    ],
)
def test_added_columns_of_common_types_continue(oid: int, typmod: int, expected: str) -> None:
    assert added_column_type(column("c", oid, type_modifier=typmod)) == expected


def test_added_columns_of_other_types_need_a_baseline() -> None:
    assert added_column_type(column("tags", 1007)) is None  # int4[]


def test_merge_sql_bounds_the_segments_and_quotes_names() -> None:
    query = merge_sql(
        base="b", changes="c", columns=["id", "we`ird"], keys=["id"], after=(10, 2), upto=(20, 1)
    )
    assert "`we``ird`" in query
    assert "(_pgsync_lsn > 10 OR (_pgsync_lsn = 10 AND _pgsync_seq > 2))" in query
    assert "(_pgsync_lsn < 20 OR (_pgsync_lsn = 20 AND _pgsync_seq <= 1))" in query
    assert "PARTITION BY `id`" in query
    counted = merge_sql(base="b", changes="c", columns=["a", "b"], keys=[], after=None)
    assert "GROUP BY `a`, `b`" in counted and "WHERE true" in counted


def test_bucket_files_are_named_by_bucket_and_old_generations_have_none() -> None:
    from airflow_provider_pgsync.destinations.lake_tables import bucket_file, file_bucket

    name = bucket_file(37, "part-00001-3f2c-c000.snappy.parquet")
    assert name == "b00037-part-00001-3f2c-c000.snappy.parquet" and file_bucket(name) == 37
    assert file_bucket("part-00001-3f2c-c000.snappy.parquet") is None and file_bucket("_SUCCESS") is None
    meta = LakeTableMeta(3, "/w/b", "v1", (5, 2), {"type": "struct", "fields": []}, ("id",), buckets=16)
    assert LakeTableMeta.from_json(meta.to_json()) == meta
    legacy = meta.to_json().replace(', "buckets": 16', "")
    assert '"buckets"' not in legacy and LakeTableMeta.from_json(legacy).buckets == 0


def test_bucket_count_follows_the_base_size_within_bounds() -> None:
    from airflow_provider_pgsync.spark.lake_buckets import bucket_count

    assert bucket_count(0) == 8 and bucket_count(100 * 2**20) == 8
    assert bucket_count(1024 * 2**20) == 32 and bucket_count(2**50) == 4096
