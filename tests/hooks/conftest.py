"""A PostgreSQL server that speaks TLS only, with a certificate from a test CA.

The server's certificate names ``DNS:localhost`` and ``IP:127.0.0.1``; the server also
listens on 127.0.0.2, an address the certificate does not name (for the wrong-host case).
pg_hba refuses every connection without TLS. ``ca_file`` is the test CA's certificate, in
a folder whose name holds URL and conninfo metacharacters (it must reach pgjdbc and libpq
intact); ``other_ca_file`` is a CA that signed nothing of this server.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgcluster import SUPERUSER, Cluster, default_base_dir, dev_password, server_user
from tests.conftest import Database, free_port
from tests.dags.conftest import make_pipeline_dags  # noqa: F401 (the fixture, for test_tls_pipeline)
from tests.hooks.tls_certs import make_authority, server_certificate


@dataclass(frozen=True)
class TlsServer:
    cluster: Cluster
    ca_file: Path
    other_ca_file: Path
    certificates: dict[str, tuple[bytes, bytes]]
    """``trusted`` (the test CA's, which the server starts with) and ``untrusted`` (the other CA's):
    ``(certificate, key)`` PEM for the same names."""

    def serve(self, which: str) -> None:
        """Switch the server to certificate ``which`` for new connections (a reload; open
        sessions keep theirs) and wait until a new verify-full connection sees the switch."""
        cert, key = self.certificates[which]
        self.cluster.install_file("data/server.crt", cert, 0o644)
        self.cluster.install_file("data/server.key", key, 0o600)
        with psycopg.connect(self.cluster.conninfo("postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
        probe = make_conninfo(
            self.cluster.conninfo("postgres"),
            host="localhost",
            sslmode="verify-full",
            sslrootcert=str(self.ca_file),
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(probe, connect_timeout=5).close()
                trusted = True
            except psycopg.OperationalError:
                trusted = False
            if trusted == (which == "trusted"):
                return
            assert time.monotonic() < deadline, f"the server did not switch to the {which} certificate"
            time.sleep(0.05)

    def connection(self, database: str, *, host: str = "localhost", **extra: Any) -> str:
        """An ``AIRFLOW_CONN_*`` value (JSON) for ``database`` on this server with ``extra``."""
        return json.dumps(
            {
                "conn_type": "postgres",
                "host": host,
                "port": self.cluster.port,
                "schema": database,
                "login": SUPERUSER,
                "password": dev_password(),
                "extra": extra,
            }
        )

    def verify_full(self, database: str, *, host: str = "localhost", ca: Path | None = None) -> str:
        """The connection with ``sslmode=verify-full`` and the test CA (or ``ca``) as root certificate."""
        root = str(ca or self.ca_file)
        return self.connection(database, host=host, sslmode="verify-full", sslrootcert=root)


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    ca, other = make_authority("pgsync test CA"), make_authority("pgsync untrusted CA")
    names = {"dns": ("localhost",), "ips": ("127.0.0.1",)}
    certificates = {
        "trusted": server_certificate(ca, **names),
        "untrusted": server_certificate(other, **names),
    }
    cert, key = certificates["trusted"]
    folder = tmp_path_factory.mktemp("tls") / "ca dir&sslmode=disable?#%20 'x'"
    folder.mkdir()
    ca_file, other_ca_file = folder / "root ca+1.pem", folder / "other.pem"
    ca_file.write_bytes(ca.pem)
    other_ca_file.write_bytes(other.pem)
    base = default_base_dir(server_user())
    cluster = Cluster(
        root=base / f"test-pg-tls-{os.getpid()}",  # test-pg-*-<pid>: removed if this run dies
        port=free_port(),
        settings={
            "listen_addresses": "'127.0.0.1,127.0.0.2'",
            "ssl": "on",
            "ssl_cert_file": "'server.crt'",
            "ssl_key_file": "'server.key'",
        },
        hba_first=("hostnossl all all 0.0.0.0/0 reject", "hostssl all all 127.0.0.0/8 scram-sha-256"),
    )
    try:
        cluster.init()
        # relative paths in the settings are read from the data folder; the key must be 0600
        cluster.install_file("data/server.crt", cert, 0o644)
        cluster.install_file("data/server.key", key, 0o600)
        cluster.start()
        yield TlsServer(cluster, ca_file, other_ca_file, certificates)
    finally:
        cluster.destroy()


@pytest.fixture
def tls_database(tls_server: TlsServer) -> Iterator[Database]:
    """A new database on the TLS server (the fixtures' own connections use sslmode=prefer)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    tls_server.cluster.create_database(name)
    try:
        yield Database(tls_server.cluster, name)
    finally:
        tls_server.cluster.drop_database(name)
