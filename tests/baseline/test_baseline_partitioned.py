"""A partitioned table's baseline reads its leaf partitions in parallel, by Spark's JDBC path and
by the Arrow path alike: every row once, under the table's columns (a leaf made with its columns
in another order, a sub-partitioned partition, a DEFAULT one, an empty one), with the
publication's row filter, and more than one Spark partition (the root has no size of its own)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.baseline.conftest import RunBaseline, read_base
from tests.conftest import Database

DDL = [
    "CREATE TABLE public.pt (id int PRIMARY KEY, v text, n int) PARTITION BY RANGE (id)",
    "CREATE TABLE public.pt_1 PARTITION OF public.pt FOR VALUES FROM (0) TO (20000)",
    "CREATE TABLE public.pt_2 PARTITION OF public.pt FOR VALUES FROM (20000) TO (40000)"
    " PARTITION BY RANGE (id)",
    "CREATE TABLE public.pt_2a PARTITION OF public.pt_2 FOR VALUES FROM (20000) TO (30000)",
    "CREATE TABLE public.pt_2b (n int, v text, id int NOT NULL)",
    "ALTER TABLE public.pt_2 ATTACH PARTITION public.pt_2b FOR VALUES FROM (30000) TO (40000)",
    "CREATE TABLE public.pt_e PARTITION OF public.pt FOR VALUES FROM (40000) TO (50000)",  # empty
    "CREATE TABLE public.pt_d PARTITION OF public.pt DEFAULT",
    "INSERT INTO public.pt SELECT g, 'v' || g, g FROM generate_series(1, 39999) g",
    "INSERT INTO public.pt SELECT g, 'v' || g, g FROM generate_series(90000, 99999) g",
]


def _rows(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    base = read_base(result)
    assert base.schema.names == ["id", "v", "n"]
    return sorted(zip(*(base.column(n).to_pylist() for n in base.schema.names), strict=True))


@pytest.mark.slow
def test_a_partitioned_table_is_read_leaf_by_leaf_by_both_paths(
    database: Database, run_baseline: RunBaseline, capsys: pytest.CaptureFixture[str]
) -> None:
    for statement in DDL:
        database.execute(statement)
    database.execute("ANALYZE public.pt")
    table = {"table": "public.pt", "row_filter": "n <> 7"}
    expected = [(g, f"v{g}", g) for g in [*range(1, 40000), *range(90000, 100000)] if g != 7]
    # small Spark partitions: the bigger leaves in ctid ranges, the small ones packed
    jdbc = run_baseline(table, copy_path="off", target_partition_mb=0.25)
    arrow = run_baseline(table, copy_path="auto", target_partition_mb=0.25, rebaseline=True)
    printed = capsys.readouterr().out
    assert "partitioned table, 5 leaf partition(s) in the snapshot: public.pt_1" in printed
    assert "reading with Spark's JDBC source" in printed and "reading with binary COPY into Arrow" in printed
    assert "ctid range 1 of" in printed
    for result in (jdbc, arrow):
        assert result["rows"] == len(expected)
        assert result["partitions"] > 5
        assert _rows(result) == expected
