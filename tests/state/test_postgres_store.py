"""PostgresStateStore specifics: the control schema, a hook as connection source, concurrent setup."""

from __future__ import annotations

import threading

import psycopg
import pytest

from airflow_provider_pgsync.errors import ConfigError, SourceUnavailableError
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.state.model import PipelineState
from tests.conftest import Database
from tests.state.conftest import Connect


def _columns(database: Database, schema: str) -> list[tuple[object, ...]]:
    return database.execute(
        "SELECT column_name::text, data_type::text, is_nullable::text FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = 'pipeline_state' ORDER BY ordinal_position",
        (schema,),
    )


def test_mixed_case_schema_with_a_space(database: Database, connect: Connect, pipeline: str) -> None:
    store = PostgresStateStore(connect, schema="Ctl Schema")
    saved = store.save(PipelineState(pipeline).with_watermark("pg", "0/1/2"))
    assert store.load(pipeline) == saved
    assert _columns(database, "Ctl Schema") == [
        ("pipeline", "text", "NO"),
        ("version", "bigint", "NO"),
        ("state", "jsonb", "NO"),
        ("updated_at", "timestamp with time zone", "NO"),
    ]
    rows = database.execute("SELECT pipeline, version, state->>'pipeline' FROM \"Ctl Schema\".pipeline_state")
    assert rows == [(pipeline, 1, pipeline)]
    assert _columns(database, "pgsync") == []  # the default schema was not touched
    assert PostgresStateStore(connect).load(pipeline).version == 0  # another schema, another store


def test_hook_as_connection_source(source_conn_id: str, pipeline: str) -> None:
    store = PostgresStateStore(PgReplicationHook(postgres_conn_id=source_conn_id))
    saved = store.save(PipelineState(pipeline))
    assert store.load(pipeline) == saved


def test_concurrent_first_use_creates_the_table_once(database: Database, connect: Connect) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def first_use(n: int) -> None:
        try:
            start.wait()
            PostgresStateStore(connect, schema="Fresh").save(PipelineState(f"p{n}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_use, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert database.execute('SELECT count(*) FROM "Fresh".pipeline_state') == [(6,)]


def test_existing_table_needs_no_create_privilege(
    database: Database, connect: Connect, pipeline: str
) -> None:
    PostgresStateStore(connect).load(pipeline)  # creates the table as the owner
    role = f"r_{database.name}"
    database.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'pw'")
    try:
        database.execute(f'REVOKE CREATE ON DATABASE "{database.name}" FROM PUBLIC')
        database.execute(f'GRANT USAGE ON SCHEMA pgsync TO "{role}"')
        database.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON pgsync.pipeline_state TO "{role}"')
        as_role = PostgresStateStore(lambda: psycopg.connect(database.conninfo, user=role, password="pw"))
        assert as_role.save(PipelineState(pipeline)).version == 1
        with pytest.raises(
            ConfigError, match=r"cannot create the state table other.pipeline_state.*grant CREATE"
        ):
            PostgresStateStore(
                lambda: psycopg.connect(database.conninfo, user=role, password="pw"), schema="other"
            ).load(pipeline)
    finally:
        database.execute(f'DROP OWNED BY "{role}"')
        database.execute(f'DROP ROLE "{role}"')


def test_unreachable_control_database_is_retryable(database: Database) -> None:
    store = PostgresStateStore(lambda: psycopg.connect(database.conninfo, dbname="no_such_db"))
    with pytest.raises(SourceUnavailableError, match="control database") as info:
        store.load("p")
    assert info.value.retryable


def test_bad_schema_and_source_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        PostgresStateStore(lambda: psycopg.connect(""), schema="")
    with pytest.raises(ConfigError, match="PgReplicationHook or a callable"):
        PostgresStateStore("host=x")  # type: ignore[arg-type]
