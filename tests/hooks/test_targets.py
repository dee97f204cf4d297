"""Hostile connection fields and extras: each is refused naming the connection and the field, or
reaches libpq and pgjdbc as exactly the value given, and nothing else.

What libpq sees is read back with psycopg's ``conninfo_to_dict``; what pgjdbc sees with
pgjdbc's own ``Driver.parseURL`` (a small Java program), besides a Python reading of the URL by
the same rules (split on ``?``, ``&`` and ``=``, then percent-decode)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import unquote, unquote_plus

import pytest
from psycopg.conninfo import conninfo_to_dict

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.targets import SSLMODES, Target, make_target, tls_remedy

CONN = "pgsync_hostile"
JDBC_JAR = "/usr/share/java/postgresql.jar"
NASTY = "a'b\"c\\d e&f=g?h#i%j/k;l$(m)`n`|o<p>q\U0001f642é"


def _target(**overrides: Any) -> Target:
    fields: dict[str, Any] = {"host": "db.example.com", "port": 5432, "database": "shop", "user": "app"}
    extras = overrides.pop("extras", {})
    fields.update(overrides)
    return make_target(CONN, extras=extras, **fields)


def _jdbc_parts(url: str) -> tuple[str, str, dict[str, str]]:
    """``(host:port, database, properties)`` of a pgjdbc URL, read by pgjdbc's rules."""
    assert url.startswith("jdbc:postgresql://")
    rest, _, query = url[len("jdbc:postgresql://") :].partition("?")
    server, _, path = rest.partition("/")
    props: dict[str, str] = {}
    for token in filter(None, query.split("&")):
        key, _, value = token.partition("=")
        assert key not in props, f"{key} given twice in {url}"
        props[key] = unquote_plus(value)  # pgjdbc decodes with URLDecoder: '+' is a space
    return server, unquote_plus(path), props


# ---- sslmode -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "require&socketFactory=org.example.Evil",
        "require&sslfactory=org.postgresql.ssl.NonValidatingFactory",
        "verify-full sslmode=disable",
        "verify-full host=evil.example",
        "verify-full'",
        'verify-full"',
        "verify-full\x00",
        "verify-full\n",
        " verify-full",
        "VERIFY-FULL",
        "verify-full=",
        "x" * 100_000,
        "verify-full; DROP TABLE x; --",
        "$(touch /tmp/pwned)",
    ],
)
def test_a_hostile_sslmode_is_refused_naming_connection_and_field(value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _target(extras={"sslmode": value})
    message = str(raised.value)
    assert f"Airflow connection {CONN!r}" in message and "'sslmode'" in message
    assert "verify-full" in message  # the remedy lists the modes
    assert len(message) < 600 and "\x00" not in message and "\n" not in message


@pytest.mark.parametrize("value", [5, True, ["verify-full"], {"a": 1}])
def test_an_sslmode_that_is_no_string_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match=rf"{CONN!r}: extra 'sslmode' must be a string"):
        _target(extras={"sslmode": value})


@pytest.mark.parametrize("mode", SSLMODES)
def test_every_libpq_sslmode_reaches_both_drivers(mode: str) -> None:
    target = _target(extras={"sslmode": mode})
    assert conninfo_to_dict(target.conninfo())["sslmode"] == mode
    assert _jdbc_parts(target.jdbc_url())[2] == {"sslmode": mode}


# ---- TLS files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["sslrootcert", "sslcert", "sslkey"])
@pytest.mark.parametrize(
    "path",
    [
        "/etc/ssl/ca.pem&sslfactory=org.postgresql.ssl.NonValidatingFactory",
        "/etc/ssl/ca.pem sslmode=disable",
        f"/etc/{NASTY}/ca+1.pem",
        "relative/ca.pem?socketFactory=x#y",
    ],
)
def test_a_tls_file_with_metacharacters_reaches_both_drivers_as_one_value(key: str, path: str) -> None:
    """A path is any string a file can be called: it is carried, never interpreted."""
    target = _target(extras={"sslmode": "verify-full", key: path})
    libpq = conninfo_to_dict(target.conninfo())
    assert libpq == {
        "host": "db.example.com", "port": "5432", "dbname": "shop", "user": "app",
        "sslmode": "verify-full", key: path,
    }  # fmt: skip
    server, database, props = _jdbc_parts(target.jdbc_url())
    assert (server, database, props) == ("db.example.com:5432", "shop", {"sslmode": "verify-full", key: path})


@pytest.mark.parametrize(
    "path", ["/etc/ca.pem\x00.evil", "/etc/ca.pem\nsslmode=disable", "/x\t", "/" + "a" * 5000]
)
def test_a_tls_file_with_control_characters_or_too_long_is_refused(path: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _target(extras={"sslrootcert": path})
    message = str(raised.value)
    assert f"Airflow connection {CONN!r}" in message and "'sslrootcert'" in message
    assert "\x00" not in message and "\n" not in message and len(message) < 600


def test_other_extras_do_not_reach_the_urls() -> None:
    """Only the TLS extras are carried to Spark: no socketFactory, sslfactory, options, password."""
    extras = {
        "sslmode": "require",
        "socketFactory": "org.example.Evil",
        "sslfactory": "org.postgresql.ssl.NonValidatingFactory",
        "options": "-c default_transaction_read_only=off",
        "sslpassword": "secret",
        "password": "secret",
        "host": "evil.example",
    }
    target = _target(extras=extras)
    assert _jdbc_parts(target.jdbc_url())[2] == {"sslmode": "require"}
    assert set(conninfo_to_dict(target.conninfo())) == {"host", "port", "dbname", "user", "sslmode"}
    assert "secret" not in target.jdbc_url() + target.conninfo()


# ---- host and port -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "evil.example/other?sslmode=disable",
        "db.example.com?sslmode=disable",
        "user@db.example.com",
        "db.example.com:5433",
        "db.example.com#x",
        "db example.com",
        "db.example.com&socketFactory=x",
        "db,other.example",
        "hôst.example",
        "db.example.com\x00",
        "'db'",
        "-db.example.com",
        "a" * 64 + ".example",
        "x." * 200,
        "[db.example.com]",
        "::1]",
        "postgres://db.example.com",
    ],
)
def test_a_host_that_is_no_host_is_refused_naming_the_connection(host: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _target(host=host)
    message = str(raised.value)
    assert f"Airflow connection {CONN!r}: host" in message
    assert "\x00" not in message and len(message) < 600


@pytest.mark.parametrize(
    ("host", "libpq", "jdbc"),
    [
        ("db.example.com", "db.example.com", "db.example.com:5432"),
        ("db-1.internal_zone.example.", "db-1.internal_zone.example.", "db-1.internal_zone.example.:5432"),
        ("127.0.0.1", "127.0.0.1", "127.0.0.1:5432"),
        ("::1", "::1", "[::1]:5432"),
        ("[2001:db8::1]", "2001:db8::1", "[2001:db8::1]:5432"),
        ("", "localhost", "localhost:5432"),
        (None, "localhost", "localhost:5432"),
    ],
)
def test_host_names_and_addresses(host: str | None, libpq: str, jdbc: str) -> None:
    target = _target(host=host)
    assert conninfo_to_dict(target.conninfo())["host"] == libpq
    assert _jdbc_parts(target.jdbc_url())[0] == jdbc


def test_a_unix_socket_folder_serves_libpq_but_not_jdbc() -> None:
    target = _target(host="/var/run/postgresql")
    assert conninfo_to_dict(target.conninfo())["host"] == "/var/run/postgresql"
    with pytest.raises(ConfigError, match=rf"{CONN!r}: host '/var/run/postgresql' is a Unix socket folder"):
        target.jdbc_url()


@pytest.mark.parametrize("port", [0, 65536, -1, "5432; DROP", "5432/x", True, 1.5e10])
def test_a_port_out_of_range_is_refused(port: object) -> None:
    with pytest.raises(ConfigError, match=rf"{CONN!r}: port .* is not a port number"):
        _target(port=port)


# ---- database and login --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "database",
    [
        "a/b?c#d&e%f",
        "shop?sslmode=disable",
        "db+1 2",
        "dbé\U0001f642",
        "x'; DROP DATABASE y; --",
        "%2F",
        "a" * 63,
    ],
)
def test_a_database_name_reaches_both_drivers_intact(database: str) -> None:
    target = _target(database=database, extras={"sslmode": "verify-full"})
    assert conninfo_to_dict(target.conninfo())["dbname"] == database
    server, parsed, props = _jdbc_parts(target.jdbc_url())
    assert (server, parsed, props) == ("db.example.com:5432", database, {"sslmode": "verify-full"})
    assert unquote(target.jdbc_url().split("/")[3].split("?")[0]) == database


@pytest.mark.parametrize(("field", "name"), [("database", "database (schema field)"), ("user", "login")])
@pytest.mark.parametrize("value", ["shop\x00other", "é" * 32])
def test_a_name_with_nul_or_too_long_is_refused(field: str, name: str, value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _target(**{field: value})
    assert f"Airflow connection {CONN!r}: {name}" in str(raised.value)


@pytest.mark.parametrize("login", ["o'brien", 'say "hi"', "back\\slash", "sp ace", "user=admin host=evil"])
def test_a_login_with_quotes_is_one_libpq_value_and_never_in_the_url(login: str) -> None:
    target = _target(user=login, extras={"sslmode": "require"})
    assert conninfo_to_dict(target.conninfo())["user"] == login
    assert target.user == login
    assert _jdbc_parts(target.jdbc_url())[2] == {"sslmode": "require"}


# ---- through the hook (Airflow connections from the environment) ----------------------------------


def _set_connection(monkeypatch: pytest.MonkeyPatch, **fields: Any) -> PgReplicationHook:
    value = {"conn_type": "postgres", "host": "db.example.com", "port": 5432, "schema": "shop", **fields}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps(value))
    return PgReplicationHook(postgres_conn_id=CONN)


def test_the_hook_checks_before_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad sslmode is refused before any connection attempt (db.example.com is never contacted)."""
    hook = _set_connection(monkeypatch, extra={"sslmode": "require&socketFactory=x"})
    for attempt in (hook.connect, hook.jdbc_target, hook.libpq_target):
        with pytest.raises(ConfigError, match=rf"{CONN!r}: extra 'sslmode'"):
            attempt()


def test_an_airflow_uri_with_encoded_metacharacters_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    uri = "postgresql://app:pw@db.example.com:5432/shop?sslmode=require%26sslfactory%3DNonValidating"
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", uri)
    hook = PgReplicationHook(postgres_conn_id=CONN)
    assert hook.connection.extra_dejson["sslmode"] == "require&sslfactory=NonValidating"
    with pytest.raises(ConfigError, match="'sslmode'"):
        hook.jdbc_target()


def test_the_hook_keeps_the_password_out_of_both_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _set_connection(
        monkeypatch, login="app", password="pw&sslmode=disable", extra={"sslmode": "verify-full"}
    )
    url, user, password = hook.jdbc_target()
    assert password == "pw&sslmode=disable" and user == "app"
    assert "pw" not in url and "password" not in conninfo_to_dict(hook.libpq_target())
    assert _jdbc_parts(url)[2] == {"sslmode": "verify-full"}


# ---- the messages of TLS failures ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "tls"),
    [
        ('server certificate for "localhost" does not match host name "127.0.0.2"', True),
        ("SSL error: certificate verify failed", True),
        ("The hostname 127.0.0.2 could not be verified by hostnameverifier PgjdbcHostnameVerifier.", True),
        ("SSLHandshakeException: PKIX path building failed", True),
        ('could not read root certificate file "/x.pem": No such file or directory', True),
        ("server does not support SSL, but SSL was required", True),
        ("Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?", False),
        ('password authentication failed for user "app"', False),
        ('column "certificate" does not exist', False),
    ],
)
def test_tls_failures_get_the_tls_remedy(message: str, tls: bool) -> None:
    remedy = tls_remedy(message)
    assert bool(remedy) == tls
    if tls:
        assert "sslrootcert" in remedy and "verify-full" in remedy


# ---- what pgjdbc itself reads from the URLs -------------------------------------------------------

_PARSE = """
import java.net.URLEncoder;
import java.util.Properties;
public class Parse {
  public static void main(String[] urls) throws Exception {
    for (String url : urls) {
      Properties p = org.postgresql.Driver.parseURL(url, new Properties());
      StringBuilder line = new StringBuilder("URL");
      for (String key : new java.util.TreeSet<>(p.stringPropertyNames())) {
        line.append(' ').append(key).append('=').append(URLEncoder.encode(p.getProperty(key), "UTF-8"));
      }
      System.out.println(line);
    }
  }
}
"""


@pytest.mark.skipif(not Path(JDBC_JAR).exists(), reason=f"pgjdbc is not at {JDBC_JAR}")
def test_pgjdbc_reads_exactly_the_values_given(tmp_path: Path) -> None:
    cases = [
        _target(database=NASTY, extras={"sslmode": "verify-full", "sslrootcert": f"/tmp/{NASTY}.pem"}),
        _target(
            host="::1",
            database="shop?sslfactory=org.postgresql.ssl.NonValidatingFactory",
            extras={"sslmode": "require", "sslkey": "/k&socketFactory=x", "sslcert": "/c=1+2 3"},
        ),
    ]
    program = tmp_path / "Parse.java"
    program.write_text(_PARSE)
    done = subprocess.run(
        ["java", "-cp", JDBC_JAR, str(program), *(t.jdbc_url() for t in cases)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("URL")]
    assert len(lines) == len(cases)
    for target, line in zip(cases, lines, strict=True):
        seen = dict(item.split("=", 1) for item in line.split(" ")[1:])
        seen = {key: unquote_plus(value) for key, value in seen.items()}
        host = f"[{target.host}]" if ":" in target.host else target.host
        assert seen == {
            "PGDBNAME": target.database, "PGHOST": host, "PGPORT": str(target.port), **dict(target.ssl)
        }  # fmt: skip


def test_the_triggers_check_the_tls_extras_too() -> None:
    from airflow.sdk import Connection

    from airflow_provider_pgsync.triggers.connection import connection_args

    conn = Connection(conn_id=CONN, conn_type="postgres", host="db.example.com")
    with pytest.raises(ConfigError, match=rf"{CONN!r}: extra 'sslmode'"):
        connection_args(conn, {"sslmode": "verify-full host=evil"}, application_name="pgsync test")
    args = connection_args(conn, {"sslmode": "verify-full", "sslrootcert": "/ca.pem"}, application_name="x")
    assert (args["sslmode"], args["sslrootcert"]) == ("verify-full", "/ca.pem")
