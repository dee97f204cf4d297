"""A PostgreSQL advisory lock on a text key, held by a transaction for the length of a ``with`` block.

Both state stores use it (capture holds a session lock of its own that names its holder,
``PgReplicationHook.capture_lock``). A transaction-level lock
(``pg_advisory_xact_lock``) is released by the server when the transaction ends or
the session dies, so a killed task never leaves a lock behind, unlike a lock row or
a session-level lock on a pooled connection. Keys are text, hashed to the lock's
bigint with ``hashtextextended(key, 0)``; prefix them with what they protect
(``state_lock_key``) so different uses never collide.

Each lock opens its own connection, so the lock is not re-entrant: taking the same
key twice in one thread waits for itself (until ``timeout``).
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeAlias

import psycopg

from airflow_provider_pgsync.errors import ConfigError, LockTimeoutError, SourceUnavailableError
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.source.sessions import hold_open, set_statement_timeout

Connect: TypeAlias = Callable[[], "psycopg.Connection[Any]"]
"""A callable returning a new psycopg 3 connection (e.g. ``lambda: psycopg.connect(dsn)``)."""

ConnectionSource: TypeAlias = "PgReplicationHook | Connect"
"""Where a store or lock gets connections: a ``PgReplicationHook`` or a ``Connect`` callable."""


def as_connect(source: ConnectionSource) -> Connect:
    """A ``Connect`` callable for a hook (``hook.connect``) or a connection factory."""
    if isinstance(source, PgReplicationHook):
        return source.connect
    if callable(source):
        factory = source

        def connect() -> psycopg.Connection[Any]:
            try:
                return factory()
            except psycopg.OperationalError as exc:
                raise SourceUnavailableError(
                    f"cannot connect to the control database: {str(exc).strip()}; check that the "
                    "server runs and the connection settings given to pgsync are right"
                ) from exc

        return connect
    raise ConfigError(
        f"{source!r} cannot open connections: pass a PgReplicationHook or a callable returning "
        "a psycopg connection, e.g. lambda: psycopg.connect(conninfo)"
    )


def state_lock_key(pipeline: str) -> str:
    """The lock key that serialises read-compare-write of one pipeline's state."""
    return f"pgsync_state:{pipeline}"


class AdvisoryLock:
    """``with AdvisoryLock(source, key) as conn:`` holds the lock while the block runs.

    ``conn`` is the connection holding it, inside the open transaction: work done on it
    commits with the lock's release when the block ends (it rolls back on an exception).
    ``timeout``: None waits as long as it takes; a number of seconds raises
    LockTimeoutError (retryable) after that long; 0 or less tries once without waiting.
    """

    def __init__(self, source: ConnectionSource, key: str, *, timeout: float | None = None) -> None:
        if not isinstance(key, str) or not key:
            raise ConfigError(f"advisory lock key must be non-empty text, not {key!r}")
        self.key = key
        self.timeout = timeout
        self._connect = as_connect(source)
        self._conn: psycopg.Connection[Any] | None = None

    def __enter__(self) -> psycopg.Connection[Any]:
        if self._conn is not None:
            raise ConfigError(f"advisory lock {self.key!r} is already held by this object")
        conn = self._connect()
        try:
            conn.autocommit = False
            # the wait for the lock is bounded by lock_timeout (below), not by a database or role
            # statement_timeout; and the transaction sits idle while the caller works under it
            set_statement_timeout(conn, 0, local=True)
            hold_open(conn, local=True)
            if self.timeout is not None and self.timeout <= 0:
                if not _scalar(conn, "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", self.key):
                    raise self._busy()
            else:
                previous = _scalar(conn, "SELECT current_setting('lock_timeout')")
                if self.timeout is not None:
                    ms = f"{max(1, round(self.timeout * 1000))}ms"
                    conn.execute("SELECT set_config('lock_timeout', %s, true)", (ms,))
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (self.key,))
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (previous,))
        except psycopg.errors.LockNotAvailable as exc:
            conn.close()
            raise self._busy() from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if exc_type is None:
                conn.commit()
            else:
                conn.rollback()
        finally:
            conn.close()

    def _busy(self) -> LockTimeoutError:
        if self.timeout is None:
            waited = "within the server's lock_timeout"
        else:
            waited = "without waiting" if self.timeout <= 0 else f"within {self.timeout:g}s"
        return LockTimeoutError(
            f"advisory lock {self.key!r} could not be taken {waited}: another task run holds it "
            "(see pg_locks WHERE locktype = 'advisory'); run again when that run has finished"
        )


def _scalar(conn: psycopg.Connection[Any], query: str, *params: object) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]
