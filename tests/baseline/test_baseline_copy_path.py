"""The Arrow path (``copy_path='auto'``: binary COPY -> Arrow -> Parquet in Spark tasks) writes
exactly what Spark's JDBC path writes, for every type it takes and the values that are tricky."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_provider_pgsync.errors import BaselineError
from tests.baseline.conftest import RunBaseline
from tests.conftest import Database

TABLE_SQL = """
CREATE DOMAIN small_count AS integer CHECK (VALUE >= 0);
CREATE DOMAIN code3 AS char(3);
CREATE TABLE tricky (
    id integer PRIMARY KEY, s smallint, i integer, b bigint, r real, d double precision,
    flag boolean, t text, v varchar(12), c char(4), day date, ts timestamp, tstz timestamptz,
    u uuid, j jsonb, n numeric, raw bytea, cnt small_count, code code3
);
INSERT INTO tricky VALUES
    (1, 32767, -2147483648, 9223372036854775807, 1.1, 0.1, true, '', 'x', 'a', '2024-02-29',
     '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.654321+02', gen_random_uuid(), '{"a": 1}', 1.50,
     '\\x00ff', 7, 'ab'),
    (2, -32768, 0, -1, 'NaN', 'NaN', false, 'NULL', '"quoted"', 'ab  ', 'infinity', 'infinity',
     'infinity', NULL, '"str"', 'NaN', '', 0, ''),
    (3, 0, 1, 0, 'Infinity', '-Infinity', NULL, E'multi\\nline,with "quotes"\\r\\n', 'comma,', NULL,
     '-infinity', '-infinity', '-infinity', NULL, NULL, NULL, NULL, NULL, NULL),
    (4, NULL, NULL, NULL, '-0', '-0', NULL, E'caf\\u00e9 \\U0001F642 \\\\back', '', '    ', '0044-03-15 BC',
     '1582-10-10 12:00:00', '4713-01-01 00:00:00+00 BC', NULL, 'null', '-0.000', NULL, NULL, NULL),
    (5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     NULL, NULL),
    (6, 1, 2, 3, 3.4028235e38, 1.7976931348623157e308, true, ',', ' ', 'z', '2000-01-01',
     '2000-01-01 00:00:00', '2000-01-01 00:00:00+14', NULL, '[]', 0, '\\x', 2147483647, 'xyz'),
    (7, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '5874897-12-31', '293999-12-31 23:59:59.999999',
     '1969-12-31 23:59:59.999999+00', NULL, NULL, NULL, NULL, NULL, NULL);
"""


WIDTHS = {"day": "int32", "ts": "int64", "tstz": "int64"}


def _rows(location: str) -> tuple[list[str], list[dict[str, Any]]]:
    table = pq.read_table(location)
    schema = [f"{f.name}: {f.type}" for f in table.schema]
    # dates before year 1 do not fit Python's date: compare every column through its integers
    ints = {name: table.column(name).cast(width).to_pylist() for name, width in WIDTHS.items()}
    rows = table.drop_columns(["day", "ts", "tstz"]).to_pylist()
    for index, row in enumerate(rows):
        row.update({name: ints[name][index] for name in ints})
    return schema, sorted(rows, key=lambda r: r["id"])


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


def test_copy_path_writes_what_the_jdbc_path_writes(database: Database, run_baseline: RunBaseline) -> None:
    database.execute(TABLE_SQL)

    jdbc = run_baseline("public.tricky", copy_path="off")
    copy = run_baseline("public.tricky", copy_path="auto", rebaseline=True)

    assert jdbc["rows"] == copy["rows"] == 7
    # each path wrote its own files: Spark's writer names them part-<n>-<uuid>..., COPY part-<n>
    copy_files = [p.name for p in Path(copy["written"][0]["location"]).glob("part-*")]
    jdbc_files = [p.name for p in Path(jdbc["written"][0]["location"]).glob("part-*")]
    assert copy_files and all(re.fullmatch(r"part-\d{5}\.parquet", name) for name in copy_files)
    assert jdbc_files and not any(re.fullmatch(r"part-\d{5}\.parquet", name) for name in jdbc_files)
    jdbc_schema, jdbc_rows = _rows(jdbc["written"][0]["location"])
    copy_schema, copy_rows = _rows(copy["written"][0]["location"])
    assert copy_schema == jdbc_schema
    mismatches = [
        f"id {j['id']} {column}: JDBC {j[column]!r}, COPY {c[column]!r}"
        for j, c in zip(jdbc_rows, copy_rows, strict=True)
        for column in j
        if not _same(j[column], c[column])
    ]
    assert not mismatches, "\n".join(mismatches)
    # the tricky ones, spelled out: NULL vs '' vs 'NULL', padding, newlines, NaN
    by_id = {r["id"]: r for r in copy_rows}
    assert (by_id[1]["t"], by_id[2]["t"], by_id[5]["t"]) == ("", "NULL", None)
    assert by_id[3]["t"] == 'multi\nline,with "quotes"\r\n'
    assert (by_id[2]["c"], by_id[4]["c"], by_id[4]["v"]) == ("ab  ", "    ", "")
    assert math.isnan(by_id[2]["d"]) and by_id[3]["r"] == math.inf and by_id[3]["flag"] is None
    assert by_id[2]["n"] == "NaN" and by_id[4]["n"] == "0.000"
    assert (by_id[1]["raw"], by_id[2]["raw"], by_id[3]["raw"]) == (b"\x00\xff", b"", None)
    assert (by_id[1]["code"], by_id[2]["code"], by_id[6]["cnt"]) == ("ab ", "   ", 2147483647)


def test_timestamps_beyond_arrows_range_fail_the_read(database: Database, run_baseline: RunBaseline) -> None:
    """PostgreSQL's timestamps reach year 294276; microseconds since 1970 in 64 bits do not:
    such a value fails the baseline (on either path), naming it, instead of wrapping around."""
    database.execute("CREATE TABLE far (id integer PRIMARY KEY, at timestamp)")
    database.execute("INSERT INTO far VALUES (1, '2024-01-01'), (2, '294100-01-01 00:00:00')")

    with pytest.raises(BaselineError, match=r"294100-01-01 00:00:00"):
        run_baseline("public.far", copy_path="auto")


def test_copy_path_writes_an_empty_base_for_no_rows(database: Database, run_baseline: RunBaseline) -> None:
    """A partition (here: a whole table, filtered) without rows is an empty file, not an error."""
    database.execute("CREATE TABLE few (id integer PRIMARY KEY, t text)")
    database.execute("INSERT INTO few SELECT g, 'x' FROM generate_series(1, 100) g")

    result = run_baseline({"table": "public.few", "row_filter": "id > 1000"}, copy_path="auto")

    assert result["rows"] == 0
    base = pq.read_table(result["written"][0]["location"])
    assert base.num_rows == 0 and base.schema.names == ["id", "t"]


def test_executors_without_adbc_fall_back_to_jdbc(
    database: Database, run_baseline: RunBaseline, tmp_path: Path
) -> None:
    """Executors whose Python lacks the ADBC driver still baseline the table, through JDBC."""
    shadow = tmp_path / "shadow" / "adbc_driver_postgresql"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('adbc_driver_postgresql is not installed here')\n")
    database.execute("CREATE TABLE plain (id integer PRIMARY KEY, t text)")
    database.execute("INSERT INTO plain SELECT g, 'row ' || g FROM generate_series(1, 50) g")

    result = run_baseline(
        "public.plain", copy_path="auto", spark_conf={"spark.executorEnv.PYTHONPATH": str(shadow.parent)}
    )

    assert result["rows"] == 50
    files = [p.name for p in Path(result["written"][0]["location"]).glob("part-*")]
    assert files and not any(re.fullmatch(r"part-\d{5}\.parquet", name) for name in files)
    assert sorted(read_rows(result)) == [(i, f"row {i}") for i in range(1, 51)]


def read_rows(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    table = pq.read_table(result["written"][0]["location"])
    return list(zip(*(table.column(n).to_pylist() for n in table.column_names), strict=True))
