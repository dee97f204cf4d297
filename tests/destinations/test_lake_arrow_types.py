"""The Arrow types of the lake's Spark types (pure logic)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_pgsync.destinations.lake_arrow_types import spark_arrow_type, spark_schema_to_arrow
from airflow_provider_pgsync.errors import ConfigError

TS_UTC = pa.timestamp("us", tz="UTC")
HSTORE = pa.map_(pa.string(), pa.string())


@pytest.mark.parametrize(
    ("spark", "arrow"),
    [
        ("byte", pa.int8()),
        ("short", pa.int16()),
        ("integer", pa.int32()),
        ("long", pa.int64()),
        ("float", pa.float32()),
        ("double", pa.float64()),
        ("boolean", pa.bool_()),
        ("binary", pa.binary()),
        ("string", pa.string()),
        ("date", pa.date32()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestamp_ntz", pa.timestamp("us")),
        ("decimal(10,2)", pa.decimal128(10, 2)),
        ("decimal(38,18)", pa.decimal128(38, 18)),
        ("decimal(5, 0)", pa.decimal128(5, 0)),
        ("decimal", pa.decimal128(10, 0)),
    ],
)
def test_simple_spark_types(spark: str, arrow: pa.DataType) -> None:
    assert spark_arrow_type(spark) == arrow


def test_array_type_is_a_list_of_its_element_type() -> None:
    spark = {"type": "array", "elementType": "integer", "containsNull": False}
    assert spark_arrow_type(spark) == pa.list_(pa.int32())


def test_nested_array_type() -> None:
    inner = {"type": "array", "elementType": "decimal(12,3)", "containsNull": True}
    spark = {"type": "array", "elementType": inner, "containsNull": True}
    assert spark_arrow_type(spark) == pa.list_(pa.list_(pa.decimal128(12, 3)))


def test_map_type() -> None:
    spark = {"type": "map", "keyType": "string", "valueType": "string", "valueContainsNull": True}
    assert spark_arrow_type(spark) == pa.map_(pa.string(), pa.string())


def test_struct_type_with_nested_fields() -> None:
    spark = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": False, "metadata": {}},
            {
                "name": "tags",
                "type": {"type": "array", "elementType": "string", "containsNull": True},
                "nullable": True,
                "metadata": {},
            },
            {
                "name": "inner",
                "type": {
                    "type": "struct",
                    "fields": [{"name": "at", "type": "timestamp", "nullable": True, "metadata": {}}],
                },
                "nullable": True,
                "metadata": {},
            },
        ],
    }
    expected = pa.struct(
        [
            pa.field("id", pa.int64()),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("inner", pa.struct([pa.field("at", TS_UTC)])),
        ]
    )
    result = spark_arrow_type(spark)
    assert result == expected
    assert all(field.nullable for field in result)


@pytest.mark.parametrize(
    "spark",
    [
        "interval",
        "void",
        "char(3)",
        "Integer",
        "decimal(39,0)",
        "decimal(5,6)",
        "decimal(0,0)",
        {"type": "udt", "class": "x.Y"},
        {"type": "array", "containsNull": True},
        {"type": "map", "keyType": "string"},
        {"type": "struct"},
    ],
)
def test_unknown_spark_types_are_config_errors(spark: str | dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as info:
        spark_arrow_type(spark)
    shown = spark if isinstance(spark, str) else spark["type"]
    assert shown in str(info.value)


def test_spark_schema_to_arrow_makes_every_field_nullable() -> None:
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "integer", "nullable": False, "metadata": {}},
            {"name": "price", "type": "decimal(10,2)", "nullable": True, "metadata": {}},
            {
                "name": "attrs",
                "type": {
                    "type": "map",
                    "keyType": "string",
                    "valueType": "string",
                    "valueContainsNull": True,
                },
                "nullable": True,
                "metadata": {},
            },
        ],
    }
    result = spark_schema_to_arrow(schema)
    assert result == pa.schema(
        [
            pa.field("id", pa.int32(), nullable=True),
            pa.field("price", pa.decimal128(10, 2), nullable=True),
            pa.field("attrs", HSTORE, nullable=True),
        ]
    )
    assert [field.nullable for field in result] == [True, True, True]


@pytest.mark.parametrize("schema", [{"type": "array", "elementType": "string"}, {"fields": []}])
def test_spark_schema_must_be_a_struct(schema: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="StructType"):
        spark_schema_to_arrow(schema)
