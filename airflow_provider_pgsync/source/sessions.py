"""Session settings that keep pgsync's long-lived and long-running sessions alive whatever the
server, database or role defaults say (``ALTER DATABASE/ROLE ... SET statement_timeout`` etc.).

Long-lived sessions (the run locks, the baseline's snapshot, the peek's transaction, a replica
destination's session) sit idle, or idle in a transaction, for as long as the work they guard
runs; a low ``idle_session_timeout`` or ``idle_in_transaction_session_timeout`` would end them
and with them the lock or the snapshot. Statements that legitimately run long (the peek, the
slot advance, a replica's batch) set their own ``statement_timeout``. TCP keepalives make
a dead peer, or a NAT or firewall that drops idle flows, visible to both ends within minutes
instead of the operating system's default of about two hours.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Protocol

from psycopg import sql

from airflow_provider_pgsync.errors import ConfigError

KEEPALIVES: dict[str, int] = {
    "keepalives": 1,
    # a first probe after a minute idle: below the idle timeouts of common NATs, load
    # balancers and firewalls (AWS NLB 350 s, GCP 600 s), so they never drop a waiting session
    "keepalives_idle": 60,
    "keepalives_interval": 10,
    "keepalives_count": 6,  # a peer that is gone is noticed about two minutes after it went
}
"""libpq keepalive parameters pgsync uses unless the Airflow connection's extras set them."""

_TRANSACTION_TIMEOUT_FROM = 170000  # transaction_timeout exists from PostgreSQL 17


class _ServerInfo(Protocol):
    @property
    def server_version(self) -> int: ...


class Session(Protocol):
    """What these settings need of a connection (a ``psycopg.Connection`` has it): this module
    composes statements and leaves the driver to the callers, in ``hooks/`` and the tasks."""

    @property
    def autocommit(self) -> bool: ...

    @property
    def info(self) -> _ServerInfo: ...

    def execute(self, query: sql.Composed, /) -> Any: ...


def with_keepalives(conn_args: Mapping[str, Any]) -> dict[str, Any]:
    """``conn_args`` plus the keepalive parameters it does not set (the connection's extras win)."""
    return {**KEEPALIVES, **conn_args}


def keepalive_args(extras: Mapping[str, Any]) -> dict[str, Any]:
    """The keepalive parameters for a connection with these extras: pgsync's, or the extras' own."""
    return {key: extras.get(key, value) for key, value in KEEPALIVES.items()}


def hold_open(conn: Session, *, local: bool = False) -> None:
    """Let ``conn``'s session stay idle, or idle in a transaction, as long as pgsync needs it.

    Session level (``local=False``) needs an autocommit connection (a SET in a transaction
    is undone by its rollback); ``local=True`` sets them for the open transaction only. A
    ``SET`` takes no snapshot, so it may precede ``SET TRANSACTION SNAPSHOT`` or the first
    query of a REPEATABLE READ transaction.
    """
    if not local and not conn.autocommit:
        raise RuntimeError("hold_open at session level needs an autocommit connection")
    for statement in hold_open_statements(conn.info.server_version, local=local):
        conn.execute(statement)


def hold_open_statements(server_version: int, *, local: bool = False) -> list[sql.Composed]:
    """The statements of ``hold_open`` for a server of ``server_version`` (``server_version_num``)."""
    scope = "SET LOCAL" if local else "SET"
    names = ["idle_in_transaction_session_timeout"]
    if not local:
        names.append("idle_session_timeout")  # applies outside transactions only
    if server_version >= _TRANSACTION_TIMEOUT_FROM:
        names.append("transaction_timeout")
    return [sql.SQL("{} {} = 0").format(sql.SQL(scope), sql.Identifier(name)) for name in names]


def timeout_ms(value: float | timedelta | None, *, what: str) -> int:
    """A timeout in whole milliseconds for ``statement_timeout`` (0: no limit); ``value`` in
    seconds or a ``timedelta``; None or 0 means no limit."""
    if value is None:
        return 0
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"{what} must be a number of seconds of 0 or more (0: no limit), not {value!r}")
    return 0 if value == 0 else max(1, round(value * 1000))


def set_statement_timeout(conn: Session, milliseconds: int, *, local: bool = False) -> None:
    """``SET [LOCAL] statement_timeout`` on ``conn`` (0: no limit), whatever the defaults say."""
    conn.execute(statement_timeout_statement(milliseconds, local=local))


def statement_timeout_statement(milliseconds: int, *, local: bool = False) -> sql.Composed:
    """The statement of ``set_statement_timeout``."""
    scope = "SET LOCAL" if local else "SET"
    return sql.SQL("{} statement_timeout = {}").format(sql.SQL(scope), sql.Literal(int(milliseconds)))
