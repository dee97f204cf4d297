"""The test clusters' quick password check (``Cluster.quick_auth``): the superuser logs in by
md5, a wrong password is refused, and a role with a SCRAM secret still logs in by SCRAM."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from pgcluster import SUPERUSER, Cluster
from tests.conftest import Database


def _secret(cluster: Cluster, role: str) -> str:
    with psycopg.connect(cluster.conninfo("postgres")) as conn:
        row = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,)).fetchone()
    assert row is not None and row[0] is not None
    return str(row[0])


def test_the_superuser_logs_in_by_md5_and_a_wrong_password_is_refused(pg_cluster: Cluster) -> None:
    assert pg_cluster.quick_auth, "the session's cluster is made without quick_auth"
    assert _secret(pg_cluster, SUPERUSER).startswith("md5")
    wrong = psycopg.conninfo.make_conninfo(pg_cluster.conninfo("postgres"), password="not-it")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong, connect_timeout=10).close()


def test_a_role_with_a_scram_secret_logs_in_by_scram(database: Database) -> None:
    cluster, role = database.cluster, "pgsync_quick_auth_probe"
    with database.connect() as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'probe-secret'").format(sql.Identifier(role)))
    try:
        assert _secret(cluster, role).startswith("SCRAM-SHA-256$")
        login = psycopg.conninfo.make_conninfo(cluster.conninfo(database.name), user=role)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(login, password="not-it", connect_timeout=10).close()
        with psycopg.connect(login, password="probe-secret", connect_timeout=10) as conn:
            assert conn.pgconn.used_password and conn.execute("SELECT current_user").fetchone() == (role,)
    finally:
        with database.connect() as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
