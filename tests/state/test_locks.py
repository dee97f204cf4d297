"""AdvisoryLock against a real server: exclusion, release, timeouts, work inside the lock."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_pgsync.errors import ConfigError, LockTimeoutError
from airflow_provider_pgsync.hooks.advisory_lock import AdvisoryLock, state_lock_key
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from tests.conftest import Database
from tests.state.conftest import Connect


def _advisory_locks(database: Database) -> int:
    rows = database.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
    return int(rows[0][0])  # type: ignore[call-overload]


def test_second_holder_waits_or_fails(connect: Connect) -> None:
    with AdvisoryLock(connect, "k"):
        with (
            pytest.raises(LockTimeoutError, match="'k' could not be taken without waiting") as info,
            AdvisoryLock(connect, "k", timeout=0),
        ):
            pass
        assert info.value.retryable
        with (
            pytest.raises(LockTimeoutError, match=r"within 0\.2s.*pg_locks"),
            AdvisoryLock(connect, "k", timeout=0.2),
        ):
            pass
        with AdvisoryLock(connect, "other key", timeout=0):
            pass  # other keys are independent
    with AdvisoryLock(connect, "k", timeout=0):
        pass  # released at the end of the block


def test_waiter_gets_the_lock_when_the_holder_leaves(connect: Connect) -> None:
    order: list[str] = []
    held = threading.Event()

    def holder() -> None:
        with AdvisoryLock(connect, "k"):
            held.set()
            time.sleep(0.3)
            order.append("holder done")

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(10)
    with AdvisoryLock(connect, "k", timeout=10):
        order.append("waiter in")
    thread.join()
    assert order == ["holder done", "waiter in"]


def test_work_commits_with_the_lock_or_rolls_back(database: Database, connect: Connect) -> None:
    database.execute("CREATE TABLE t (x int)")
    with AdvisoryLock(connect, "k") as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(RuntimeError), AdvisoryLock(connect, "k") as conn:
        conn.execute("INSERT INTO t VALUES (2)")
        raise RuntimeError("boom")
    assert database.execute("SELECT x FROM t") == [(1,)]
    assert _advisory_locks(database) == 0


def test_lock_timeout_is_restored_inside_the_block(connect: Connect) -> None:
    with AdvisoryLock(connect, "k", timeout=5) as conn:
        assert conn.execute("SHOW lock_timeout").fetchone() == ("0",)


def test_hook_as_source(source_conn_id: str, database: Database) -> None:
    with AdvisoryLock(PgReplicationHook(postgres_conn_id=source_conn_id), state_lock_key("s")):
        assert _advisory_locks(database) == 1


def test_keys_and_arguments() -> None:
    assert state_lock_key("p") == "pgsync_state:p"
    with pytest.raises(ConfigError, match="key"):
        AdvisoryLock(lambda: None, "")  # type: ignore[arg-type, return-value]
