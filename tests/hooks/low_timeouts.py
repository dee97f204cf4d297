"""A source whose server defaults end sessions fast: ``idle_session_timeout``,
``idle_in_transaction_session_timeout`` and ``statement_timeout`` of 1 s, set for the test's
databases (``ALTER DATABASE ... SET``) and for a role of its own (``ALTER ROLE ... SET``) that
the pipeline's Airflow connections use. Settings apply to sessions started after they are set.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psycopg
import pytest
from psycopg import sql

from tests.conftest import Database

TIMEOUTS = ("idle_session_timeout", "idle_in_transaction_session_timeout", "statement_timeout")
LOW = "1s"


@dataclass
class LowTimeouts:
    """The role (``role``, password ``password``) and the databases whose defaults are low."""

    role: str
    password: str
    databases: list[Database] = field(default_factory=list)
    monkeypatch: pytest.MonkeyPatch | None = None

    def conn_id(self, database: Database, name: str) -> str:
        """An Airflow connection ``name`` to ``database`` as the role; its defaults made low too."""
        self.lower(database)
        assert self.monkeypatch is not None
        url = f"postgresql://{self.role}:{self.password}@127.0.0.1:{database.cluster.port}/{database.name}"
        self.monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", url)
        return name

    def lower(self, database: Database) -> None:
        """``ALTER DATABASE ... SET`` the low timeouts (new sessions of every role get them)."""
        if database in self.databases:
            return
        with unlimited(database) as conn:
            for name in TIMEOUTS:
                conn.execute(
                    sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                        sql.Identifier(database.name), sql.Identifier(name), sql.Literal(LOW)
                    )
                )
        self.databases.append(database)

    def lift(self) -> None:
        """Back to the server's defaults (for the test's own checks afterwards)."""
        for database in self.databases:
            with unlimited(database) as conn:
                conn.execute(sql.SQL("ALTER DATABASE {} RESET ALL").format(sql.Identifier(database.name)))
                conn.execute(sql.SQL("ALTER ROLE {} RESET ALL").format(sql.Identifier(self.role)))


def unlimited(database: Database) -> psycopg.Connection[tuple[object, ...]]:
    """A superuser connection to ``database`` without the low timeouts (the test's own work)."""
    conn = database.connect()
    for name in TIMEOUTS:
        conn.execute(sql.SQL("SET {} = 0").format(sql.Identifier(name)))
    return conn


def session_of(database: Database, where: str, *params: object) -> list[tuple[object, ...]]:
    """``(pid, state, seconds in that state)`` of the sessions matching the condition ``where``."""
    with unlimited(database) as conn:
        query = sql.SQL(
            "SELECT pid, state, extract(epoch FROM now() - state_change)::float8 FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND {}"
        ).format(sql.SQL(where))  # the tests' own conditions
        return conn.execute(query, params).fetchall()


MakeLowTimeouts = Callable[[], LowTimeouts]


@pytest.fixture(name="low_timeouts")
def low_timeouts_fixture(database: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[LowTimeouts]:
    """A superuser role with REPLICATION whose role defaults are the low timeouts; the test's
    source database gets them too. The role and what it owns go after the test."""
    role = f"low_{uuid.uuid4().hex[:10]}"
    password = secrets.token_hex(16)
    with unlimited(database) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER REPLICATION PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
        for name in TIMEOUTS:
            conn.execute(
                sql.SQL("ALTER ROLE {} SET {} = {}").format(
                    sql.Identifier(role), sql.Identifier(name), sql.Literal(LOW)
                )
            )
    found = LowTimeouts(role, password, monkeypatch=monkeypatch)
    found.lower(database)
    try:
        yield found
    finally:
        for db in found.databases:
            with unlimited(db) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
                )
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        with unlimited(database) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
