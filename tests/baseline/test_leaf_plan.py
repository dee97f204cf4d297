"""A partitioned table's baseline plan: its leaf partitions, read each alone (whole, packed with
other small ones, or in ctid ranges), in the snapshot's set of leaves, every row exactly once."""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest

from airflow_provider_pgsync.baseline.partitions import LEAF_COLUMN, leaf_predicates
from airflow_provider_pgsync.baseline.pg_copy import partition_sql
from airflow_provider_pgsync.baseline.plan import base_query
from airflow_provider_pgsync.hooks.catalog import leaf_partitions
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.publication import PublishedTable
from airflow_provider_pgsync.typemap.spark import ColumnRead
from tests.conftest import Database


def _covered(predicates: list[tuple[str, str]], sizes: list[tuple[str, int, int]]) -> None:
    """Every leaf is named by at least one predicate (whole or in ranges)."""
    text = " ".join(p for p, _ in predicates)
    for number in range(len(sizes)):
        assert f"= {number}" in text or f"{number}," in text or f"{number})" in text


def test_small_leaves_are_packed_and_a_big_one_is_split() -> None:
    leaves = [
        ("public.a", 1, 8192),
        ("public.b", 0, 0),
        ("public.big", 1000, 8_192_000),
        ("public.c", 2, 16384),
    ]
    planned = leaf_predicates(leaves, target_bytes=2_000_000, slots=2)
    column = f'"{LEAF_COLUMN}"'
    big = [p for p, what in planned if p.startswith(f"{column} = 2")]
    assert len(big) >= 4 and all("__pgsync_ctid" in p for p in big)
    assert big[0].endswith("< '(250,0)'::tid") or "<" in big[0]
    assert (
        big[-1].endswith("::tid") and "<" not in big[-1].split("AND")[-1]
    )  # the last range has no upper bound
    small = [p for p, _ in planned if " IN " in p]
    assert small and sorted(n for p in small for n in p.split("(")[1].rstrip(")").split(", ")) == [
        "0",
        "1",
        "3",
    ]
    assert any("ctid range 1 of" in what for _, what in planned)
    _covered(planned, leaves)


@pytest.mark.parametrize("slots", [1, 3])
def test_empty_leaves_are_read_once(slots: int) -> None:
    leaves = [(f"public.p{i}", 0, 0) for i in range(5)]
    planned = leaf_predicates(leaves, target_bytes=1024, slots=slots)
    assert planned == [(f'"{LEAF_COLUMN}" IN (0, 1, 2, 3, 4)', ", ".join(n for n, _, _ in leaves))]


def test_each_predicate_reads_its_leaves_once_in_the_snapshot(database: Database) -> None:
    database.execute("CREATE TABLE pt (id int PRIMARY KEY, a text, b int) PARTITION BY RANGE (id)")
    database.execute("CREATE TABLE pt_1 PARTITION OF pt FOR VALUES FROM (0) TO (10000)")
    database.execute(
        "CREATE TABLE pt_2 PARTITION OF pt FOR VALUES FROM (10000) TO (20000) PARTITION BY RANGE (id)"
    )
    database.execute("CREATE TABLE pt_2a PARTITION OF pt_2 FOR VALUES FROM (10000) TO (20000)")
    database.execute("CREATE TABLE pt_3 (b int, a text, id int NOT NULL)")  # its columns in another order
    database.execute("ALTER TABLE pt ATTACH PARTITION pt_3 FOR VALUES FROM (20000) TO (30000)")
    database.execute("CREATE TABLE pt_d PARTITION OF pt DEFAULT")
    database.execute("INSERT INTO pt SELECT g, 'v' || g, mod(g, 7) FROM generate_series(1, 40000, 1) g")
    table = PublishedTable(TableRef("public", "pt"), row_filter="b <> 3")
    reads = [ColumnRead(c, "{col}", "native", "string") for c in ("id", "a", "b")]
    with psycopg.connect(database.conninfo, autocommit=False) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        leaves = leaf_partitions(conn, TableRef("public", "pt"))
        # a table attached after the snapshot is not one of its leaves
        database.execute("CREATE TABLE pt_4 (LIKE pt)")
        database.execute("ALTER TABLE pt ATTACH PARTITION pt_4 FOR VALUES FROM (40001) TO (50000)")
        database.execute("INSERT INTO pt VALUES (40001, 'later', 1)")
        assert leaves is not None
        assert [str(leaf.table) for leaf in leaves] == [
            "public.pt_1",
            "public.pt_2a",
            "public.pt_3",
            "public.pt_d",
        ]
        assert all(leaf.readable and leaf.bytes > 0 for leaf in leaves)
        query = base_query(table, reads, leaves=[leaf.table for leaf in leaves]).as_string(conn)
        sizes = [(str(leaf.table), leaf.bytes // 8192, leaf.bytes) for leaf in leaves]
        planned = leaf_predicates(sizes, target_bytes=100_000, slots=2)
        assert len(planned) > len(leaves)  # some leaves in ctid ranges
        seen: Counter[int] = Counter()
        for predicate, what in planned:
            statement = partition_sql(query, ["id", "a", "b"], predicate)
            plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {statement}").fetchall())
            scanned = {leaf for leaf in ("pt_1", "pt_2a", "pt_3", "pt_d") if f" {leaf} " in plan + " "}
            assert len(scanned) == (1 if "," not in what else what.count(",") + 1), (what, plan)
            rows = conn.execute(statement).fetchall()
            seen.update(int(r[0]) for r in rows)
            assert all(r[1] == f"v{r[0]}" for r in rows)  # pt_3's columns under the table's names
        conn.rollback()
    expected = {g for g in range(1, 40001) if g % 7 != 3}
    assert set(seen) == expected and set(seen.values()) == {1}
    assert leaf_partitions(psycopg.connect(database.conninfo), TableRef("public", "pt_1")) is None
