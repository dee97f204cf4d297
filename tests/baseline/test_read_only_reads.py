"""The baseline job's reads run in READ ONLY transactions on the Spark tasks' own paths, without
Spark: the Arrow (ADBC) partition copy and the PostgreSQL destinations' text COPY, with the
session statements and queries the operator builds (``_job_spec``). A side-effect function in
a row filter or an ``sql`` backfill filter fails there and changes nothing. (Not every one:
PostgreSQL 15 lets ``lo_create`` run in a read-only transaction, hence the VOLATILE check of
``sql`` backfill filters in ``operators/backfill.py``.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.baseline.arrow_copy import copy_partition as arrow_partition
from airflow_provider_pgsync.baseline.arrow_copy import copy_sql
from airflow_provider_pgsync.baseline.pg_copy import Sink, copy_partition, partition_sql
from airflow_provider_pgsync.baseline.plan import base_query
from airflow_provider_pgsync.baseline.spec import BaselineJobSpec
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.source.publication import PublishedTable, published_table
from airflow_provider_pgsync.source.row_condition import parse_condition
from tests.conftest import Database

SETUP = [
    "CREATE TABLE items (id int PRIMARY KEY, name text)",
    "INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 20) g",
    "CREATE SEQUENCE s",
]


def _harm(database: Database) -> tuple[Any, Any]:
    [(objects,)] = database.execute("SELECT count(*) FROM pg_largeobject_metadata")
    [(called,)] = database.execute("SELECT is_called FROM s")
    return objects, called


def _spec(conn_id: str, table: PublishedTable, condition: str = "") -> BaselineJobSpec:
    """The job spec the operator builds (session statements, queries), its snapshot still held."""
    hook = PgReplicationHook(postgres_conn_id=conn_id)
    operator = PgBaselineOperator(task_id="b", pipeline="p", table="public.items", postgres_conn_id=conn_id)
    with hook.baseline_snapshot(table.table) as (snapshot, conn):
        parsed = parse_condition(condition, "sql", "test") if condition else None
        spec = operator._job_spec(hook, conn, table, snapshot, [], condition=parsed)
        # the snapshot ends with the block: join a fresh one of the same kind for the tasks
    return spec


def _session(database: Database, spec: BaselineJobSpec) -> tuple[Any, tuple[str, ...]]:
    holder = database.connect(autocommit=False)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    [(snapshot,)] = holder.execute("SELECT pg_export_snapshot()").fetchall()
    joined = f"SET TRANSACTION SNAPSHOT '{snapshot}'"
    session = tuple(joined if s.startswith("SET TRANSACTION SNAPSHOT") else s for s in spec.session)
    assert session[0] == "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
    return holder, session


def test_the_arrow_path_reads_read_only(database: Database, source_conn_id: str, tmp_path: Path) -> None:
    for statement in SETUP:
        database.execute(statement)
    spec = _spec(source_conn_id, published_table("public.items"), "id > 0 AND nextval('s') > 0")
    assert spec.arrow_query, "the table is not read by the Arrow path"
    holder, session = _session(database, spec)
    query = copy_sql(spec.arrow_query, list(spec.columns), "TRUE")
    with pytest.raises(Exception, match=r"cannot execute nextval\(\) in a read-only transaction"):
        arrow_partition(database.conninfo, session, query, list(spec.columns), str(tmp_path / "part.parquet"))
    holder.close()
    assert _harm(database) == (0, False)


def test_the_postgres_destination_path_reads_read_only(
    database: Database, source_conn_id: str, replica: Database
) -> None:
    """The replica path embeds only the row filter: a function with side effects in it fails."""
    for statement in SETUP:
        database.execute(statement)
    table = PublishedTable(published_table("public.items").table, row_filter="nextval('s') > 0")
    spec = _spec(source_conn_id, table)
    holder, session = _session(database, spec)
    with database.connect() as conn:
        columns = column_infos(conn, table.table)
        query = base_query(table, list(spec.columns)).as_string(conn)
    names = tuple(c.name for c in columns)
    destination = PostgresDestination(replica.conninfo, name="replica")
    staging = destination.prepare_baseline(table.table, columns, "v1")
    sink = Sink("replica", replica.conninfo, staging, destination.baseline_parts, names)
    with pytest.raises(Exception, match=r"cannot execute nextval\(\) in a read-only transaction"):
        copy_partition(database.conninfo, session, partition_sql(query, list(names), "TRUE"), [sink], 0)
    destination.discard_baseline(staging)
    destination.close()
    holder.close()
    assert _harm(database) == (0, False)
