"""Hostile table and column names through a whole pipeline (real PostgreSQL, Airflow, Spark):
setup, baseline, capture and apply into the lake and a PostgreSQL replica. Names PostgreSQL
accepts are data, never SQL or shell text: the canary tables survive, no file appears, and both
destinations equal the source; so does a 63-byte name of emoji, a right-to-left mark, a
combining accent and a look-alike letter. (Two such names sharing their first 58 bytes, where
``<name>_pkey`` is cut, are tested in tests/destinations/test_postgres_baseline.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg import sql

from airflow_provider_pgsync.destinations.lake import catalog_name
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import Ready
from tests.apply.lake import lake_session, sort_rows
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, task_states
from tests.support.replica import column_names, rows

CANARIES = (Path("/tmp/pwn_hostile_1"), Path("/tmp/pwn_hostile_2"))  # must not appear
HOSTILE = TableRef('../../x "Dept" $(touch /tmp/pwn_hostile_1)', "Robert'); DROP TABLE x;--")
COLUMNS = [
    'a"b',
    "`touch /tmp/pwn_hostile_2`",
    "x | y && z; --",
    "a.b",
    "Ün\u0131\u202ecøde\u0301 😀",
    "it's",
]
_HEAD = "Ünï\u202ecødé😀 \u0430dmin"  # RTL override, combining accent, emoji, a Cyrillic lookalike
_PAD = _HEAD + "x" * (58 - len(_HEAD.encode()))
LONG = [TableRef("public", _PAD + "_one1")]
TABLES = [HOSTILE, *LONG]


def _create(database: Database) -> None:
    with database.connect() as conn:
        conn.execute("CREATE TABLE x (canary int)")
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(HOSTILE.schema)))
        columns = sql.SQL(", ").join(sql.SQL("{} text").format(sql.Identifier(c)) for c in COLUMNS)
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, {})").format(HOSTILE.identifier, columns))
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT g, {} FROM generate_series(1, 50) g").format(
                HOSTILE.identifier,
                sql.SQL(", ").join(
                    sql.SQL("{} || g").format(sql.Literal(f"v{i}'\";`$(id)")) for i in range(6)
                ),
            )
        )
        for table in LONG:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(table.identifier))
            conn.execute(
                sql.SQL("INSERT INTO {} SELECT g, 'r' || g FROM generate_series(1, 20) g").format(
                    table.identifier
                )
            )


def _lake_query(database: Database, table: TableRef) -> str:
    quoted = (f"`{n.replace('`', '``')}`" for n in column_names(database, str(table)))
    columns = ", ".join(f"CAST({q} AS STRING)" for q in quoted)
    return f"SELECT {columns} FROM pgsync.`{catalog_name(table)}`"  # noqa: S608 (quoted test names)


@pytest.mark.slow
def test_hostile_names_reach_the_lake_and_a_replica_exactly(
    database: Database,
    replica: Database,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for canary in CANARIES:
        canary.unlink(missing_ok=True)
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica.cluster.url(replica.name, with_password=True))
    replica.execute("CREATE TABLE x (canary int)")
    _create(database)
    pipeline = make_pipeline_dags(
        [str(t) for t in TABLES],
        destinations=[{"kind": "lake"}, {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}],
    )
    assert str(pipeline.run("setup").state) == "success"
    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
    assert str(baseline.state) == "success", task_states(baseline)

    with database.connect() as conn:
        target = HOSTILE.identifier
        conn.execute(sql.SQL("INSERT INTO {} (id, {}) VALUES (51, 'new; DROP TABLE x')").format(
            target, sql.Identifier(COLUMNS[0])))  # fmt: skip
        conn.execute(sql.SQL("UPDATE {} SET {} = 'upd `id`' WHERE id <= 5").format(
            target, sql.Identifier(COLUMNS[1])))  # fmt: skip
        conn.execute(sql.SQL("DELETE FROM {} WHERE id BETWEEN 10 AND 14").format(target))
        conn.execute(sql.SQL("UPDATE {} SET v = 'changed' WHERE id = 1").format(LONG[0].identifier))
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    state = pipeline.state()
    assert {str(t): state.table(str(t)).phase for t in TABLES} == {str(t): Ready() for t in TABLES}

    found = lake_session(lake, [{"sql": _lake_query(database, t)} for t in TABLES])
    for table, lake_rows in zip(TABLES, found, strict=True):
        expected = rows(database, str(table))
        assert len(expected) >= 20, table
        assert rows(replica, str(table)) == expected, f"{table} differs in the replica"
        assert sort_rows(lake_rows) == expected, f"{table} differs in the lake"
    # nothing ran: the canaries are there and no file appeared; every lake folder is in the lake
    assert database.execute("SELECT to_regclass('public.x') IS NOT NULL") == [(True,)]
    assert replica.execute("SELECT to_regclass('public.x') IS NOT NULL") == [(True,)]
    assert not any(c.exists() for c in CANARIES)
    assert sorted(p.name for p in (lake / "pgsync").iterdir()) == sorted(catalog_name(t) for t in TABLES)
    assert not (lake.parent / "x").exists() and not (lake / "x").exists()
