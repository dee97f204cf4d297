"""Triggers against a real server: a source with a publication and a slot, and ways to run a trigger.

``source`` creates table ``items``, publication ``pgsync_pub`` and a pgoutput slot of
this test's own with the real hook. ``state_store`` gives each state backend in turn
with a pipeline whose table ``items`` is in Init. ``Running`` drives a trigger's
``run()`` inside ``asyncio.run``: it asserts that the trigger has not fired within a
bounded wait (``asyncio.wait_for`` on a shielded task, expected to time out), and waits
with a deadline for its one event. ``held_slot`` makes a real walsender hold the slot
(``pg_recvlogical``, stopped with SIGSTOP so it never confirms anything).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from airflow.triggers.base import TriggerEvent

from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.variable_state_store import VariableStateStore
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import Init, PipelineState, SyncDone, TablePhase
from airflow_provider_pgsync.state.store import StateStore, update_state
from airflow_provider_pgsync.triggers.base import PollingTrigger
from pgcluster import SUPERUSER, dev_password, find_bindir
from tests.capture.conftest import wait_for
from tests.conftest import Database

PUBLICATION = "pgsync_pub"
POLL = 0.1
"""Poll interval of the triggers under test (seconds)."""
QUIET = 1.0
"""How long a trigger must stay silent while its condition is false (many polls)."""
FIRE_WITHIN = 30.0
"""Deadline for a trigger to fire once its condition holds."""
DONE = SyncDone("00000003-00000002-1", LSN(0x1_6B37_48), 750, 760)
"""A SyncDone phase for moving a table on to Ready."""


@dataclass
class Source:
    """This test's source database with table ``items``, publication ``pgsync_pub`` and slot ``slot``."""

    database: Database
    conn_id: str
    hook: PgReplicationHook
    slot: str
    creation_lsn: LSN

    def execute(self, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        return self.database.execute(query, params)

    async def aexecute(self, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """``execute`` in a thread, so a trigger running in the loop is not blocked."""
        return await asyncio.to_thread(self.database.execute, query, params)

    def confirmed_flush_lsn(self) -> LSN | None:
        info = self.hook.slot_info(self.slot)
        assert info is not None
        return info.confirmed_flush_lsn


@pytest.fixture
def source(database: Database, source_conn_id: str) -> Source:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    hook.ensure_publication(PUBLICATION, ["items"])
    slot = f"s_{database.name}"
    creation = hook.ensure_slot(slot)
    assert creation.consistent_point is not None
    return Source(database, source_conn_id, hook, slot, creation.consistent_point)


@dataclass
class Pipeline:
    """A saved pipeline state (table ``items`` in Init) in one of the two backends."""

    name: str
    backend: str
    store: StateStore

    def state(self) -> PipelineState:
        return self.store.load(self.name)

    def move(self, *phases: TablePhase) -> PipelineState:
        """Move table ``items`` through ``phases``, saving each step; returns the last state."""
        state = self.state()
        for phase in phases:
            state = update_state(self.store, self.name, partial(_items_in, phase))
        return state


def _items_in(phase: TablePhase, state: PipelineState) -> PipelineState:
    return state.with_table_phase("items", phase)


@pytest.fixture(params=["postgres", "variables"])
def pipeline(request: pytest.FixtureRequest, source: Source) -> Pipeline:
    """Each state backend in turn (in the source database), as ``open_state_store`` builds it."""
    if request.param == "variables":
        request.getfixturevalue("airflow_db")
        store: StateStore = VariableStateStore(lock=source.hook)
    else:
        store = PostgresStateStore(source.hook)
    name = f"p_{uuid.uuid4().hex[:10]}"  # Variables outlive a test's database
    state = PipelineState(name).with_slot(source.slot, source.creation_lsn).with_table_phase("items", Init())
    store.save(state)
    return Pipeline(name, request.param, store)


class Running:
    """A trigger's ``run()`` started as a task of the running event loop."""

    def __init__(self, trigger: PollingTrigger) -> None:
        self.events: AsyncIterator[TriggerEvent] = trigger.run()
        self.task: asyncio.Task[TriggerEvent] = asyncio.ensure_future(anext(self.events))
        self.started = time.monotonic()

    async def assert_quiet(self, seconds: float = QUIET) -> None:
        """The trigger neither fires nor fails within ``seconds`` (the wait is expected to expire)."""
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.task), seconds)

    async def event(self, timeout: float = FIRE_WITHIN) -> dict[str, Any]:
        """The payload of the trigger's event, and check that it was the only one."""
        event = await asyncio.wait_for(self.task, timeout)
        with pytest.raises(StopAsyncIteration):
            await anext(self.events)
        assert isinstance(event.payload, dict)
        return event.payload


def run_async(scenario: Callable[[], Any]) -> Any:
    """Run an async test scenario in a fresh event loop."""
    return asyncio.run(scenario())


def first_event(trigger: PollingTrigger, timeout: float = FIRE_WITHIN) -> dict[str, Any]:
    """Run a trigger until its event (for conditions that already hold)."""

    async def scenario() -> dict[str, Any]:
        return await Running(trigger).event(timeout)

    return dict(run_async(scenario))


@contextmanager
def held_slot(source: Source) -> Iterator[int]:
    """A walsender holds the slot (``pg_recvlogical --start``) and confirms nothing; yields its PID.

    The client is stopped (SIGSTOP) as soon as the slot is active, so it never reads
    or confirms what is written afterwards: the slot stays active and its position
    stays put until the client is killed, well within ``wal_sender_timeout`` (60 s).
    """
    cluster = source.database.cluster
    command = [
        str(find_bindir() / "pg_recvlogical"),
        *("--host", "127.0.0.1", "--port", str(cluster.port), "--username", SUPERUSER),
        *("--dbname", source.database.name, "--slot", source.slot, "--start", "--file", os.devnull),
        *("--option", "proto_version=1", "--option", f"publication_names={PUBLICATION}"),
    ]
    env = {**os.environ, "PGPASSWORD": dev_password()}  # never on the command line
    client = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        active: list[tuple[object, ...]] = []

        def slot_active() -> bool:
            assert client.poll() is None, (
                f"pg_recvlogical exited: {client.stderr.read() if client.stderr else ''}"
            )
            active[:] = source.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s AND active", (source.slot,)
            )
            return bool(active)

        wait_for(f"pg_recvlogical to hold slot {source.slot}", slot_active)
        os.kill(client.pid, signal.SIGSTOP)
        pid = active[0][0]
        assert isinstance(pid, int)
        yield pid
    finally:
        client.kill()  # a stopped process takes SIGKILL too
        client.wait(timeout=30)
        if client.stderr:
            client.stderr.close()
    wait_for(
        f"slot {source.slot} to be released",
        lambda: (
            not source.execute(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (source.slot,)
            )
        ),
    )
