"""The segment schema and its reserved names."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_pgsync.changelog import RESERVED, segment_schema
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo


def col(name: str, key: bool = False) -> ColumnInfo:
    return ColumnInfo(name, 25, -1, key)


def test_layout_meta_then_old_keys_then_row_columns() -> None:
    schema = segment_schema([col("a"), col("k2", key=True), col("k1", key=True)])
    assert schema.names == [*RESERVED, "_old_key_k2", "_old_key_k1", "a", "k2", "k1"]
    assert schema.field("_op").type == pa.string() and not schema.field("_op").nullable
    assert schema.field("_commit_lsn").type == pa.uint64() and not schema.field("_commit_lsn").nullable
    assert schema.field("_seq").type == pa.int64() and not schema.field("_seq").nullable
    assert schema.field("_xid").type == pa.int64() and not schema.field("_xid").nullable
    assert schema.field("_commit_ts").type == pa.timestamp("us", tz="UTC")
    assert not schema.field("_commit_ts").nullable
    assert schema.field("_unchanged").type == pa.list_(pa.string()) and schema.field("_unchanged").nullable
    for name in ("_old_key_k1", "a", "k1"):
        assert schema.field(name).type == pa.string() and schema.field(name).nullable


def test_table_without_columns_has_only_change_columns() -> None:
    assert segment_schema([]).names == list(RESERVED)


@pytest.mark.parametrize("name", [*RESERVED])
def test_reserved_name_collision_names_table_column_and_fix(name: str) -> None:
    table = TableRef("Sales", "orders")
    with pytest.raises(ConfigError) as err:
        segment_schema([col("id", key=True), col(name)], table=table)
    text = str(err.value)
    assert repr(name) in text and '"Sales".orders' in text
    assert "Rename the column" in text and "columns in the pipeline's config" in text


def test_old_key_collision_only_when_exact() -> None:
    with pytest.raises(ConfigError, match="_old_key_id"):
        segment_schema([col("id", key=True), col("_old_key_id")], table="public.t")
    # similar names that do not collide are fine
    schema = segment_schema([col("id", key=True), col("_old_key_other"), col("_operation"), col("_seq2")])
    assert "_old_key_other" in schema.names and "_operation" in schema.names


def test_duplicate_column_names_rejected() -> None:
    with pytest.raises(ConfigError, match="two columns named 'a'"):
        segment_schema([col("a"), col("a")])
