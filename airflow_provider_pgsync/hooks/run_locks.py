"""Session advisory locks that keep two runs of one task kind apart (capture per slot, apply per
pipeline), failing fast and naming the run that holds the lock.

A session lock is released by the server when the session ends, so a killed task never
leaves one behind. The holder's description travels as the session's application_name,
so a second run can name the first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg

from airflow_provider_pgsync.source.sessions import hold_open

CAPTURE_LOCK_CLASS = 0x70677363  # 'pgsc': the first key of capture's advisory locks (per slot)
APPLY_LOCK_CLASS = 0x70677361  # 'pgsa': the first key of apply's advisory locks (per pipeline)
BASELINE_LOCK_CLASS = 0x70677362  # 'pgsb': held by a running baseline (per pipeline, table, lineage)

PEEK_SENSOR_APP = "pgsync pending-changes sensor"
PEEK_WATCHER_APP = "pgsync cdc watcher"
PEEK_PROBES = (PEEK_SENSOR_APP, PEEK_WATCHER_APP)
"""Application names of the sessions that take capture's lock for one bounded peek (a pending-
changes sensor or an event-driven cdc watcher): a capture that meets one waits (``BRIEF_WAIT_S``)."""
BRIEF_WAIT_S = 15.0
ENDED_HOLDER = "a session that has just ended"


def baseline_lock_key(pipeline: str, table: str, lineage: str) -> str:
    """The key of the lock a baseline of ``table`` under ``lineage`` holds while it runs."""
    return json.dumps([pipeline, table, lineage])  # unambiguous whatever the names hold


def lock_is_held(conn: psycopg.Connection[Any], lock_class: int, key: str) -> bool:
    """Whether some session holds advisory lock (``lock_class``, hash of ``key``)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
        " AND classid = %s AND objid = (hashtext(%s)::bigint & 4294967295)::oid)",
        (lock_class, key),
    ).fetchone()
    return bool(row and row[0])


class HeldLock:
    """A session advisory lock held on ``conn``; ``ensure_held`` proves it still is."""

    def __init__(
        self, conn: psycopg.Connection[Any], lock_class: int, key: str, lost: Callable[[str], Exception]
    ) -> None:
        self._conn = conn
        self._lock_class = lock_class
        self._key = key
        self._lost = lost

    def ensure_held(self) -> None:
        """Raise ``lost(<why>)`` unless this session still holds the lock: call it right before a
        state write or a slot advance. A session that was terminated (``pg_terminate_backend``,
        a restart, a dropped connection) has lost its lock, and another run may hold it now."""
        try:
            row = self._conn.execute(
                "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND pid = pg_backend_pid() AND objsubid = 2 AND classid = %s"
                " AND objid = (hashtext(%s)::bigint & 4294967295)::oid)",
                (self._lock_class, self._key),
            ).fetchone()
        except psycopg.Error as exc:
            raise self._lost(f"its session ended: {str(exc).strip() or type(exc).__name__}") from exc
        if not row or not row[0]:
            raise self._lost("its session no longer holds it")


@contextmanager
def session_lock(
    conn: psycopg.Connection[Any],
    lock_class: int,
    key: str,
    holder: str,
    busy: Callable[[str], Exception],
    lost: Callable[[str], Exception],
    *,
    brief: tuple[str, ...] = (),
) -> Iterator[HeldLock]:
    """Hold advisory lock (``lock_class``, hash of ``key``) on ``conn`` until the block ends (the
    connection is closed then); raise ``busy(<the holder's description>)`` at once when another
    session holds it, unless that session's application name starts with one of ``brief`` (a
    holder known to keep it a moment only): then it tries again for up to ``BRIEF_WAIT_S``.
    The block gets a ``HeldLock`` whose ``ensure_held`` raises ``lost(<why>)``.

    The session sits idle while the run works, for minutes or hours: it lifts the server's idle
    timeouts for itself first (a database or role default would end it, and the lock with it).
    """
    try:
        hold_open(conn)
        conn.execute("SELECT set_config('application_name', %s, false)", (holder[:63],))
        deadline = time.monotonic() + BRIEF_WAIT_S
        while True:
            row = conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (lock_class, key)).fetchone()
            if row and row[0]:
                break
            other = lock_holder(conn, lock_class, key)
            passing = other == ENDED_HOLDER or other.startswith(brief)
            if not (brief and passing) or time.monotonic() > deadline:
                raise busy(other)
            time.sleep(0.1)  # a probe's bounded peek ends within moments
        yield HeldLock(conn, lock_class, key, lost)
    finally:
        # released before the session ends: a backend exits a moment after its client closes,
        # and the next run (e.g. capture right after capture) would find it still holding the lock
        if not conn.closed and not conn.broken:
            with suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (lock_class, key))
        conn.close()


def lock_holder(conn: psycopg.Connection[Any], lock_class: int, key: str) -> str:
    """Who holds advisory lock (``lock_class``, hash of ``key``): application name, pid, client, start."""
    row = conn.execute(
        """
        SELECT a.pid, a.application_name, a.backend_start, a.client_addr::text
        FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.classid = %s AND l.objid = (hashtext(%s)::bigint & 4294967295)::oid
        """,
        (lock_class, key),
    ).fetchone()
    if row is None:
        return ENDED_HOLDER
    pid, app, since, client = row
    where = f"backend pid {pid}, from {client or 'local'}, since {since:%Y-%m-%d %H:%M:%S %Z}"
    return f"{app or 'a session'} ({where})"
