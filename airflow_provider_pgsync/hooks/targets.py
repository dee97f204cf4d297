"""Where an Airflow PostgreSQL connection points, checked, and written for libpq and pgjdbc.

The fields and TLS extras of a connection become a libpq connection string (psycopg, ADBC,
the PostgreSQL destination, Spark tasks) and a JDBC URL (Spark's JDBC reader). Both are
built from checked values only: a value that could change what the string means (a ``&``
or ``=`` in a JDBC URL, a NUL byte that libpq would cut the value at, a host that is no
host name) is refused with a ConfigError naming the connection and the field. libpq values
are quoted by psycopg's ``make_conninfo``; JDBC values are percent-encoded, which pgjdbc
decodes. Neither holds the password.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from psycopg.conninfo import make_conninfo

from airflow_provider_pgsync.errors import ConfigError

SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
"""libpq's sslmode values (pgjdbc takes the same)."""
SSL_FILES = ("sslrootcert", "sslcert", "sslkey")
"""Extras naming files on the machine that connects (the Airflow worker, every Spark node)."""
SSL_EXTRAS = ("sslmode", *SSL_FILES)
"""The TLS extras carried to every connection pgsync opens (psycopg, ADBC, JDBC)."""

_NAME_BYTES = 63  # PostgreSQL cuts database and role names longer than this (NAMEDATALEN - 1)
_PATH_CHARS = 4096
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Target:
    """A checked PostgreSQL target: host (a name, an IPv4 or a bare IPv6 address, a socket folder), port,
    database, user and TLS extras (``SSL_EXTRAS`` that are set), of Airflow connection ``conn_id``."""

    conn_id: str
    host: str
    port: int
    database: str
    user: str
    ssl: tuple[tuple[str, str], ...] = field(default=())

    def describe(self) -> str:
        """``host:port/database``, for messages."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}/{self.database}"

    def conninfo(self) -> str:
        """The libpq connection string (no password)."""
        return make_conninfo(
            host=self.host, port=self.port, dbname=self.database, user=self.user, **dict(self.ssl)
        )

    def jdbc_url(self) -> str:
        """The pgjdbc URL: database and TLS values percent-encoded (pgjdbc decodes them)."""
        if self.host.startswith("/"):
            raise ConfigError(
                f"Airflow connection {self.conn_id!r}: host {self.host!r} is a Unix socket folder, which "
                "Spark's JDBC reader cannot use: give a host name or address the Spark nodes can reach"
            )
        host = f"[{self.host}]" if ":" in self.host else self.host
        url = f"jdbc:postgresql://{host}:{self.port}/{quote(self.database, safe='')}"
        if self.ssl:
            url += "?" + "&".join(f"{key}={quote(value, safe='')}" for key, value in self.ssl)
        return url


def make_target(
    conn_id: str,
    *,
    host: str | None,
    port: int | str | None,
    database: str | None,
    user: str | None,
    extras: Mapping[str, Any],
) -> Target:
    """Check the fields and TLS extras of connection ``conn_id``; a ConfigError names the bad one."""
    return Target(
        conn_id=conn_id,
        host=check_host(conn_id, host or "localhost"),
        port=check_port(conn_id, port),
        database=_check_name(conn_id, "database (schema field)", database or "postgres"),
        user=_check_name(conn_id, "login", user or ""),
        ssl=check_ssl_extras(conn_id, extras),
    )


def check_host(conn_id: str, host: str) -> str:
    """A host name, an IPv4 address or an IPv6 address (bare or in brackets), returned bare; or
    the absolute path of a Unix socket folder (libpq only)."""
    if host.startswith("/") and not _CONTROL.search(host) and len(host) <= _PATH_CHARS:
        return host
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    if len(host) <= 253 and _HOSTNAME.fullmatch(host):
        return host
    raise ConfigError(
        f"Airflow connection {conn_id!r}: host {_shown(host)} is not a host name, an IPv4 address or "
        "an IPv6 address: give one host, without a scheme, port, path, user or spaces (the port "
        "has its own field)"
    )


def check_port(conn_id: str, port: int | str | None) -> int:
    """The port (5432 when empty)."""
    if port is None or port == "":
        return 5432
    try:
        number = int(port)
    except (TypeError, ValueError):
        number = 0
    if isinstance(port, bool) or not 1 <= number <= 65535:
        raise ConfigError(
            f"Airflow connection {conn_id!r}: port {_shown(port)} is not a port number (1-65535)"
        )
    return number


def check_ssl_extras(conn_id: str, extras: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The TLS extras that are set, in ``SSL_EXTRAS`` order: sslmode one of libpq's modes, the
    files paths without control characters."""
    found: list[tuple[str, str]] = []
    for key in SSL_EXTRAS:
        value = extras.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise ConfigError(
                f"Airflow connection {conn_id!r}: extra {key!r} must be a string, not {type(value).__name__}"
            )
        if key == "sslmode" and value not in SSLMODES:
            raise ConfigError(
                f"Airflow connection {conn_id!r}: extra 'sslmode' is {_shown(value)}, not one of "
                f"{', '.join(SSLMODES)} (use verify-full to check the server's certificate and name)"
            )
        if key != "sslmode" and (_CONTROL.search(value) or len(value) > _PATH_CHARS):
            raise ConfigError(
                f"Airflow connection {conn_id!r}: extra {key!r} {_shown(value)} is not a file path "
                f"(control characters or longer than {_PATH_CHARS}): give the path of the PEM file, "
                "which must exist on the Airflow worker and on every Spark node"
            )
        found.append((key, value))
    return tuple(found)


def _check_name(conn_id: str, what: str, value: str) -> str:
    if "\x00" in value or len(value.encode()) > _NAME_BYTES:
        raise ConfigError(
            f"Airflow connection {conn_id!r}: {what} {_shown(value)} is not a PostgreSQL name "
            f"(a NUL byte, or longer than {_NAME_BYTES} bytes, which the server would cut)"
        )
    return value


def _shown(value: object, limit: int = 80) -> str:
    """A value for a message: repr (control characters visible), cut when long."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value))} characters)"


# phrases of libpq (also under ADBC), OpenSSL and pgjdbc when TLS refuses a connection
_TLS_SIGNS = (
    "certificate verify failed",
    "server certificate",
    "root certificate",
    "certificate has expired",
    "bad certificate",
    "unknown ca",
    "does not match host name",
    "could not be verified",
    "pkix path",
    "certification path",
    "sslhandshakeexception",
    "ssl error",
    "ssl syscall",
    "ssl connection",
    "support ssl",
    "no encryption",
    "sslmode",
    "sslrootcert",
)


def tls_remedy(message: str) -> str:
    """What to check when a connection error ``message`` (libpq, ADBC or pgjdbc) is about TLS; ''
    when it is not."""
    lowered = message.lower()
    if not any(sign in lowered for sign in _TLS_SIGNS):
        return ""
    return (
        "TLS: the server's certificate must be signed by the CA in the extra 'sslrootcert' (a PEM "
        "file on the Airflow worker and every Spark node) and, with sslmode=verify-full, name the "
        "connection's host (DNS or IP subject alternative name)"
    )


def tls_note(error: str, conn_ids: Sequence[str]) -> str:
    """`` (Airflow connection 'a' or 'b': <remedy>)`` when ``error`` (e.g. a Spark task's) is a TLS
    refusal; '' otherwise. ``conn_ids`` are the connections the failed work used."""
    remedy = tls_remedy(error)
    if not remedy:
        return ""
    names = " or ".join(repr(c) for c in dict.fromkeys(conn_ids))
    return f" (Airflow connection {names}: {remedy})"
