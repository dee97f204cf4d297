"""PostgresStateStore: pipeline states as rows of ``<schema>.pipeline_state`` in a control database.

The control database may be the source or another one (another Airflow connection).
The table is created on first use; compare-and-set is a single conditional statement
(``UPDATE ... WHERE version = %s``, or ``INSERT ... ON CONFLICT DO NOTHING`` for a
first save), so no lock is needed to save: PostgreSQL's row locking lets exactly one
of two concurrent writers of the same version succeed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from airflow_provider_pgsync.errors import ConfigError, StateConflictError, StateError
from airflow_provider_pgsync.hooks.advisory_lock import AdvisoryLock, ConnectionSource, as_connect
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import PipelineState, validate_pipeline_name

TABLE = "pipeline_state"


def state_query(schema: str) -> sql.Composed:
    """The statement reading a pipeline's row of ``<schema>.pipeline_state`` (parameter: its name);
    readers that must not create the table (sensors, the status page) run it themselves."""
    return sql.SQL("SELECT version, state FROM {} WHERE pipeline = %s").format(sql.Identifier(schema, TABLE))


def state_from_row(pipeline: str, row: tuple[Any, ...] | None, *, schema: str) -> PipelineState:
    """The state a row of ``state_query`` holds; a fresh state at version 0 for no row."""
    if row is None:
        return PipelineState(pipeline)
    state = PipelineState.from_json(row[1])
    if state.pipeline != pipeline:
        raise StateError(
            f"row {pipeline!r} of {TableRef(schema, TABLE)} holds the state of pipeline {state.pipeline!r}: "
            "it was edited by hand; delete the row and set the pipeline up again"
        )
    return replace(state, version=int(row[0]))


class PostgresStateStore:
    """The ``StateStore`` in a PostgreSQL table; ``source`` is a PgReplicationHook or a connection factory.

    :param schema: the control schema (exact name, created if missing), default ``pgsync``.
    """

    def __init__(self, source: ConnectionSource, *, schema: str = "pgsync") -> None:
        TableRef(schema, TABLE)  # validates the schema name (ConfigError naming it)
        self.schema = schema
        self._source = source
        self._connect = as_connect(source)
        self._table = sql.Identifier(schema, TABLE)
        self._ready = False

    def load(self, pipeline: str) -> PipelineState:
        """The saved state, or a fresh one at version 0."""
        validate_pipeline_name(pipeline)
        with self._connection() as conn:
            row = conn.execute(state_query(self.schema), (pipeline,)).fetchone()
        return state_from_row(pipeline, row, schema=self.schema)

    def save(self, state: PipelineState) -> PipelineState:
        """Compare-and-set: store ``state`` if the row is still at ``state.version``; return version + 1."""
        new = replace(state, version=state.version + 1)
        document = Jsonb(new.to_json())
        with self._connection() as conn:
            if state.version == 0:
                query = sql.SQL(
                    "INSERT INTO {} (pipeline, version, state) VALUES (%s, 1, %s)"
                    " ON CONFLICT (pipeline) DO NOTHING"
                ).format(self._table)
                cur = conn.execute(query, (state.pipeline, document))
            else:
                query = sql.SQL(
                    "UPDATE {} SET version = version + 1, state = %s, updated_at = now()"
                    " WHERE pipeline = %s AND version = %s"
                ).format(self._table)
                cur = conn.execute(query, (document, state.pipeline, state.version))
            if cur.rowcount != 1:
                query = sql.SQL("SELECT version FROM {} WHERE pipeline = %s").format(self._table)
                found = conn.execute(query, (state.pipeline,)).fetchone()
                raise StateConflictError(state.pipeline, state.version, None if found is None else found[0])
        return new

    def delete(self, pipeline: str) -> None:
        """Delete the pipeline's row (a no-op when there is none)."""
        validate_pipeline_name(pipeline)
        with self._connection() as conn:
            conn.execute(sql.SQL("DELETE FROM {} WHERE pipeline = %s").format(self._table), (pipeline,))

    # ---- setup ------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        """A new autocommit connection, after making sure the table exists."""
        if not self._ready:
            self._create_table()
            self._ready = True
        conn = self._connect()
        conn.autocommit = True
        return conn

    def _create_table(self) -> None:
        """Create the schema and table unless they exist; concurrent callers serialise on a lock."""
        with AdvisoryLock(self._source, f"pgsync_state_ddl:{self.schema}") as conn:
            exists = conn.execute(
                "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL", (self.schema, TABLE)
            ).fetchone()
            if exists and exists[0]:
                return  # no DDL, so no CREATE privilege is needed once the table exists
            try:
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} ("
                        " pipeline text PRIMARY KEY,"
                        " version bigint NOT NULL,"
                        " state jsonb NOT NULL,"
                        " updated_at timestamptz NOT NULL DEFAULT now())"
                    ).format(self._table)
                )
            except psycopg.errors.InsufficientPrivilege as exc:
                raise ConfigError(
                    f"cannot create the state table {self._where()}: {str(exc).strip()}; create it as an "
                    f"owner, or grant CREATE on the database (or on schema {self.schema}) to this role"
                ) from exc

    def _where(self) -> str:
        return str(TableRef(self.schema, TABLE))
