"""The fast read of a baseline partition: the source's binary ``COPY`` decoded into Arrow by the
ADBC PostgreSQL driver and written as one Parquet file, in a Spark task (no Spark imports here).

Spark's JDBC source turns every value into a JVM object and every row into a Spark row, and
Spark's Parquet writer encodes row by row: on two cores that measured about 0.2 of the
speed of ``COPY``. For tables whose columns are all numbers, booleans, text, bytea, dates and
timestamps, each task instead reads its ctid range through ADBC (which runs
``COPY ... (FORMAT binary)`` and decodes it in C++ straight into Arrow columns) and hands the
batches to pyarrow's Parquet writer. That measured about twice as fast as parsing COPY's CSV
with pyarrow, and four times as fast as the JDBC path. Values are the same as the JDBC path's
(the same snapshot; projections from ``typemap.spark.arrow_reads``); the tests compare both
paths value by value.
"""

from __future__ import annotations

from collections.abc import Sequence

import adbc_driver_postgresql.dbapi as adbc
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from psycopg import sql

from airflow_provider_pgsync.typemap.spark import ColumnRead

# Spark type of a native read -> Arrow type written
_NATIVE = {
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "string": pa.string(),
}
_CONVERTED = {
    "date_days": pa.date32(),
    "timestamp_micros": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz_micros": pa.timestamp("us"),
}


def _arrow_type(read: ColumnRead) -> pa.DataType:
    return _NATIVE[read.spark_type] if read.convert == "native" else _CONVERTED[read.convert]


def copy_partition(
    conninfo: str,
    session: Sequence[str],
    query: str,
    reads: Sequence[ColumnRead],
    path: str,
) -> int:
    """Run ``session`` (statements that open the transaction and join the snapshot), then write
    the rows of ``query`` to the Parquet file ``path`` (a local path or a pyarrow filesystem
    URI); the row count. A partition without rows still gets a file (schema, no rows)."""
    written = pa.schema([(r.name, _arrow_type(r)) for r in reads])
    filesystem, file_path = (
        pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)
    )
    rows = 0
    # autocommit: the session statements manage the transaction (BEGIN ... SET TRANSACTION SNAPSHOT)
    with adbc.connect(conninfo, autocommit=True) as conn, conn.cursor() as cursor:
        for statement in session:
            cursor.execute(statement)
        cursor.execute(query)
        batches = cursor.fetch_record_batch()
        with pq.ParquetWriter(
            file_path, written, filesystem=filesystem, dictionary_pagesize_limit=64 * 1024
        ) as out:
            for batch in batches:
                # the driver's types, without its field metadata, as the destination's
                columns = [c.cast(t) for c, t in zip(batch.columns, written.types, strict=True)]
                out.write_batch(pa.RecordBatch.from_arrays(columns, schema=written))
                rows += batch.num_rows
        cursor.execute("COMMIT")
    return rows


def copy_sql(query: str, reads: Sequence[ColumnRead], predicate: str) -> str:
    """The ``SELECT`` of one partition of ``query`` (the baseline's subquery, already SQL)."""
    columns = sql.SQL(", ").join(sql.Identifier(r.name) for r in reads)
    statement = sql.SQL("SELECT {} FROM {} WHERE {}")
    return statement.format(columns, sql.SQL(query), sql.SQL(predicate)).as_string(None)
