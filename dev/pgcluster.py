"""A private PostgreSQL cluster for development and tests.

The cluster lives in a folder of its own (by default ``.dev/pg`` in the repository),
listens on 127.0.0.1 at a configurable port and runs with ``wal_level=logical`` and
enough replication slots and WAL senders for the tests. PostgreSQL refuses to run as
root, so when this runs as root every server command runs as an unprivileged OS user
(``postgres`` if it exists, otherwise a system user ``pgsync`` created on demand).

The superuser is ``pgsync``; its password comes from ``PGSYNC_DEV_PASSWORD`` (a dev
default otherwise). It is handed to ``initdb`` through a private file and to clients
through the environment or a connection object, never on a command line.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PORT = 54329
SUPERUSER = "pgsync"
_FALLBACK_USER = "pgsync"


def free_port() -> int:
    """A TCP port of 127.0.0.1 free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dev_password() -> str:
    """The dev superuser's password: ``PGSYNC_DEV_PASSWORD`` or the dev default."""
    return os.environ.get("PGSYNC_DEV_PASSWORD", "pgsync-dev-secret")


def find_bindir() -> Path:
    """The newest PostgreSQL (14 or newer) server binaries on this machine."""
    override = os.environ.get("PGSYNC_PG_BINDIR")
    if override:
        return Path(override)
    found = []
    for candidate in Path("/usr/lib/postgresql").glob("*/bin/initdb"):
        try:
            found.append((int(candidate.parent.parent.name), candidate.parent))
        except ValueError:
            continue
    found = [f for f in found if f[0] >= 14]
    if found:
        return max(found)[1]
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise SystemExit(
        "no PostgreSQL 14+ server found: install it (`make deps` does, through apt: "
        "postgresql) or set PGSYNC_PG_BINDIR to the folder holding initdb and pg_ctl"
    )


def server_user() -> str | None:
    """The OS user the server runs as when we are root; None when we are not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", _FALLBACK_USER):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _FALLBACK_USER],
        check=True,
    )
    return _FALLBACK_USER


def _as_server_user(cmd: list[str], user: str | None) -> list[str]:
    return cmd if user is None else ["runuser", "-u", user, "--", *cmd]


def _reachable_by(path: Path, user: str | None) -> bool:
    """Whether ``user`` may enter ``path`` (it must traverse every parent folder)."""
    if user is None:
        return True
    probe = subprocess.run(_as_server_user(["test", "-x", str(path)], user), check=False)
    return probe.returncode == 0


def default_base_dir(user: str | None) -> Path:
    """``.dev`` in the repository, or a folder under /var/tmp if the server user cannot reach it."""
    base = REPO / ".dev"
    base.mkdir(exist_ok=True)
    if _reachable_by(base, user):
        return base
    digest = hashlib.sha1(str(REPO).encode()).hexdigest()[:10]
    fallback = Path("/var/tmp") / f"pgsync-{digest}"
    fallback.mkdir(mode=0o755, exist_ok=True)
    return fallback


@dataclass
class Cluster:
    """One private PostgreSQL cluster: a data folder, a port and a WAL level."""

    root: Path
    port: int = DEFAULT_PORT
    wal_level: str = "logical"
    settings: dict[str, str] = field(default_factory=dict)
    """More postgresql.conf settings, written as given (e.g. ``{"ssl": "on"}``); they win over ours."""
    hba_first: tuple[str, ...] = ()
    """pg_hba.conf lines put before initdb's (the first matching line decides)."""
    quick_auth: bool = False
    """Test-only: TCP logins check the password with ``md5`` and the superuser's password is kept
    as an MD5 hash: a connection costs half the time of scram-sha-256's 4,096 key-derivation
    rounds, and the test suite makes thousands. A role whose password has a SCRAM secret (the
    default when one is set) still logs in with SCRAM; a wrong password is refused either way."""

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def logfile(self) -> Path:
        return self.root / "server.log"

    @property
    def user(self) -> str | None:
        return server_user()

    def _run(self, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = _as_server_user([str(find_bindir() / args[0]), *args[1:]], self.user)
        return subprocess.run(cmd, check=check, text=True, capture_output=True)

    def initialised(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    def init(self) -> None:
        """Create the data folder with the dev superuser and the replication settings."""
        user = self.user
        self.root.mkdir(parents=True, exist_ok=True)
        if user is not None:
            shutil.chown(self.root, user)
        pwfile = self.root / ".pwfile"
        pwfile.write_text(dev_password() + "\n")
        os.chmod(pwfile, 0o600)
        if user is not None:
            shutil.chown(pwfile, user)
        try:
            result = self._run(
                [
                    "initdb",
                    "-D", str(self.datadir),
                    "-U", SUPERUSER,
                    "--pwfile", str(pwfile),
                    "--auth-local=trust",
                    "--auth-host=" + ("md5" if self.quick_auth else "scram-sha-256"),
                    "--encoding=UTF8",
                    "--locale=C",
                ],
                check=False,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise SystemExit(f"initdb failed for {self.datadir}:\n{result.stdout}{result.stderr}")
        self.write_settings()

    def write_settings(self) -> None:
        """(Re)write the settings this tool owns; the server reads them at its next start."""
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "wal_level": self.wal_level,
            "max_replication_slots": "40",
            "max_wal_senders": "40",
            "max_connections": "200",
            "shared_buffers": "256MB",
            "fsync": "off",
            "full_page_writes": "off",
            "logical_decoding_work_mem": "64MB",
            "max_wal_size": "4GB",
            # initdb --auth-host=md5 (quick_auth) would make new passwords MD5 hashes too
            "password_encryption": "'scram-sha-256'",
            **self.settings,
        }
        text = "".join(f"{key} = {value}\n" for key, value in settings.items())
        conf = self.datadir / "pgsync.conf"
        conf.write_text(text)
        if self.user is not None:
            shutil.chown(conf, self.user)
        main = self.datadir / "postgresql.conf"
        if "include_if_exists = 'pgsync.conf'" not in main.read_text():
            with main.open("a") as f:
                f.write("\ninclude_if_exists = 'pgsync.conf'\n")
        self._write_hba()

    def _write_hba(self) -> None:
        """Put ``hba_first`` at the top of pg_hba.conf, between markers (rewritten at each start)."""
        hba = self.datadir / "pg_hba.conf"
        begin, end = "# pgsync: begin\n", "# pgsync: end\n"
        text = hba.read_text()
        if begin in text:
            text = text[: text.index(begin)] + text[text.index(end) + len(end) :]
        if self.hba_first:
            text = begin + "".join(f"{line}\n" for line in self.hba_first) + end + text
        hba.write_text(text)

    def install_file(self, name: str, data: bytes, mode: int = 0o600) -> Path:
        """Write ``data`` to ``name`` in the cluster's folder, owned by the server's OS user with
        ``mode`` (e.g. a TLS key for ``ssl_key_file``, which the server wants private)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / name
        path.write_bytes(data)
        os.chmod(path, mode)
        if self.user is not None:
            shutil.chown(self.root, self.user)
            shutil.chown(path, self.user)
        return path

    def running(self) -> bool:
        if not self.initialised():
            return False
        return self._run(["pg_ctl", "-D", str(self.datadir), "status"], check=False).returncode == 0

    def start(self) -> None:
        """Initialise if needed and start; a running cluster is left as it is."""
        fresh = not self.initialised()
        if fresh:
            self.init()
        if self.running():
            return
        self.write_settings()
        result = self._run(
            ["pg_ctl", "-D", str(self.datadir), "-l", str(self.logfile), "-w", "-t", "60", "start"],
            check=False,
        )
        if result.returncode != 0:
            tail = self.logfile.read_text()[-3000:] if self.logfile.exists() else ""
            raise SystemExit(
                f"PostgreSQL in {self.datadir} did not start on port {self.port}:\n"
                f"{result.stdout}{result.stderr}\n{tail}"
            )
        self.wait_ready()
        if fresh and self.quick_auth:
            with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
                conn.execute("SET password_encryption = 'md5'")
                conn.execute(
                    sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                        sql.Identifier(SUPERUSER), sql.Literal(dev_password())
                    )
                )

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.conninfo("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode`` as for ``pg_ctl stop -m``); a stopped one is left alone."""
        if self.running():
            self._run(["pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "-t", "60", "stop"])

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def conninfo(self, dbname: str) -> str:
        """A libpq connection string for ``psycopg.connect`` (the password travels here, not in argv)."""
        return make_conninfo(
            host="127.0.0.1", port=self.port, user=SUPERUSER, password=dev_password(), dbname=dbname
        )

    def url(self, dbname: str, *, with_password: bool = False) -> str:
        """A ``postgresql://`` URI; with the password only for Airflow connection env vars."""
        secret = f":{dev_password()}" if with_password else ""
        return f"postgresql://{SUPERUSER}{secret}@127.0.0.1:{self.port}/{dbname}"

    def has_database(self, name: str) -> bool:
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        return found is not None

    def create_database(self, name: str) -> None:
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))

    def drop_database(self, name: str) -> None:
        """Drop a database with its replication slots (a slot keeps a database from being dropped)."""
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            slots = conn.execute(
                "SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = %s", (name,)
            ).fetchall()
            for slot_name, active_pid in slots:
                if active_pid is not None:
                    conn.execute("SELECT pg_terminate_backend(%s)", (active_pid,))
                _drop_slot_when_released(conn, slot_name)
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _drop_slot_when_released(conn: psycopg.Connection, slot_name: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot_name,))
            return
        except psycopg.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        except psycopg.errors.UndefinedObject:
            return


def dev_cluster(port: int | None = None, wal_level: str = "logical") -> Cluster:
    """The developer's cluster: ``.dev/pg`` and ``PGSYNC_DEV_PORT`` (default 54329)."""
    chosen = port or int(os.environ.get("PGSYNC_DEV_PORT", DEFAULT_PORT))
    return Cluster(root=default_base_dir(server_user()) / "pg", port=chosen, wal_level=wal_level)
