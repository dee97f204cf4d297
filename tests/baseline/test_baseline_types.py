"""Every type of DESIGN §6 through a real baseline (PostgreSQL -> JDBC -> Spark -> Parquet).

One table holds each type; one baseline copies it and the Parquet base is compared value
by value with what psycopg reads from the source, mapped as ``typemap/spark.py`` documents.
A second baseline checks that a NaN in a ``numeric(p,s)`` column stops the job, naming the
column, before anything is published. Each baseline starts Spark (15-60 s).

Without the hstore extension the table simply has no hstore column.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from airflow_provider_pgsync.errors import BaselineError
from airflow_provider_pgsync.state.model import Errored
from tests.baseline.conftest import RunBaseline, pipeline_state, read_base
from tests.conftest import Database
from tests.support.all_types import ANCIENT_ID, FORTY_DIGITS, create_all_types

TABLE = "all_types"

# the ends of Spark's documented range, standing in for PostgreSQL's ±infinity
DATE_MAX, DATE_MIN = date(9999, 12, 31), date(1, 1, 1)
TS_MAX, TS_MIN = datetime(9999, 12, 31, 23, 59, 59, 999999), datetime(1, 1, 1)
EPOCH_DAY = date(1970, 1, 1).toordinal()


# their values in the base (rows not named here hold NULL), written out by hand: every string
# is PostgreSQL's output text under the baseline's settings (UTC, ISO)
DOC_1 = {
    "title": "t",
    "body": "<d/>",
    "day": "2024-02-29",
    "at": "2024-01-01 10:00:00.5",
    "meta": '{"k": [1, "x"]}',
    "flag": True,
}
DOCS_1 = {"title": "u", "body": "<e/>", "day": "1999-12-31", "at": "2000-01-01 00:00:00", "meta": "[]"}
DOCS_1["flag"] = None
DOC_3 = {"title": "", "body": "", "day": "infinity", "at": "-infinity", "meta": "null", "flag": False}
TEXT_TYPES_EXPECTED: dict[int, dict[str, Any]] = {
    1: {
        "c_xml": '<a x="1">caf\u00e9 &amp; b</a>',
        "c_xml_arr": ["<a/>", None, "<b>t</b>"],
        "c_int4range": "[1,10)",
        "c_tstzrange": '["2024-01-01 08:00:00+00",infinity)',
        "c_doc": DOC_1,
        "c_docs": [DOCS_1, None],
        "c_date_arr": ["2024-01-01", None, "infinity"],
    },
    2: {
        "c_xml": "text only",
        "c_xml_arr": [],
        "c_int4range": "empty",
        "c_tstzrange": "empty",
        "c_doc": dict.fromkeys(DOC_1),
        "c_docs": [],
        "c_date_arr": [],
    },
    3: {
        "c_xml": '<?xml version="1.0" standalone="yes"?><s/>',
        "c_int4range": "(,)",
        "c_doc": DOC_3,
    },
}
TEXT_TYPES = ("c_xml", "c_xml_arr", "c_int4range", "c_tstzrange", "c_doc", "c_docs", "c_date_arr")

ANCIENT_DAYS = DATE_MIN.toordinal() - 1 - EPOCH_DAY  # 1 BC is the year 0: the day before 0001-01-01
ANCIENT_TS_MICROS = (DATE_MIN.toordinal() - EPOCH_DAY) * 86_400_000_000 - 500_000
# the Gregorian calendar repeats every 400 years (146097 days): 12000-06-01 is 2000-06-01 + 25 cycles
FUTURE_TSTZ_MICROS = ((date(2000, 6, 1).toordinal() - EPOCH_DAY) + 25 * 146_097) * 86_400_000_000 + 1

# Columns whose Spark type is string holding PostgreSQL's text output (read with ::text).
TEXT_COLUMNS = (
    "c_num",
    "c_num5010",
    "c_numneg",
    "c_text",
    "c_varchar",
    "c_time",
    "c_timetz",
    "c_interval",
    "c_uuid",
    "c_json",
    "c_jsonb",
    "c_inet",
    "c_cidr",
    "c_macaddr",
    "c_money",
    "c_bit",
    "c_varbit",
    "c_enum",
    "c_dom_text",
)
# Columns whose psycopg value is already the expected Python value.
NATIVE_COLUMNS = ("c_int2", "c_int4", "c_int8", "c_bool", "c_dom_int", "c_int_arr", "c_int_2d", "c_text_arr")

EXPECTED_TYPES = {
    "id": "int32",
    "c_int2": "int16",
    "c_int4": "int32",
    "c_int8": "int64",
    "c_num124": "decimal128(12, 4)",
    "c_num": "string",
    "c_num5010": "string",
    "c_numneg": "string",
    "c_real": "float",
    "c_double": "double",
    "c_bool": "bool",
    "c_text": "string",
    "c_varchar": "string",
    "c_char": "string",
    "c_bytea": "binary",
    "c_date": "date32[day]",
    "c_time": "string",
    "c_timetz": "string",
    "c_ts": "timestamp[us]",
    "c_tstz": "timestamp[us, tz=UTC]",
    "c_interval": "string",
    "c_uuid": "string",
    "c_json": "string",
    "c_jsonb": "string",
    "c_inet": "string",
    "c_cidr": "string",
    "c_macaddr": "string",
    "c_money": "string",
    "c_bit": "string",
    "c_varbit": "string",
    "c_enum": "string",
    "c_dom_int": "int32",
    "c_dom_text": "string",
    "c_int_arr": "list<int32>",
    "c_int_2d": "list<list<int32>>",
    "c_text_arr": "list<string>",
    "c_num_arr": "list<string>",
    "c_float_arr": "list<double>",
    "c_comp": "string",
    "c_comp2": "struct<label: string, tags: list<int32>, at: string>",
    "c_xml": "string",
    "c_xml_arr": "list<string>",
    "c_int4range": "string",
    "c_tstzrange": "string",
    "c_doc": "struct<title: string, body: string, day: string, at: string, meta: string, flag: bool>",
    "c_docs": "list<struct<title: string, body: string, day: string, at: string, meta: string, flag: bool>>",
    "c_date_arr": "list<string>",
    "c_hstore": "map<string, string>",
}


# ---- helpers -------------------------------------------------------------------------------


def type_shape(t: pa.DataType) -> str:
    """An Arrow type as text without the names of list items and map entries (Parquet
    writers name them differently) but with time zones, units and decimal precision."""
    if pa.types.is_map(t):
        return f"map<{type_shape(t.key_type)}, {type_shape(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{type_shape(t.value_type)}>"
    if pa.types.is_struct(t):
        fields = ", ".join(f"{t.field(i).name}: {type_shape(t.field(i).type)}" for i in range(t.num_fields))
        return f"struct<{fields}>"
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.unit}, tz={t.tz}]" if t.tz else f"timestamp[{t.unit}]"
    return str(t)


def float32(value: float | None) -> float | None:
    """``value`` rounded to the nearest float32, as a Python float (what a real column holds)."""
    return None if value is None else struct.unpack("<f", struct.pack("<f", value))[0]


def same(actual: Any, expected: Any) -> bool:
    """Equality that also compares NaN, the sign of zero, Decimal digits and nested values."""
    if isinstance(expected, float):
        if not isinstance(actual, float):
            return False
        if math.isnan(expected):
            return math.isnan(actual)
        return actual == expected and math.copysign(1, actual) == math.copysign(1, expected)
    if isinstance(expected, Decimal):
        return isinstance(actual, Decimal) and str(actual) == str(expected)
    if isinstance(expected, datetime):
        return (
            isinstance(actual, datetime)
            and actual == expected
            and (actual.utcoffset() is None) == (expected.utcoffset() is None)
            and (actual.utcoffset() in (None, timedelta(0)))
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(same(a, e) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(same(actual[k], expected[k]) for k in expected)
        )
    return type(actual) is type(expected) and actual == expected


def date_of(text: str | None) -> date | None:
    """A date column's expected value from its ISO text."""
    if text is None:
        return None
    return {"infinity": DATE_MAX, "-infinity": DATE_MIN}.get(text) or date.fromisoformat(text)


def timestamp_of(text: str | None, finite: datetime | None, *, tz: bool) -> datetime | None:
    """A timestamp(tz) column's expected value: the psycopg value (finite) or an extreme."""
    if text is None:
        return None
    if text in ("infinity", "-infinity"):
        end = TS_MAX if text == "infinity" else TS_MIN
        return end.replace(tzinfo=UTC) if tz else end
    assert finite is not None, text
    return finite.astimezone(UTC) if tz else finite


@pytest.fixture
def source(database: Database) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the test database with the baseline job's session settings."""
    with database.connect() as conn:
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute("SET DateStyle = 'ISO'")
        conn.execute("SET IntervalStyle = 'postgres'")
        conn.execute("SET extra_float_digits = 1")  # shortest exact float text (the default)
        yield conn


def expected_rows(conn: psycopg.Connection[Any], with_hstore: bool) -> list[dict[str, Any]]:
    """Every row except the ancient one as the base should hold it, built from psycopg's reads."""
    text_cols = sql.SQL(", ").join(
        # abbrev() is inet's text output (its cast to text adds the netmask of a host)
        sql.SQL("abbrev({0}) AS {0}" if c == "c_inet" else "{0}::text AS {0}").format(sql.Identifier(c))
        for c in TEXT_COLUMNS
    )
    native_cols = sql.SQL(", ").join(map(sql.Identifier, NATIVE_COLUMNS))
    hstore_col = sql.SQL(
        ", (SELECT array_agg(ARRAY[key, value] ORDER BY key) FROM each(c_hstore)) AS hstore_pairs,"
        " c_hstore IS NULL AS hstore_null"
        if with_hstore
        else ""
    )
    query = sql.SQL("""
        SELECT id, {native_cols}, {text_cols},
               c_num124, c_real, c_double, c_char, c_bytea,
               c_date::text AS date_text,
               CASE WHEN isfinite(c_ts) THEN c_ts END AS ts_value, c_ts::text AS ts_text,
               CASE WHEN isfinite(c_tstz) THEN c_tstz END AS tstz_value, c_tstz::text AS tstz_text,
               c_num_arr::text[] AS num_arr_text, c_float_arr,
               c_comp::text AS comp_text,
               c_comp2::text IS NULL AS comp_null, (c_comp2).label AS comp_label,
               (c_comp2).tags AS comp_tags,
               (c_comp2).at::text AS comp_at_text
               {hstore_col}
        FROM all_types WHERE id <> %s ORDER BY id
    """).format(native_cols=native_cols, text_cols=text_cols, hstore_col=hstore_col)
    cur = conn.cursor(row_factory=dict_row)
    rows = cur.execute(query, (ANCIENT_ID,)).fetchall()
    expected = []
    for r in rows:
        e: dict[str, Any] = {"id": r["id"]}
        e.update({c: r[c] for c in NATIVE_COLUMNS})
        e.update({c: r[c] for c in TEXT_COLUMNS})
        e["c_num124"] = r["c_num124"]
        e["c_real"] = float32(r["c_real"])
        e["c_double"] = r["c_double"]
        e["c_char"] = r["c_char"]  # bpchar's text output keeps the padding
        e["c_bytea"] = None if r["c_bytea"] is None else bytes(r["c_bytea"])
        e["c_date"] = date_of(r["date_text"])
        e["c_ts"] = timestamp_of(r["ts_text"], r["ts_value"], tz=False)
        e["c_tstz"] = timestamp_of(r["tstz_text"], r["tstz_value"], tz=True)
        e["c_num_arr"] = r["num_arr_text"]
        # documented: a -0 element of a float array reads as 0 (to_json writes it as an integer)
        floats = r["c_float_arr"]
        e["c_float_arr"] = None if floats is None else [0.0 if f == 0 else f for f in floats]
        e["c_comp"] = r["comp_text"]  # holds a numeric: PostgreSQL's text
        e["c_comp2"] = (
            None
            if r["comp_null"]
            else {
                "label": r["comp_label"],
                "tags": r["comp_tags"],
                "at": r["comp_at_text"],  # the field's output text, as pgoutput sends it
            }
        )
        e.update({c: TEXT_TYPES_EXPECTED.get(r["id"], {}).get(c) for c in TEXT_TYPES})
        if with_hstore:
            pairs = r["hstore_pairs"]
            e["c_hstore"] = None if r["hstore_null"] else {k: v for k, v in (pairs or [])}
        expected.append(e)
    return expected


def actual_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The base's rows except the ancient one, sorted by key; maps as dicts (keys unique)."""
    rows = table.filter(pc.field("id") != ANCIENT_ID).sort_by("id").to_pylist()
    for row in rows:
        if "c_hstore" in row and row["c_hstore"] is not None:
            pairs = row["c_hstore"]
            assert len({k for k, _ in pairs}) == len(pairs), f"duplicate map keys in {pairs}"
            row["c_hstore"] = dict(pairs)
    return rows


# ---- tests -----------------------------------------------------------------------------------


def test_every_design_type_round_trips(
    database: Database,
    source: psycopg.Connection[Any],
    run_baseline: RunBaseline,
    source_conn_id: str,
    lake: Path,
) -> None:
    with_hstore = create_all_types(database)
    expected = expected_rows(source, with_hstore)

    result = run_baseline(f"public.{TABLE}")

    total = len(expected) + 1
    assert result["rows"] == total
    assert result["written"][0]["table"] == f"pgsync.public__{TABLE}__base"
    assert str(lake) in result["written"][0]["location"]
    assert pipeline_state(source_conn_id).table(f"public.{TABLE}").phase.kind == "SyncDone"
    # a published base: a complete version folder and the catalog database's folder
    # (what the failure test checks the absence of)
    assert Path(result["written"][0]["location"].removeprefix("file:"), "_SUCCESS").exists()
    assert (lake / "warehouse" / "pgsync.db").is_dir()
    base = read_base(result)
    assert base.num_rows == total

    # -- the schema: column order and the Arrow type of each column
    expected_types = {k: v for k, v in EXPECTED_TYPES.items() if with_hstore or k != "c_hstore"}
    assert base.schema.names == list(expected_types)
    actual_types = {f.name: type_shape(f.type) for f in base.schema}
    assert actual_types == expected_types

    # -- value by value
    actual = actual_rows(base)
    assert [r["id"] for r in actual] == [e["id"] for e in expected]
    mismatches: dict[str, list[str]] = {}

    def check(key: int, column: str, got: Any, value: Any, how: str) -> None:
        if not same(got, value):
            mismatches.setdefault(column, []).append(f"id {key}{how}: expected {value!r}, got {got!r}")

    for exp, act in zip(expected, actual, strict=True):
        for column, value in exp.items():
            check(exp["id"], column, act[column], value, "")

    # -- spot checks written out by hand (independent of psycopg's reading)
    by_id = {r["id"]: r for r in actual}
    hand: list[tuple[int, str, Any]] = [
        (1, "c_num124", Decimal("1234.5678")),
        (2, "c_num124", Decimal("99999999.9999")),
        (1, "c_real", float32(1.1)),
        (1, "c_double", 0.1 + 0.2),
        (4, "c_double", -math.inf),
        (5, "c_double", -0.0),
        (5, "c_real", -0.0),
        (2, "c_num", "12345678901234567890123456789012345678.90"),
        (5, "c_num", "-" + FORTY_DIGITS),
        (3, "c_num", "Infinity"),
        (4, "c_num", "-Infinity"),
        (2, "c_numneg", "99900"),
        (1, "c_char", "ab   "),
        (4, "c_char", "a b  "),
        (2, "c_char", "     "),
        (1, "c_bytea", b"\x00\xff\x00"),
        (3, "c_bytea", b"\x00\x00"),
        (1, "c_text", 'caf\u00e9 \U0001f642 it\'s "q" back\\slash\nnew\tline\r'),
        (2, "c_date", DATE_MAX),
        (3, "c_date", DATE_MIN),
        (4, "c_date", date(1000, 1, 1)),
        (2, "c_ts", TS_MAX),
        (3, "c_ts", TS_MIN),
        (4, "c_ts", datetime(1582, 10, 10, 12)),
        (1, "c_ts", datetime(2024, 1, 2, 3, 4, 5, 123456)),
        (1, "c_tstz", datetime(2024, 1, 2, 1, 4, 5, 654321, tzinfo=UTC)),
        (2, "c_tstz", TS_MAX.replace(tzinfo=UTC)),
        (3, "c_tstz", TS_MIN.replace(tzinfo=UTC)),
        (5, "c_tstz", datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
        (1, "c_timetz", "12:34:56.5+05:30"),
        (1, "c_interval", "1 year 2 mons 3 days 04:05:06.789"),
        (1, "c_json", '{"b": 1,  "a": [true, null], "b": 2}'),
        (1, "c_bit", "1010"),
        (1, "c_int_2d", [[1, 2], [None, 4]]),
        (4, "c_int_2d", [[1], [2], [3]]),
        (3, "c_int_2d", [[None, None]]),
        (1, "c_text_arr", ["a b", 'q"uote', "back\\slash", None, "NULL", ""]),
        (1, "c_num_arr", ["1.50", None, "-0.0001"]),
        (2, "c_num_arr", ["NaN", "Infinity", "-Infinity", FORTY_DIGITS, "0." + "0" * 38 + "1"]),
        (2, "c_float_arr", [math.nan, math.inf, -math.inf, 5e-324]),
        (1, "c_comp", '(first,1,1.50,"{1,NULL,2}","2024-01-01 10:00:00.123456+00")'),
        (3, "c_comp", '("",0,NaN,{},infinity)'),
        (1, "c_comp2", {"label": "first", "tags": [1, None, 2], "at": "2024-01-01 10:00:00.123456+00"}),
        (2, "c_comp2", {"label": None, "tags": None, "at": None}),
        (3, "c_comp2", {"label": "", "tags": [], "at": "infinity"}),
        (4, "c_float_arr", [0.0, 1.7976931348623157e308]),
    ]
    if with_hstore:
        hand += [(1, "c_hstore", {"a": "1", "b c": 'x"y', "é": None, "empty": ""}), (2, "c_hstore", {})]
    for key, column, value in hand:
        check(key, column, by_id[key][column], value, " (by hand)")
    nan_row = by_id[2]
    assert math.isnan(nan_row["c_real"]) and math.isnan(nan_row["c_double"])
    assert by_id[3]["c_real"] == math.inf and by_id[4]["c_real"] == -math.inf

    # -- the all-NULL row: NULL in every column but the key
    assert all(v is None for k, v in by_id[6].items() if k != "id"), by_id[6]

    # -- the ancient / far-future row through integer casts
    ancient = base.filter(pc.field("id") == ANCIENT_ID)
    assert ancient.num_rows == 1
    assert ancient.column("c_date").cast(pa.int32()).to_pylist() == [ANCIENT_DAYS]
    assert ancient.column("c_ts").cast(pa.int64()).to_pylist() == [ANCIENT_TS_MICROS]
    assert ancient.column("c_tstz").cast(pa.int64()).to_pylist() == [FUTURE_TSTZ_MICROS]

    assert not mismatches, "values that did not round-trip:\n" + "\n".join(
        f"{column}: {line}" for column, lines in mismatches.items() for line in lines
    )


def test_nan_in_constrained_numeric_fails_naming_the_column(
    database: Database, run_baseline: RunBaseline, source_conn_id: str, lake: Path
) -> None:
    database.execute("CREATE TABLE nan_amounts (id integer PRIMARY KEY, amount numeric(10,2))")
    database.execute("INSERT INTO nan_amounts VALUES (1, 1.50), (2, 'NaN'), (3, NULL)")

    with pytest.raises(BaselineError) as failure:
        run_baseline("public.nan_amounts")

    message = str(failure.value)
    assert "column 'amount' of table public.nan_amounts holds NaN" in message, message
    phase = pipeline_state(source_conn_id).table("public.nan_amounts").phase
    assert isinstance(phase, Errored), phase
    assert "column 'amount' of table public.nan_amounts holds NaN" in phase.reason, phase.reason
    # nothing was published: no catalog database, no complete base version
    assert not (lake / "warehouse" / "pgsync.db").exists()
    base_dir = lake / "pgsync" / "public__nan_amounts" / "base"
    complete = list(base_dir.glob("*/_SUCCESS")) if base_dir.exists() else []
    assert complete == []
