"""Two captures of one slot never run at once (DESIGN §3): the second fails fast, naming the first."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from airflow_provider_pgsync.capture.run import CaptureResult, capture
from airflow_provider_pgsync.errors import CaptureBusyError
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.store import StateStore
from tests.capture.conftest import MakePipeline, Pipeline, wait_for

DDL = ["CREATE TABLE items (id int PRIMARY KEY, name text)"]


def _backend_pid(pipeline: Pipeline, application_name: str) -> int:
    rows = pipeline.database.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,)
    )
    assert len(rows) == 1, rows
    pid = rows[0][0]
    assert isinstance(pid, int)
    return pid


def _wait_until_session_ended(pipeline: Pipeline, application_name: str) -> None:
    """The lock goes with the holder's session, which ends just after its client closes it."""
    wait_for(
        f"session {application_name!r} to end",
        lambda: (
            not pipeline.database.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (application_name,)
            )
        ),
    )


def _assert_busy(pipeline: Pipeline, holder: str) -> CaptureBusyError:
    started = time.monotonic()
    with pytest.raises(CaptureBusyError) as caught:
        pipeline.capture()
    assert time.monotonic() - started < 2.0, "the second capture waited instead of failing fast"
    error = caught.value
    pid = _backend_pid(pipeline, holder)
    assert (error.slot_name, error.retryable) == (pipeline.slot, True)
    assert error.holder.startswith(f"{holder} (backend pid {pid}, from ")
    assert f"capture of slot {pipeline.slot} is already running in {holder} (backend pid {pid}" in str(error)
    return error


def test_a_held_capture_lock_makes_capture_fail_fast(make_pipeline: MakePipeline) -> None:
    pipeline = make_pipeline(DDL, ["items"])
    pipeline.database.execute("INSERT INTO items VALUES (1, 'one')")
    before = pipeline.state()

    with pipeline.hook.capture_lock(pipeline.slot, "pgsync capture other-run"):
        _assert_busy(pipeline, "pgsync capture other-run")
        assert pipeline.state() == before
        assert pipeline.slot_info().confirmed_flush_lsn == pipeline.creation_lsn

    _wait_until_session_ended(pipeline, "pgsync capture other-run")
    result = pipeline.capture()
    assert (result.changes, result.idle) == (1, True)
    assert [c["name"] for c in pipeline.changes("items")] == ["one"]


class _PausedStore:
    """A state store whose first ``load`` waits until the test releases it (capture holds its lock then)."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self.loading = threading.Event()
        self.release = threading.Event()

    def load(self, pipeline: str) -> PipelineState:
        if not self.loading.is_set():
            self.loading.set()
            assert self.release.wait(timeout=30), "the test never released the paused capture"
        return self.inner.load(pipeline)

    def save(self, state: PipelineState) -> PipelineState:
        return self.inner.save(state)

    def delete(self, pipeline: str) -> None:
        self.inner.delete(pipeline)


def test_a_running_capture_makes_a_second_one_fail_fast(make_pipeline: MakePipeline) -> None:
    pipeline = make_pipeline(DDL, ["items"])
    pipeline.database.execute("INSERT INTO items VALUES (1, 'one'), (2, 'two')")
    paused = _PausedStore(pipeline.store)
    outcome: dict[str, Any] = {}

    def first_run() -> None:
        try:
            holder = "pgsync capture run-1"
            outcome["result"] = capture(pipeline.hook, paused, pipeline.settings, holder=holder)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=first_run, name="first-capture")
    thread.start()
    try:
        assert paused.loading.wait(timeout=30), "the first capture never started"
        _assert_busy(pipeline, "pgsync capture run-1")
    finally:
        paused.release.set()
        thread.join(timeout=60)
    assert not thread.is_alive()

    assert "error" not in outcome, outcome.get("error")
    first: CaptureResult = outcome["result"]
    assert (first.changes, first.idle) == (2, True)
    # the lock went with the first run's session: the next capture runs (and finds nothing new)
    _wait_until_session_ended(pipeline, "pgsync capture run-1")
    second = pipeline.capture()
    assert (second.changes, second.segments, second.idle) == (0, (), True)
    assert [c["id"] for c in pipeline.changes("items")] == ["1", "2"]


def test_capture_waits_for_a_watchers_peek_holding_its_lock(make_pipeline: MakePipeline) -> None:
    """A pending-changes watcher or sensor takes capture's lock for one bounded peek: a capture
    starting then waits for it (up to BRIEF_WAIT_S) instead of failing the run."""
    from airflow_provider_pgsync.hooks.run_locks import PEEK_WATCHER_APP

    pipeline = make_pipeline(DDL, ["items"])
    pipeline.database.execute("INSERT INTO items VALUES (1, 'one')")
    watcher = f"{PEEK_WATCHER_APP} {pipeline.slot}"
    held = threading.Event()
    release = threading.Event()

    def peek() -> None:
        with pipeline.hook.capture_lock(pipeline.slot, watcher):
            held.set()
            release.wait(timeout=30)

    thread = threading.Thread(target=peek, name="watcher-peek")
    thread.start()
    try:
        assert held.wait(timeout=30), "the stand-in watcher never took the lock"
        threading.Timer(1.0, release.set).start()  # the peek ends while capture waits
        started = time.monotonic()
        result = pipeline.capture()
        assert time.monotonic() - started >= 0.5, "capture did not meet the watcher's lock"
    finally:
        release.set()
        thread.join(timeout=30)
    assert (result.changes, result.idle) == (1, True)
