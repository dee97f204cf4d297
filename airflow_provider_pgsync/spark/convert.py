"""Turning the values a JDBC read returns into the destination's Spark types (see ``typemap.spark``)."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from airflow_provider_pgsync.typemap.spark import REFUSED, ColumnRead

_LONGEST = 2**31 - 1  # substr's length: the rest of the text


def column_ref(name: str) -> Column:
    """A column by its exact name (dots, spaces and backticks included)."""
    return F.col("`" + name.replace("`", "``") + "`")


def convert(read: ColumnRead, table: str) -> Column:
    """The column of ``read`` as its Spark type; NaN in a decimal column, or an array value the lake
    cannot hold exactly (``typemap.spark.array_refusal``), stops the job naming it."""
    value = column_ref(read.name)
    what = f"column {read.name!r} of table {table}"
    if read.convert == "native":
        out = value.cast(read.spark_type)
    elif read.convert == "decimal":
        message = (
            f"{what} holds NaN, which Spark's {read.spark_type} "
            "cannot hold: read it as text (a string column) or change the source column's type"
        )
        out = F.when(value == F.lit("NaN"), F.raise_error(F.lit(message))).otherwise(
            value.cast(read.spark_type)
        )
    elif read.convert == "date_days":
        out = F.date_from_unix_date(value)
    elif read.convert == "timestamp_micros":
        out = F.timestamp_micros(value)
    elif read.convert == "timestamp_ntz_micros":
        # the job's session time zone is UTC, so this cast keeps the wall-clock value
        out = F.timestamp_micros(value).cast("timestamp_ntz")
    elif read.convert == "json":
        # the projection's REFUSED is followed by the refusal's message after the column's name
        refusal = F.concat(F.lit(what), value.substr(len(REFUSED) + 1, _LONGEST))
        out = F.when(value.startswith(REFUSED), F.raise_error(refusal)).otherwise(
            F.from_json(value, read.spark_type, {"mode": "FAILFAST"})
        )
    else:
        raise ValueError(f"unknown conversion {read.convert!r} of column {read.name!r}")
    return out.alias(read.name)
