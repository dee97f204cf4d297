"""TLS with ``sslmode=verify-full`` and a root certificate from the Airflow connection, against a
server that speaks TLS only (tests/hooks/conftest.py), on every path that connects without Spark:
the hook's psycopg connections (source, state store, status page, sensors), the triggers' async
connections, the PostgreSQL destination, ADBC (what Spark tasks run on the Arrow path) and pgjdbc
(what Spark's JDBC reader runs). A wrong host name and an unknown CA are refused, naming the
connection. The baselines through Spark are in test_tls_pipeline.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo

from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.errors import DestinationUnavailableError, SourceUnavailableError
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.triggers.connection import connect as trigger_connect
from tests.conftest import Database
from tests.hooks.conftest import TlsServer

CONN = "pgsync_tls"
SSL_IN_USE = "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
JDBC_JAR = "/usr/share/java/postgresql.jar"


def _hook(monkeypatch: pytest.MonkeyPatch, value: str) -> PgReplicationHook:
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", value)
    return PgReplicationHook(postgres_conn_id=CONN)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_verify_full_connects_by_name_and_by_address(
    tls_server: TlsServer, tls_database: Database, monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    hook = _hook(monkeypatch, tls_server.verify_full(tls_database.name, host=host))
    with hook.connect() as conn:
        row = conn.execute(SSL_IN_USE).fetchone()
    assert row is not None and row[0] is True, "the connection does not use TLS"
    assert str(row[1]).startswith("TLSv1.")


def test_the_server_refuses_connections_without_tls(
    tls_server: TlsServer, tls_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixture is what it claims: without TLS pg_hba turns the client away."""
    hook = _hook(monkeypatch, tls_server.connection(tls_database.name, sslmode="disable"))
    with pytest.raises(SourceUnavailableError, match="no encryption"):
        hook.connect()


def test_a_host_the_certificate_does_not_name_is_refused(
    tls_server: TlsServer, tls_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 127.0.0.2 reaches the same server, but its certificate names localhost and 127.0.0.1 only
    hook = _hook(monkeypatch, tls_server.verify_full(tls_database.name, host="127.0.0.2"))
    with pytest.raises(SourceUnavailableError) as raised:
        hook.connect()
    message = str(raised.value)
    assert f"Airflow connection {CONN!r}" in message
    assert f"127.0.0.2:{tls_server.cluster.port}/{tls_database.name}" in message
    assert "does not match host name" in message  # libpq's reason
    assert "sslrootcert" in message and "verify-full" in message  # the remedy


def test_an_unknown_ca_is_refused(
    tls_server: TlsServer, tls_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = _hook(monkeypatch, tls_server.verify_full(tls_database.name, ca=tls_server.other_ca_file))
    with pytest.raises(SourceUnavailableError) as raised:
        hook.connect()
    message = str(raised.value)
    assert f"Airflow connection {CONN!r}" in message
    assert "certificate verify failed" in message
    assert "sslrootcert" in message


def test_a_missing_root_certificate_file_is_refused(
    tls_server: TlsServer, tls_database: Database, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hook = _hook(monkeypatch, tls_server.verify_full(tls_database.name, ca=tmp_path / "absent.pem"))
    with pytest.raises(SourceUnavailableError) as raised:
        hook.connect()
    assert f"Airflow connection {CONN!r}" in str(raised.value)
    assert "absent.pem" in str(raised.value)


# ---- triggers (the triggerer's async connections) ------------------------------------------------


def test_triggers_connect_with_verify_full_and_refuse_an_unknown_ca(
    tls_server: TlsServer, tls_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def ssl_in_use() -> object:
        conn = await trigger_connect(CONN, application_name="pgsync test")
        try:
            cur = await conn.execute(SSL_IN_USE)
            row = await cur.fetchone()
            return row[0] if row else None
        finally:
            await conn.close()

    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", tls_server.verify_full(tls_database.name))
    assert asyncio.run(ssl_in_use()) is True
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN.upper()}", tls_server.verify_full(tls_database.name, ca=tls_server.other_ca_file)
    )
    refused = f"Airflow connection {CONN!r}.*certificate verify failed"
    with pytest.raises(SourceUnavailableError, match=refused):
        asyncio.run(ssl_in_use())


# ---- the PostgreSQL destination -------------------------------------------------------------------


def test_postgres_destination_connects_with_verify_full_and_refuses_a_wrong_host(
    tls_server: TlsServer, tls_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", tls_server.verify_full(tls_database.name))
    destination = PostgresDestination.from_config({"kind": "postgres", "conn_id": CONN, "name": "replica"})
    try:
        row = destination._conn.execute(SSL_IN_USE).fetchone()
        assert row is not None and row[0] is True
    finally:
        destination.close()
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN.upper()}", tls_server.verify_full(tls_database.name, host="127.0.0.2")
    )
    with pytest.raises(DestinationUnavailableError) as raised:
        PostgresDestination.from_config({"kind": "postgres", "conn_id": CONN, "name": "replica"})
    message = str(raised.value)
    assert "destination replica" in message and f"Airflow connection {CONN!r}" in message
    assert "does not match host name" in message and "sslrootcert" in message


# ---- ADBC (Spark tasks on the Arrow path) ---------------------------------------------------------


def _adbc_ssl(hook: PgReplicationHook) -> object:
    import adbc_driver_postgresql.dbapi as adbc

    conninfo = make_conninfo(hook.libpq_target(), password=hook.connection.password)
    with adbc.connect(conninfo, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(SSL_IN_USE)
        row = cursor.fetchone()
    return row[0] if row else None


def test_adbc_connects_with_verify_full_and_refuses_a_wrong_host_or_ca(
    tls_server: TlsServer, tls_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _adbc_ssl(_hook(monkeypatch, tls_server.verify_full(tls_database.name))) is True
    wrong_host = _hook(monkeypatch, tls_server.verify_full(tls_database.name, host="127.0.0.2"))
    with pytest.raises(Exception, match="does not match host name"):
        _adbc_ssl(wrong_host)
    wrong_ca = _hook(monkeypatch, tls_server.verify_full(tls_database.name, ca=tls_server.other_ca_file))
    with pytest.raises(Exception, match="certificate verify failed"):
        _adbc_ssl(wrong_ca)


# ---- pgjdbc (Spark's JDBC reader), the same URL and properties Spark hands it -----------------------

_JDBC_PROBE = """
import java.sql.*;
import java.util.Properties;
public class Probe {
  public static void main(String[] args) throws Exception {
    Properties p = new Properties();
    p.setProperty("user", args[1]);
    p.setProperty("password", System.getenv("PROBE_PASSWORD"));
    try (Connection c = DriverManager.getConnection(args[0], p);
         ResultSet r = c.createStatement().executeQuery(QUERY)) {
      r.next();
      System.out.println("SSL " + r.getBoolean(1));
    }
  }
}
""".replace("QUERY", repr(SSL_IN_USE).replace("'", '"'))


def _jdbc_ssl(hook: PgReplicationHook, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    url, user, password = hook.jdbc_target()
    probe = tmp_path / "Probe.java"
    probe.write_text(_JDBC_PROBE)
    return subprocess.run(
        ["java", "-cp", JDBC_JAR, str(probe), url, user],
        env={**os.environ, "PROBE_PASSWORD": password or ""},  # the password stays off the command line
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(not Path(JDBC_JAR).exists(), reason=f"pgjdbc is not at {JDBC_JAR}")
def test_pgjdbc_connects_with_verify_full_and_refuses_a_wrong_host_or_ca(
    tls_server: TlsServer, tls_database: Database, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hook = _hook(monkeypatch, tls_server.verify_full(tls_database.name))
    assert "%20" in hook.jdbc_target()[0], "the CA's folder name should need percent-encoding"
    done = _jdbc_ssl(hook, tmp_path)
    assert done.stdout.strip() == "SSL true", done.stderr[-3000:]

    by_address = _hook(monkeypatch, tls_server.verify_full(tls_database.name, host="127.0.0.2"))
    wrong_host = _jdbc_ssl(by_address, tmp_path)
    assert wrong_host.returncode != 0
    assert "hostname 127.0.0.2 could not be verified" in wrong_host.stderr, wrong_host.stderr[-3000:]

    wrong_ca = _hook(monkeypatch, tls_server.verify_full(tls_database.name, ca=tls_server.other_ca_file))
    refused = _jdbc_ssl(wrong_ca, tmp_path)
    assert refused.returncode != 0
    assert "PKIX path" in refused.stderr or "certificate" in refused.stderr.lower(), refused.stderr[-3000:]
