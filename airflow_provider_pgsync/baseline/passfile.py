"""Passwords by reference: a libpq password file (``.pgpass`` format) for the baseline's Spark job.

The job never sees a password by value. The operator writes one line per database the job
connects to (the source, each PostgreSQL destination) into a file only its user can read and
ships it with the job (or names a file the cluster manager mounts); libpq (psycopg, ADBC) reads
it through the ``passfile`` connection parameter or ``PGPASSFILE``, and the PostgreSQL JDBC
driver through ``PGPASSFILE`` or the ``org.postgresql.pgpassfile`` system property. Format:
https://www.postgresql.org/docs/current/libpq-pgpass.html
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

PASSFILE_NAME = "pgsync.pgpass"
"""The name of the password file shipped with a job (in each executor's working directory)."""
JDBC_PASSFILE_PROPERTY = "org.postgresql.pgpassfile"
"""The JVM system property through which the PostgreSQL JDBC driver finds a password file."""


@dataclass(frozen=True)
class PassEntry:
    """One database's password: the ``host``, ``port``, ``dbname`` and ``user`` a connection
    names (as its conninfo has them) and the ``password``."""

    host: str
    port: str
    dbname: str
    user: str
    password: str = ""

    def __repr__(self) -> str:  # never the password, also not in a traceback's locals
        return f"PassEntry({self.host}:{self.port}/{self.dbname} as {self.user or '*'})"

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.host, self.port, self.dbname, self.user)


def _field(value: str, what: str, entry: PassEntry) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError(f"the {what} of {entry!r} has a line break: a password file cannot hold it")
    return value.replace("\\", "\\\\").replace(":", "\\:")


def _check_target(entry: PassEntry) -> None:
    """Refuse a target that no escape can write: libpq and the JDBC driver agree on escaping only
    ``\\`` and ``:``, so a literal ``*`` (the wildcard) or a line's leading ``#`` (a comment) has
    no form both of them read back."""
    if entry.host.startswith("#"):
        raise ValueError(
            f"the host of {entry!r} begins with '#': a password file reads that line as a "
            "comment; name the host without it"
        )
    for what, value in (
        ("host", entry.host),
        ("port", entry.port),
        ("database", entry.dbname),
        ("user", entry.user),
    ):
        if value == "*":
            raise ValueError(
                f"the {what} of {entry!r} is '*', which a password file reads as any {what}; "
                "rename it (or connect by another name for it)"
            )


def passfile_text(entries: Sequence[PassEntry]) -> str:
    """The password file of ``entries`` (``:`` and ``\\`` escaped; an empty user matches any).

    Two entries for the same database and user must agree: a password file holds one password
    per connection target (ValueError otherwise).
    """
    lines: dict[tuple[str, str, str, str], tuple[str, str]] = {}  # key: (password, line)
    for entry in entries:
        if entry.key in lines:
            if lines[entry.key][0] != entry.password:
                raise ValueError(
                    f"two connections name {entry!r} with different passwords; "
                    "make them agree (only one of them can be right)"
                )
            continue
        _check_target(entry)
        fields = (
            _field(entry.host, "host", entry) or "localhost",
            _field(entry.port, "port", entry) or "5432",
            _field(entry.dbname, "database", entry) or "*",
            _field(entry.user, "user", entry) or "*",
            _field(entry.password, "password", entry),
        )
        lines[entry.key] = (entry.password, ":".join(fields))
    return "".join(line + "\n" for _, line in lines.values())


def write_passfile(path: Path, entries: Sequence[PassEntry]) -> None:
    """Create ``path`` (it must not exist) readable and writable by this user only (0600)."""
    text = passfile_text(entries)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def password_for(text: str, host: str, port: str, dbname: str, user: str) -> str | None:
    """The password a password file's ``text`` gives for that target (its first matching line,
    ``*`` matching anything, as libpq reads it), or None."""
    wanted = (host or "localhost", port or "5432", dbname, user)
    for line in text.split("\n"):  # libpq's lines (str.splitlines also splits at \x1e and such)
        line = line.removesuffix("\r")
        if not line or line.startswith("#"):
            continue
        fields = _split(line)
        if len(fields) == 5 and all(f in ("*", w) for f, w in zip(fields[:4], wanted, strict=True)):
            return fields[4]
    return None


def _split(line: str) -> list[str]:
    """A password file's line in its ``:``-separated fields, ``\\`` escapes undone."""
    fields: list[str] = []
    field: list[str] = []
    escaped = False
    for char in line:
        if escaped:
            field.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ":" and len(fields) < 4:
            fields.append("".join(field))
            field = []
        else:
            field.append(char)
    fields.append("".join(field))
    return fields


def pass_entry(conninfo: str, password: str) -> PassEntry:
    """The password-file entry of the database ``conninfo`` names (as libpq and the JDBC URL
    name it: the same host, port, database and user)."""
    params = conninfo_to_dict(conninfo)
    return PassEntry(
        host=str(params.get("host") or "localhost"),
        port=str(params.get("port") or "5432"),
        dbname=str(params.get("dbname") or ""),
        user=str(params.get("user") or ""),
        password=password,
    )


_private_copies: dict[str, str] = {}


def private_passfile(path: str) -> str:
    """``path`` if only its owner can read it, else a private version of it: libpq ignores a
    password file that its group or others may read, and the copy Spark fetches for a task (or a
    Kubernetes secret volume) may be such a file. The file is narrowed to 0600 when this user
    owns it and may change it, else copied once per process into a private temporary file."""
    if os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO) == 0:
        return path
    with contextlib.suppress(OSError):  # not ours, or a read-only mount
        os.chmod(path, 0o600)
        return path
    copy = _private_copies.get(path)
    if copy is None or not os.path.exists(copy):
        fd, copy = tempfile.mkstemp(prefix="pgsync-", suffix=".pgpass")  # created 0600
        with os.fdopen(fd, "wb") as out, open(path, "rb") as source:
            shutil.copyfileobj(source, out)
        _private_copies[path] = copy
        atexit.register(_remove, copy)
    return copy


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
