"""A login role with a distinctive password, for tests that look for the password where it must
not be. The test cluster checks passwords over TCP (``dev/pgcluster.py``) and this role's is a
SCRAM secret, so every connection of this role proves the password reached it (by scram-sha-256)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.conftest import Database


@dataclass(frozen=True)
class SecretRole:
    """``name`` logs in with ``password``, which holds ``token`` (32 hex digits, found in any
    form the password may take) and the characters a password file escapes (``:`` and ``\\``)."""

    name: str
    token: str
    host: str
    port: int

    @property
    def password(self) -> str:
        return f"pw:{self.token}\\q'z"

    def airflow_conn(self, dbname: str) -> str:
        """The role's connection to ``dbname`` as an ``AIRFLOW_CONN_*`` value (JSON)."""
        return json.dumps(
            {
                "conn_type": "postgres",
                "host": self.host,
                "port": self.port,
                "login": self.name,
                "password": self.password,
                "schema": dbname,
            }
        )

    def conninfo(self, dbname: str, **params: str) -> str:
        """A libpq conninfo of the role without its password."""
        return make_conninfo(host=self.host, port=self.port, user=self.name, dbname=dbname, **params)


@contextmanager
def secret_role(database: Database, *others: Database) -> Iterator[SecretRole]:
    """A superuser login role with a distinctive password; dropped with what it owns in
    ``database`` and ``others`` afterwards."""
    token = uuid.uuid4().hex
    role = SecretRole(f"secret_{token[:8]}", token, "127.0.0.1", database.cluster.port)
    database.execute(
        sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}")
        .format(sql.Identifier(role.name), sql.Literal(role.password))
        .as_string(None)
    )
    try:
        yield role
    finally:
        for db in (database, *others):
            with suppress(psycopg.Error):
                db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role.name)).as_string(None))
        with suppress(psycopg.Error):
            database.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role.name)).as_string(None))


def require_password(role: SecretRole, dbname: str) -> None:
    """Fail unless the server refuses ``role`` without its password (scram over TCP)."""
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(role.conninfo(dbname, passfile="/nonexistent"), connect_timeout=10).close()
