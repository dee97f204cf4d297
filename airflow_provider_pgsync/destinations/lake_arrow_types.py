"""The Arrow types of the lake's Spark types, for the values apply writes into the lake.

``spark_arrow_type`` / ``spark_schema_to_arrow`` give the Arrow type of a Spark type (the
``"type"`` value of a field of ``StructType.jsonValue()``) or of a whole Spark schema; every
Arrow field, list element and map value they build is nullable. ``spark_type_name`` names an
Arrow type as Spark does, for messages.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import shown

_SIMPLE_SPARK_TYPES: dict[str, pa.DataType] = {
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "string": pa.string(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_SPARK_NAMES: dict[pa.DataType, str] = {arrow: name for name, arrow in _SIMPLE_SPARK_TYPES.items()}
_DECIMAL_TYPE = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_MAX_DECIMAL_PRECISION = 38


def spark_arrow_type(spark_type: str | dict[str, Any]) -> pa.DataType:
    """The Arrow type Spark's type corresponds to; ``spark_type`` is a field's ``"type"`` JSON value."""
    if isinstance(spark_type, str):
        return _simple_arrow_type(spark_type)
    if isinstance(spark_type, dict):
        return _complex_arrow_type(spark_type)
    raise _unknown_spark_type(spark_type)


def spark_schema_to_arrow(struct_json: dict[str, Any]) -> pa.Schema:
    """The Arrow schema of a Spark ``StructType.jsonValue()``; every field is nullable."""
    if not isinstance(struct_json, dict) or struct_json.get("type") != "struct":
        raise ConfigError(
            f"a Spark schema must be a StructType's JSON ({{'type': 'struct', 'fields': [...]}}), "
            f"got {shown(struct_json)}"
        )
    return pa.schema(_arrow_fields(struct_json))


def _simple_arrow_type(name: str) -> pa.DataType:
    if name in _SIMPLE_SPARK_TYPES:
        return _SIMPLE_SPARK_TYPES[name]
    if name == "decimal":
        return pa.decimal128(10, 0)
    match = _DECIMAL_TYPE.fullmatch(name)
    if match is None:
        raise _unknown_spark_type(name)
    precision, scale = int(match[1]), int(match[2])
    if not 1 <= precision <= _MAX_DECIMAL_PRECISION or scale > precision:
        raise ConfigError(
            f"Spark type {name!r} is not a valid decimal: the lake needs 1 <= precision <= 38 and "
            "scale <= precision; fix the lake table's schema"
        )
    return pa.decimal128(precision, scale)


def _complex_arrow_type(spec: dict[str, Any]) -> pa.DataType:
    kind = spec.get("type")
    try:
        if kind == "array":
            return pa.list_(spark_arrow_type(spec["elementType"]))
        if kind == "map":
            return pa.map_(spark_arrow_type(spec["keyType"]), spark_arrow_type(spec["valueType"]))
        if kind == "struct":
            return pa.struct(_arrow_fields(spec))
    except KeyError as exc:
        raise ConfigError(
            f"Spark type {shown(spec)} lacks the key {exc}; fix the lake table's schema"
        ) from None
    raise _unknown_spark_type(spec)


def _arrow_fields(struct_json: dict[str, Any]) -> list[pa.Field]:
    return [
        pa.field(field["name"], spark_arrow_type(field["type"]), nullable=True)
        for field in struct_json["fields"]
    ]


def _unknown_spark_type(spark_type: object) -> ConfigError:
    return ConfigError(
        f"Spark type {shown(spark_type)} has no Arrow counterpart in the lake destination "
        "(it knows byte, short, integer, long, float, double, boolean, binary, string, date, "
        "timestamp, timestamp_ntz, decimal(p,s), array, map and struct); fix the lake table's schema"
    )


def spark_type_name(target: pa.DataType) -> str:
    if pa.types.is_decimal(target):
        return f"decimal({target.precision},{target.scale})"
    return _SPARK_NAMES.get(target, str(target))
