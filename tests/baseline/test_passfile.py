"""The password file: its format (libpq reads back what it says), its mode, its private copies."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_pgsync.baseline import passfile
from airflow_provider_pgsync.baseline.passfile import (
    PassEntry,
    passfile_text,
    password_for,
    private_passfile,
    write_passfile,
)
from tests.baseline.secret_role import require_password, secret_role
from tests.conftest import Database


def test_fields_are_escaped_and_an_empty_user_matches_any() -> None:
    text = passfile_text(
        [
            PassEntry("db.example", "5432", "shop", "app", "a:b\\c"),
            PassEntry("/var/run/postgresql", "5433", "x:y", "", "p"),
        ]
    )
    assert text == "db.example:5432:shop:app:a\\:b\\\\c\n/var/run/postgresql:5433:x\\:y:*:p\n"


_FIELD = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), min_size=1)
_NAME = _FIELD.filter(lambda name: name != "*")


@given(host=_NAME.filter(lambda host: not host.startswith("#")), dbname=_NAME, user=_NAME, password=_FIELD)
def test_a_job_reads_back_the_password_written_for_its_target(
    host: str, dbname: str, user: str, password: str
) -> None:
    """What the jobs read (the lake's metastore password) is what the operator wrote, whatever
    ``:`` and ``\\`` the fields hold; another target finds nothing, a ``*`` user anything."""
    text = passfile_text([PassEntry(host, "5432", dbname, user, password)])
    assert password_for(text, host, "5432", dbname, user) == password
    assert password_for(text, host, "5433", dbname, user) is None
    anyone = passfile_text([PassEntry(host, "5432", dbname, "", password)])
    assert password_for(anyone, host, "5432", dbname, user) == password


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (PassEntry("#h", "5432", "d", "u", "p"), "begins with '#'"),  # the line would be a comment
        (PassEntry("*", "5432", "d", "u", "p"), "the host .* is '\\*'"),  # a wildcard
        (PassEntry("h", "5432", "*", "u", "p"), "the database .* is '\\*'"),
        (PassEntry("h", "5432", "d", "*", "p"), "the user .* is '\\*'"),
    ],
)
def test_a_target_no_reader_would_read_back_is_refused(entry: PassEntry, message: str) -> None:
    """libpq and the JDBC driver escape only ``\\`` and ``:``: a leading ``#`` or a literal ``*``
    has no form both read as written."""
    with pytest.raises(ValueError, match=message):
        passfile_text([entry])
    assert passfile_text([PassEntry("h#", "5432", "d", "u", "*")]) == "h#:5432:d:u:*\n"


def test_the_same_target_twice_must_agree() -> None:
    same = PassEntry("h", "5432", "d", "u", "p")
    assert passfile_text([same, same]) == "h:5432:d:u:p\n"
    with pytest.raises(ValueError, match="different passwords") as raised:
        passfile_text([same, PassEntry("h", "5432", "d", "u", "other")])
    assert "other" not in str(raised.value) and ":p" not in str(raised.value)


def test_a_line_break_cannot_be_written() -> None:
    with pytest.raises(ValueError, match="line break"):
        passfile_text([PassEntry("h", "5432", "d", "u", "two\nlines")])


def test_entries_never_show_their_password() -> None:
    entry = PassEntry("h", "5432", "d", "u", "hunter2")
    assert "hunter2" not in repr(entry) and "hunter2" not in str(entry)


def test_written_file_is_private_and_new(tmp_path: Path) -> None:
    path = tmp_path / "pgpass"
    write_passfile(path, [PassEntry("h", "5432", "d", "u", "p")])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "h:5432:d:u:p\n"
    with pytest.raises(FileExistsError):
        write_passfile(path, [])


def test_an_open_file_is_narrowed(tmp_path: Path) -> None:
    path = tmp_path / "fetched"
    path.write_text("h:5432:d:u:p\n")
    path.chmod(0o644)
    assert private_passfile(str(path)) == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_file_that_cannot_be_narrowed_is_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only mount (a Kubernetes secret volume) refuses chmod: a private copy is used."""
    path = tmp_path / "mounted"
    path.write_text("h:5432:d:u:p\n")
    path.chmod(0o644)

    def read_only(*args: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(passfile.os, "chmod", read_only)
    copy = private_passfile(str(path))
    assert copy != str(path) and Path(copy).read_text() == "h:5432:d:u:p\n"
    assert stat.S_IMODE(os.stat(copy).st_mode) == 0o600
    assert private_passfile(str(path)) == copy  # once per process


def test_libpq_reads_the_password_from_the_file(database: Database, tmp_path: Path) -> None:
    """A real server that requires the password (scram) accepts the role through the file alone,
    with the escaped ``:`` and ``\\`` of its password; the file's mode matters to libpq."""
    with secret_role(database) as role:
        require_password(role, database.name)
        path = tmp_path / "pgpass"
        write_passfile(path, [PassEntry(role.host, str(role.port), database.name, role.name, role.password)])
        conninfo = role.conninfo(database.name, passfile=str(path))
        with psycopg.connect(conninfo) as conn:
            assert conn.execute("SELECT current_user").fetchone() == (role.name,)
        path.chmod(0o644)  # libpq ignores a file others may read ...
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(conninfo).close()
        narrowed = role.conninfo(database.name, passfile=private_passfile(str(path)))
        with psycopg.connect(narrowed) as conn:  # ... which is why tasks narrow their copy
            assert conn.execute("SELECT 1").fetchone() == (1,)
