"""A partitioned table as users have it (issue 36), through the drop-in DAGs on real servers with
a writer running, into every destination kind: the lake, a PostgreSQL replica and a custom one
(the SQLite example of docs/writing-a-destination.md).

The pipeline of the report: 12 ordinary tables and ``public.pt`` (range partitions ``pt_1``, a
sub-partitioned ``pt_2`` whose leaf ``pt_2b`` was made with its columns in another order and then
attached, and a DEFAULT partition), published via its root. Setup, the baseline (the table read
leaf by leaf in one snapshot) and cdc run green; then mid-stream:

- ``ATTACH PARTITION`` of a table that holds rows (its columns in another order): the cdc run
  sends ``pt`` back to baseline in every destination and triggers that rebaseline, naming why;
- a partition made by ``CREATE TABLE ... PARTITION OF``, then rows in it: no rebaseline, its
  rows stream through the root;
- ``DETACH PARTITION`` of a partition with rows and ``TRUNCATE`` of a leaf: back to baseline again.

After each step, cdc drained, every destination equals the source row by row and the phases say so.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from airflow_provider_pgsync.changelog.metadata import change_of
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.source.names import TableRef
from tests.apply.lake import lake_session, sort_rows, view_query
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states, triggered_baselines
from tests.support.replica import rows
from tests.support.sqlite_destination import source_text, sqlite_text
from tests.support.writer import Writes, concurrent_writer

PT = "public.pt"
ORDINARY = [f"public.t{i:02d}" for i in range(1, 13)]
TABLES = [*ORDINARY, PT]
DESTINATIONS = ["lake", "replica", "sqlite"]
# ids the writer updates: in pt_1, pt_2a, pt_2b, the default partition and (once attached) pt_3
UPDATED = [*range(1, 30), *range(1000, 1020), *range(1500, 1520), *range(9000, 9020), *range(3000, 3020)]


@contextmanager
def writer(database: Database, seed: int) -> Iterator[Writes]:
    """A thread committing small transactions over every table until the block ends: an insert
    (into pt: its default partition), an update of a row in any partition, a delete of its own.
    A DDL of the test may deadlock one of them: that one is skipped."""
    rng = random.Random(seed)

    def transaction(conn: Any, new: int) -> None:
        table = rng.choice(TABLES)
        ident = TableRef.parse(table).identifier
        conn.execute(sql.SQL("INSERT INTO {} (id, v) VALUES (%s, 'w')").format(ident), (new,))
        target = rng.choice(UPDATED) if table == PT else rng.randint(1, 5)
        conn.execute(sql.SQL("UPDATE {} SET v = v || '+' WHERE id = %s").format(ident), (target,))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(ident), (new - 2,))

    with concurrent_writer(database, transaction, first=100_000 * seed, interval=0.01) as writes:
        yield writes


def _source(database: Database) -> None:
    for table in ORDINARY:
        ident = TableRef.parse(table).identifier
        database.execute(
            sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident).as_string(None)
        )
        insert = sql.SQL("INSERT INTO {} SELECT g, 'r' || g FROM generate_series(1, 5) g").format(ident)
        database.execute(insert.as_string(None))
    for statement in [
        "CREATE TABLE public.pt (id int PRIMARY KEY, v text, n int) PARTITION BY RANGE (id)",
        "CREATE TABLE public.pt_1 PARTITION OF public.pt FOR VALUES FROM (0) TO (1000)",
        "CREATE TABLE public.pt_2 PARTITION OF public.pt FOR VALUES FROM (1000) TO (2000)"
        " PARTITION BY RANGE (id)",
        "CREATE TABLE public.pt_2a PARTITION OF public.pt_2 FOR VALUES FROM (1000) TO (1500)",
        "CREATE TABLE public.pt_2b (n int, v text, id int NOT NULL)",  # another column order
        "ALTER TABLE public.pt_2 ATTACH PARTITION public.pt_2b FOR VALUES FROM (1500) TO (2000)",
        "CREATE TABLE public.pt_d PARTITION OF public.pt DEFAULT",
        "INSERT INTO public.pt SELECT g, 'p' || g, g FROM generate_series(1, 100) g",
        "INSERT INTO public.pt SELECT g, 'p' || g, g FROM generate_series(1000, 1100) g",
        "INSERT INTO public.pt SELECT g, 'p' || g, g FROM generate_series(1500, 1600) g",
        "INSERT INTO public.pt SELECT g, 'p' || g, g FROM generate_series(9000, 9100) g",
    ]:
        database.execute(statement)


def _outside(pipeline: PipelineDags) -> list[str]:
    """What the changelog of pt says changed rows outside the stream, in order (each once): from
    its files (the state lists only the segments a destination may still read)."""
    changelog = Changelog(pipeline.config.changelog_uri)
    found: list[str] = []
    for path, _, _ in sorted(changelog.segment_files(), key=lambda f: (f[1], f[0])):
        change = change_of(changelog.segment_metadata(path), path) if path.startswith("public.pt/") else None
        if change is not None and change.outside and change.outside not in found:
            found.append(change.outside)
    return found


def _phases(pipeline: PipelineDags, tables: list[str]) -> set[tuple[str, str, str]]:
    state = pipeline.state()
    return {(t, d, state.table(t).destination(d).phase.kind) for t in tables for d in DESTINATIONS}


def _equal(database: Database, replica: Database, sqlite: Path, tables: list[str]) -> None:
    for table in tables:
        assert rows(replica, table) == rows(database, table), f"{table} differs in the replica"
        if table == PT:  # (no COPY of a partitioned table: its int and text columns as text)
            found = sorted(sqlite_text(sqlite, table), key=lambda r: tuple((v is None, v or "") for v in r))
            assert found == rows(database, table), f"{table} differs in sqlite"
        else:
            assert sqlite_text(sqlite, table) == source_text(database, table), f"{table} differs in sqlite"


def _drained(pipeline: PipelineDags) -> None:
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert {p for _, _, p in _phases(pipeline, TABLES)} == {"Ready"}


def _rebaselined(pipeline: PipelineDags, database: Database, seed: int, *why: str) -> None:
    """The cdc run sends pt alone back to baseline in every destination, names why, and triggers
    that rebaseline, which (run with the writer going on) and cdc bring it back to Ready."""
    before = triggered_baselines(pipeline)
    cdc = pipeline.run("cdc")
    assert str(cdc.state) == "failed" and task_states(cdc)["outcome"] == "failed", task_states(cdc)
    assert task_states(cdc)["apply"] == "success", task_states(cdc)
    assert _phases(pipeline, [PT]) == {(PT, d, "Init") for d in DESTINATIONS}
    assert {p for _, _, p in _phases(pipeline, ORDINARY)} == {"Ready"}
    triggered = [conf for _, conf in triggered_baselines(pipeline)[len(before) :]]
    assert triggered == [{"tables": [PT], "destinations": DESTINATIONS, "mode": "rebaseline"}]
    with writer(database, seed):
        again = pipeline.run("baseline", run_conf=triggered[0])
        assert str(again.state) == "success", task_states(again)
    _drained(pipeline)


@pytest.mark.slow
def test_a_partitioned_table_is_baselined_by_leaf_and_followed_through_attach_detach_and_truncate(
    database: Database,
    replica: Database,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
    example_module: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica.cluster.url(replica.name, with_password=True))
    _source(database)
    path = tmp_path / "dest.sqlite"
    destinations: list[dict[str, Any]] = [
        {"kind": "lake"},
        {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"},
        {
            "kind": "custom",
            "class": f"{example_module}.SqliteDestination",
            "name": "sqlite",
            "path": str(path),
        },
    ]
    pipeline = make_pipeline_dags(TABLES, destinations=destinations)
    assert str(pipeline.run("setup").state) == "success"
    assert {p for _, _, p in _phases(pipeline, TABLES)} == {"Init"}
    triggers = database.execute(
        "SELECT tgrelid::regclass::text FROM pg_trigger WHERE tgname LIKE 'pgsync_%%' ORDER BY 1"
    )
    assert [t for (t,) in triggers] == ["pt", "pt", "pt_1", "pt_2a", "pt_2b", "pt_d"]

    with writer(database, 1):
        baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
        assert str(baseline.state) == "success", task_states(baseline)
        cdc = pipeline.run("cdc")
        assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    printed = capsys.readouterr().out
    # read leaf by leaf, in the snapshot, by the JDBC path and the PostgreSQL copy path alike
    assert "partitioned table, 4 leaf partition(s) in the snapshot: public.pt_1" in printed
    assert "partitioned table, 4 leaf partition(s) read in" in printed
    _drained(pipeline)
    _equal(database, replica, path, TABLES)

    # a table with rows (its columns in another order) attached while the writer goes on
    with writer(database, 2):
        database.execute("CREATE TABLE public.pt_3 (n int, id int NOT NULL, v text)")
        database.execute(
            "INSERT INTO public.pt_3 SELECT g, g, 'brought' || g FROM generate_series(3000, 3050) g"
        )
        database.execute(
            "ALTER TABLE public.pt ATTACH PARTITION public.pt_3 FOR VALUES FROM (3000) TO (4000)"
        )
    _rebaselined(pipeline, database, 3)
    printed = capsys.readouterr().out
    assert "partition public.pt_3 attached with rows: they are not in the stream" in printed
    _equal(database, replica, path, TABLES)

    # a new partition, then rows in it: they stream through the root, no rebaseline
    with writer(database, 4):
        database.execute("CREATE TABLE public.pt_4 PARTITION OF public.pt FOR VALUES FROM (4000) TO (5000)")
        database.execute("INSERT INTO public.pt SELECT g, 'new' || g, g FROM generate_series(4000, 4040) g")
        database.execute("UPDATE public.pt SET v = 'moved' WHERE id = 4001")
    _drained(pipeline)
    _equal(database, replica, path, TABLES)

    # a partition with rows detached, a leaf of the sub-partitioned one truncated
    with writer(database, 5):
        database.execute("ALTER TABLE public.pt DETACH PARTITION public.pt_1")
        database.execute("TRUNCATE public.pt_2b")
    _rebaselined(pipeline, database, 6)
    printed = capsys.readouterr().out
    assert "partition public.pt_1 detached: the removal of its rows is not in the stream" in printed
    # (apply names the first reason it meets; capture's log, in its decoding process, names each)
    assert _outside(pipeline) == [
        "partition public.pt_3 attached with rows: they are not in the stream",
        "partition public.pt_1 detached: the removal of its rows is not in the stream",
        "partition public.pt_2b truncated: the removal of its rows is not in the stream"
        " (pgoutput sends a TRUNCATE of the root only)",
    ]
    _equal(database, replica, path, TABLES)
    assert rows(database, PT) and not [
        r for r in rows(database, PT) if r[0] is not None and 1500 <= int(r[0]) < 2000
    ]

    # the lake, every table, row by row
    found = lake_session(lake, [{"sql": view_query(database, t)} for t in TABLES])
    for table, lake_rows in zip(TABLES, found, strict=True):
        assert sort_rows(lake_rows) == rows(database, table), f"{table} differs in the lake"
