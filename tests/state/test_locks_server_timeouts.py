"""AdvisoryLock under 1 s database and role defaults (statement, idle in transaction): its wait
is bounded by its own timeout, and its transaction outlives the idle default while held."""

from __future__ import annotations

import time

import pytest

from airflow_provider_pgsync.errors import LockTimeoutError
from airflow_provider_pgsync.hooks.advisory_lock import AdvisoryLock
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from tests.capture.conftest import wait_for
from tests.conftest import Database
from tests.hooks.low_timeouts import LowTimeouts, low_timeouts_fixture, session_of  # noqa: F401


def test_the_wait_is_the_lock_s_own_and_a_held_lock_outlives_idle_defaults(
    database: Database, low_timeouts: LowTimeouts
) -> None:
    hook = PgReplicationHook(postgres_conn_id=low_timeouts.conn_id(database, "low_control"))
    with AdvisoryLock(hook, "k") as conn:
        pid = conn.info.backend_pid

        def idle_long() -> bool:
            found = session_of(database, "pid = %s", pid)
            assert found, "the server ended the lock's session"
            return found[0][1] == "idle in transaction" and float(found[0][2]) > 2.5  # type: ignore[arg-type]

        wait_for("the lock's transaction idle > 2.5 s", idle_long)
        started = time.monotonic()
        with pytest.raises(LockTimeoutError, match=r"within 2\.5s"), AdvisoryLock(hook, "k", timeout=2.5):
            pass
        assert time.monotonic() - started >= 2.4  # its own timeout, not the 1 s statement_timeout
        conn.execute("SELECT 1")  # still in its transaction, still holding the lock
