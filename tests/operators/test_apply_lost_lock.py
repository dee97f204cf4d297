"""An apply whose lock session is terminated while it works records nothing in the state (another
run may hold the lock by then); the replica's data and watermark stay consistent, and the next
run records the decisions without applying anything twice."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_pgsync.errors import LockLostError
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.state.phases import DataSync, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline, make_pipeline, wait_for  # noqa: F401 (the fixture)
from tests.conftest import Database
from tests.hooks.low_timeouts import session_of
from tests.support.replica import rows


def test_a_lost_apply_lock_records_nothing(
    database: Database,
    replica: Database,
    make_pipeline: MakePipeline,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica.cluster.url(replica.name, with_password=True))
    pipeline = make_pipeline(["CREATE TABLE items (id int PRIMARY KEY, name text)"], ["items"])
    xmax, lsn = database.execute(  # an empty table's baseline: every later transaction applies
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text"
    )[0]
    done = SyncDone("00000003-00000002-1", LSN.parse(str(lsn)), int(str(xmax)), int(str(xmax)))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase("public.items", DataSync()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase("public.items", done))
    database.execute("INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 50) g")
    pipeline.capture_until_idle()
    before = pipeline.state()

    apply = PgApplyOperator(
        task_id="apply",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        destinations=[{"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}],
        postgres_conn_id=pipeline.hook.postgres_conn_id,
        state_backend="postgres",
    )
    real = PgApplyOperator._apply_destination
    terminated: list[object] = []

    def then_lose_the_lock(self: PgApplyOperator, *args: Any) -> None:
        real(self, *args)
        (pid,) = [r[0] for r in session_of(database, "application_name LIKE 'pgsync apply %%'")]
        database.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_for("the apply lock session to end", lambda: not session_of(database, "pid = %s", pid))
        terminated.append(pid)

    monkeypatch.setattr(PgApplyOperator, "_apply_destination", then_lose_the_lock)
    with pytest.raises(LockLostError, match=r"apply of pipeline '.*' lost its lock \(its session ended"):
        apply.execute({"ti": None})  # type: ignore[arg-type]
    assert terminated
    assert pipeline.state() == before  # nothing recorded
    assert rows(replica, "public.items") == rows(database, "public.items")  # data and watermark, together

    monkeypatch.setattr(PgApplyOperator, "_apply_destination", real)
    summary = apply.execute({"ti": None})  # type: ignore[arg-type]
    assert summary["public.items"] == {"applied": 0, "phase": "Ready", "destinations": {"replica": 0}}
    assert pipeline.state().table("public.items").phase == Ready()
    assert rows(replica, "public.items") == rows(database, "public.items")
