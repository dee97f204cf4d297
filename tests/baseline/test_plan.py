"""Baseline planning: partition counts, ctid ranges and the table's subquery."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_pgsync.baseline.partitions import CTID_COLUMN, ctid_predicates, partition_count
from airflow_provider_pgsync.baseline.plan import base_query
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.publication import PublishedTable
from airflow_provider_pgsync.typemap.pgtypes import PgType
from airflow_provider_pgsync.typemap.spark import ColumnRead, refusing_arrays, spark_read

# ---- partition_count --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table_bytes", "target", "expected"),
    [
        (0, 100, 1),  # an empty table is still read once
        (1, 100, 1),
        (100, 100, 1),
        (101, 100, 2),
        (199, 100, 2),
        (200, 100, 2),
        (201, 100, 3),
        (10**12, 1, 10_000),  # capped by the default maximum
    ],
)
def test_partition_count(table_bytes: int, target: int, expected: int) -> None:
    assert partition_count(table_bytes, target) == expected


def test_partition_count_maximum() -> None:
    assert partition_count(1000, 10, maximum=7) == 7
    assert partition_count(1000, 10, maximum=100) == 100
    assert partition_count(1000, 10, maximum=101) == 100
    assert partition_count(1000, 10, maximum=0) == 1  # never fewer than one


@pytest.mark.parametrize(
    ("table_bytes", "slots", "expected"),
    [(900, 2, 10), (1000, 2, 10), (1000, 3, 12), (100, 8, 1), (101, 8, 8), (1000, 1, 10)],
)
def test_partition_count_fills_every_task_slot(table_bytes: int, slots: int, expected: int) -> None:
    """More than one partition is rounded up to a multiple of the slots; one stays one."""
    assert partition_count(table_bytes, 100, slots=slots) == expected


@pytest.mark.parametrize("target", [0, -1])
def test_partition_count_rejects_non_positive_target(target: int) -> None:
    with pytest.raises(ConfigError, match=str(target)):
        partition_count(100, target)


# ---- ctid_predicates --------------------------------------------------------------------------

_COL = re.escape(f'"{CTID_COLUMN}"')
_LOWER = re.compile(rf"^{_COL} >= '\((\d+),0\)'::tid$")
_UPPER = re.compile(rf"^{_COL} < '\((\d+),0\)'::tid$")
_BETWEEN = re.compile(rf"^{_COL} >= '\((\d+),0\)'::tid AND {_COL} < '\((\d+),0\)'::tid$")

Range = tuple[int | None, int | None]


def parse_range(predicate: str) -> Range:
    """``[lo, hi)`` in blocks of one predicate; None for an open end."""
    if predicate == "TRUE":
        return None, None
    if m := _BETWEEN.match(predicate):
        return int(m.group(1)), int(m.group(2))
    if m := _LOWER.match(predicate):
        return int(m.group(1)), None
    if m := _UPPER.match(predicate):
        return None, int(m.group(1))
    raise AssertionError(f"unexpected predicate {predicate!r}")


def covering(ranges: list[Range], block: int) -> list[int]:
    return [
        i for i, (lo, hi) in enumerate(ranges) if (lo is None or lo <= block) and (hi is None or block < hi)
    ]


@given(blocks=st.integers(0, 5000), partitions=st.integers(1, 300), extra=st.integers(0, 50))
def test_ctid_ranges_cover_every_block_once(blocks: int, partitions: int, extra: int) -> None:
    predicates = ctid_predicates(blocks, partitions)
    ranges = [parse_range(p) for p in predicates]
    assert 1 <= len(ranges) <= max(1, min(partitions, blocks))
    assert ranges[0][0] is None, "the first range is unbounded below"
    assert ranges[-1][1] is None, "the last range is unbounded above (blocks added later)"
    for block in range(blocks + extra + 1):
        assert len(covering(ranges, block)) == 1, (block, predicates)
    # no empty range: every partition has at least one of the table's blocks
    for i, (lo, hi) in enumerate(ranges):
        first = 0 if lo is None else lo
        assert hi is None or first < hi, (i, predicates)
        assert first < max(blocks, 1)


def test_ctid_predicates_examples() -> None:
    c = f'"{CTID_COLUMN}"'
    assert ctid_predicates(0, 4) == ["TRUE"]
    assert ctid_predicates(10, 1) == ["TRUE"]
    assert ctid_predicates(1, 8) == ["TRUE"]
    assert ctid_predicates(10, 3) == [
        f"{c} < '(3,0)'::tid",
        f"{c} >= '(3,0)'::tid AND {c} < '(6,0)'::tid",
        f"{c} >= '(6,0)'::tid",
    ]
    assert len(ctid_predicates(3, 100)) == 3  # never more partitions than blocks


def test_ctid_predicates_are_balanced() -> None:
    ranges = [parse_range(p) for p in ctid_predicates(1000, 7)]
    sizes = [(1000 if hi is None else hi) - (0 if lo is None else lo) for lo, hi in ranges]
    assert sum(sizes) == 1000
    assert max(sizes) - min(sizes) <= 1


# ---- base_query -------------------------------------------------------------------------------


def render(table: PublishedTable, reads: Sequence[ColumnRead]) -> str:
    return base_query(table, reads).as_string(None)


def test_base_query_projects_ctid_and_reads() -> None:
    assert CTID_COLUMN == "__pgsync_ctid"
    table = PublishedTable(TableRef("Sales Data", 'Odd "Name"'))
    tags = PgType("text[]", "array", "a", element=PgType("text", "text"), ndims=1)
    ids = PgType("integer[]", "array", "a", element=PgType("integer", "int4"), ndims=1)
    reads = [
        spark_read("id", PgType("integer", "int4")),
        spark_read('we"ird col', PgType("text", "text")),
        spark_read("Amount", PgType("numeric(10,2)", "numeric", precision=10, scale=2)),
        spark_read("tags", tags),
        spark_read("Ids", ids),
        spark_read("code", PgType("character(3)", "bpchar")),
    ]
    text = render(table, reads)
    # arrays the lake cannot hold are refused (typemap.spark.refusing_arrays)
    tags_select = refusing_arrays("to_json({col}::text[])::text", tags).replace("{col}", '"tags"')
    ids_select = refusing_arrays("to_json({col})::text", ids).replace("{col}", '"Ids"')
    assert text == (
        '(SELECT ctid AS "__pgsync_ctid", "id" AS "id", "we""ird col"::text AS "we""ird col", '  # noqa: S608
        f'"Amount"::text AS "Amount", {tags_select} AS "tags", '
        f'{ids_select} AS "Ids", "code" AS "code" '
        'FROM "Sales Data"."Odd ""Name""") AS pgsync_base'
    )


def test_base_query_date_and_timestamp_reads_are_quoted() -> None:
    table = PublishedTable(TableRef("public", "t"))
    reads = [
        spark_read("Day", PgType("date", "date")),
        spark_read("At", PgType("timestamptz", "timestamptz")),
    ]
    text = render(table, reads)
    assert "{" not in text and "}" not in text
    assert 'isfinite("Day") THEN "Day" - DATE \'1970-01-01\'' in text
    assert 'extract(epoch FROM "At")' in text
    # four uses in the CASE and the alias, every one of them quoted
    assert text.count('"Day"') == text.count("Day") == 5
    assert text.count('"At"') == text.count("At") == 5


def test_base_query_row_filter() -> None:
    table = PublishedTable(TableRef("public", "orders"), row_filter="status <> 'draft' AND tags @> '{a}'")
    text = render(table, [spark_read("id", PgType("integer", "int4"))])
    assert text == (
        '(SELECT ctid AS "__pgsync_ctid", "id" AS "id" FROM "public"."orders"'
        " WHERE (status <> 'draft' AND tags @> '{a}')) AS pgsync_base"
    )


def test_base_query_without_columns_still_selects_ctid() -> None:
    text = render(PublishedTable(TableRef("public", "t")), [])
    assert text == '(SELECT ctid AS "__pgsync_ctid" FROM "public"."t") AS pgsync_base'
