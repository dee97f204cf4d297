"""The cdc DAG and the sensors under a real scheduler, dag-processor, triggerer and LocalExecutor.

The tests share one deployment and pipeline (``conftest.scheduled``) and run in file order:
each starts from a quiet pipeline (cdc paused, no run active) and leaves it quiet.
"""

from __future__ import annotations

import itertools
import os
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.deployment.conftest import Scheduled

pytestmark = pytest.mark.slow


def _when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _states(scheduled: Scheduled, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    return {ti["task_id"]: ti for ti in scheduled.deployment.task_instances(dag_id, run_id)}


def _deferral_handled(log: Path, run_id: str, task_id: str) -> bool:
    """Whether the scheduler logged the end of the workload in which ``task_id`` of the sensors'
    run ``run_id`` deferred (the task then still deferred)."""
    head = f"TaskInstance Finished: dag_id=pgsync_test_sensors, task_id={task_id}, run_id={run_id},"
    text = log.read_text(errors="replace")
    return any(head in line and "state=deferred" in line for line in text.splitlines())


def test_sensors_defer_and_resume_and_a_scheduled_run_applies(scheduled: Scheduled) -> None:
    """The three sensors wait in the triggerer (state deferred), and each resumes when its
    condition comes true: changes committed, the slot's lag grown, the table Ready after the
    first scheduled cdc run, which applies every change into the replica."""
    d = scheduled.deployment
    with psycopg.connect(scheduled.source) as conn:
        row = conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint"
            " FROM pg_replication_slots WHERE slot_name = 'pgsync_sched'"
        ).fetchone()
    # slot_lag must wait for this test's changes: the source's cluster writes little WAL else
    assert row is not None and row[0] < 500_000, f"the slot's lag before the test: {row}"
    run_id = d.trigger("pgsync_test_sensors")
    sensors = ("pending_changes", "slot_lag", "table_phase")
    scheduled.wait_for(
        "the three sensors deferred",
        lambda: all(
            _states(scheduled, "pgsync_test_sensors", run_id).get(s, {}).get("state") == "deferred"
            for s in sensors
        ),
        timeout=180,
    )
    # Airflow's scheduler fails a resumed task when it handles the executor's event of the
    # attempt that deferred only after the trigger fired (a task queued again that the
    # executor reports finished: "state changed externally"), seen under load: the condition
    # comes true once the scheduler has handled all three deferrals
    scheduled.wait_for(
        "the scheduler handled the three sensors' deferrals",
        lambda: all(_deferral_handled(d.logs / "scheduler.log", run_id, s) for s in sensors),
        timeout=120,
    )
    # 1,500 changes of ~1 kB: past min_changes (1,000) and the lag threshold (1 MB)
    scheduled.execute(
        "INSERT INTO items SELECT g, g % 7, repeat('y', 1000) FROM generate_series(10001, 11500) g"
    )
    scheduled.execute("UPDATE notes SET body = body || ' changed' WHERE item < 5")
    scheduled.wait_for(
        "pending_changes and slot_lag resumed and succeeded",
        lambda: all(
            _states(scheduled, "pgsync_test_sensors", run_id)[s]["state"] == "success"
            for s in ("pending_changes", "slot_lag")
        ),
        timeout=180,
    )
    phase = _states(scheduled, "pgsync_test_sensors", run_id)["table_phase"]
    assert phase["state"] == "deferred", "table_phase fired before any cdc run made items Ready"

    committed = datetime.now().astimezone()
    d.unpause(scheduled.dag("cdc"))
    runs = scheduled.wait_for(
        "a scheduled cdc run that succeeded",
        lambda: [
            r
            for r in d.runs(scheduled.dag("cdc"))
            if r["run_type"] == "scheduled" and r["state"] == "success" and _when(r["start_date"]) > committed
        ],
        timeout=240,
    )
    assert d.wait_run("pgsync_test_sensors", run_id, timeout=180) == "success"
    scheduled.quiet()
    scheduled.assert_replica_equals_source()
    assert runs, "no scheduled run"


@pytest.mark.parametrize(
    ("task", "point"), [("capture", "capture_before_state_write"), ("apply", "apply_before_state_write")]
)
def test_killed_task_is_retried_and_data_stays_exact(scheduled: Scheduled, task: str, point: str) -> None:
    """SIGKILL to the task process of capture (segments written, state and slot not moved) or of
    apply (the replica written, the state not): the scheduler retries the task and the replica
    ends equal to the source, the keyless table without a duplicate row."""
    scheduled.reschedule("null", "None")
    (scheduled.pauses / point).touch()
    scheduled.execute("UPDATE items SET qty = qty + 1 WHERE id % 10 = 0")
    scheduled.execute("INSERT INTO notes SELECT g, 'again ' || g FROM generate_series(1, 300) g")
    scheduled.execute("DELETE FROM notes WHERE ctid IN (SELECT ctid FROM notes WHERE item = 3 LIMIT 2)")
    d = scheduled.deployment
    cdc = scheduled.dag("cdc")
    d.unpause(cdc)
    run_id = d.trigger(cdc)
    pid_file = scheduled.pauses / f"{point}.pid"
    pid = int(scheduled.wait_for(f"{task} at {point}", lambda: pid_file.exists() and pid_file.read_text()))
    os.kill(pid, signal.SIGKILL)
    pid_file.unlink()
    state = d.wait_run(cdc, run_id, timeout=300)
    assert state == "success", f"the cdc run {run_id} did not recover; see {d.logs}"
    ti = _states(scheduled, cdc, run_id)[task]
    assert ti["try_number"] == 2, f"{task} was not retried: {ti}"
    assert not (scheduled.pauses / point).exists(), "the pause point was never reached"
    scheduled.quiet()
    scheduled.assert_replica_equals_source()


def test_two_runs_never_overlap(scheduled: Scheduled) -> None:
    """Two runs triggered at once: the second starts only after the first ended (max_active_runs);
    no two cdc runs of the whole module overlapped."""
    d = scheduled.deployment
    cdc = scheduled.dag("cdc")
    d.unpause(cdc)
    scheduled.execute("UPDATE items SET qty = qty + 1 WHERE id % 3 = 0")
    first, second = d.trigger(cdc), d.trigger(cdc)
    assert d.wait_run(cdc, first) == "success"
    assert d.wait_run(cdc, second) == "success"
    scheduled.quiet()
    runs = sorted(
        (_when(r["start_date"]), _when(r["end_date"]), r["dag_run_id"])
        for r in d.runs(cdc)
        if r["start_date"] and r["end_date"]
    )
    assert len(runs) >= 2
    for (_, end, before), (start, _, after) in itertools.pairwise(runs):
        assert start >= end, f"cdc runs {before} and {after} overlapped"
    scheduled.assert_replica_equals_source()


def test_event_driven_run_starts_when_changes_arrive(scheduled: Scheduled) -> None:
    """With ``schedules.cdc: {on_changes: 200, max_wait: 1h}`` the cdc DAG runs on its asset:
    200 committed changes start a run within the trigger's poll (not the hour), and the replica
    then equals the source."""
    d = scheduled.deployment
    cdc = scheduled.dag("cdc")
    scheduled.reschedule("{on_changes: 200, max_wait: 1h}", "sset")
    before = {r["dag_run_id"] for r in d.runs(cdc)}
    d.unpause(cdc)
    scheduled.execute(
        "INSERT INTO items SELECT g, 1, 'event' FROM generate_series(20001, 20300) g"
    )
    committed = datetime.now().astimezone()
    runs = scheduled.wait_for(
        "an asset-triggered cdc run that succeeded",
        lambda: [
            r
            for r in d.runs(cdc)
            if r["dag_run_id"] not in before
            and r["run_type"] == "asset_triggered"
            and r["state"] == "success"
        ],
        timeout=240,
    )
    started = _when(runs[0]["start_date"])
    waited = (started - committed).total_seconds()
    assert waited < 120, f"the run started {started}, {waited:.0f} s after the changes committed"
    scheduled.quiet()
    scheduled.assert_replica_equals_source()
