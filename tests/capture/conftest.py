"""Capture against a real server: a pipeline (tables, publication, slot, state) and the changelog read back.

``make_pipeline(ddl, tables)`` runs the DDL in this test's database, publishes the
tables, creates the slot and saves a pipeline state (PostgreSQL store in the source
database) that records the slot and holds every table in phase Init, as the setup of a
pipeline leaves it. ``read_changes`` reads every change of a table from the changelog
the way destinations do: ``Changelog(uri).read_changes(table, state.segments)``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from airflow_provider_pgsync.capture.run import CaptureResult, CaptureSettings, capture
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.hooks.ddl_trigger import install_ddl_trigger
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook, SlotInfo
from airflow_provider_pgsync.pgoutput import LSN, Begin, Commit, PgOutputDecoder
from airflow_provider_pgsync.state.model import Init, PipelineState, SegmentInfo
from airflow_provider_pgsync.state.store import StateStore
from tests.conftest import Database

PUBLICATION = "pgsync_pub"
Change = dict[str, Any]
"""One change as read back from the changelog, plus ``_schema_version``."""


def read_changes(changelog_uri: str, table: str, segments: Sequence[SegmentInfo]) -> list[Change]:
    """Every change of ``table`` in ``segments``, in (commit LSN, seq) order, with its schema version."""
    out: list[Change] = []
    for version, batch in Changelog(changelog_uri).read_changes(table, segments):
        for row in batch.to_pylist():
            row["_schema_version"] = version
            out.append(row)
    return out


def wait_for(what: str, check: Callable[[], bool], *, timeout: float = 30.0, step: float = 0.05) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


@dataclass
class Pipeline:
    """One pipeline on this test's database: its hook, state store and capture settings."""

    database: Database
    hook: PgReplicationHook
    store: StateStore
    settings: CaptureSettings
    tables: tuple[str, ...]
    creation_lsn: LSN

    @property
    def name(self) -> str:
        return self.settings.pipeline

    @property
    def slot(self) -> str:
        return self.settings.slot_name

    def capture(self, **overrides: Any) -> CaptureResult:
        """One capture run with the pipeline's settings (``overrides`` replace some of them)."""
        return capture(self.hook, self.store, dataclasses.replace(self.settings, **overrides))

    def capture_until_idle(self, *, limit: int = 100, **overrides: Any) -> list[CaptureResult]:
        """Capture until a run is idle (its peek was not cut by the change limit)."""
        results: list[CaptureResult] = []
        while not results or not results[-1].idle:
            assert len(results) < limit, f"capture was not idle after {limit} runs"
            results.append(self.capture(**overrides))
        return results

    def state(self) -> PipelineState:
        return self.store.load(self.name)

    def cdc_tasks(self, destinations: Sequence[dict[str, Any]], **apply_kwargs: Any) -> tuple[Any, Any]:
        """Inside a DAG: its capture task and, after it, an apply task into ``destinations``
        (the pipeline's state in the source database, as ``make_pipeline`` keeps it)."""
        from airflow_provider_pgsync.operators.apply import PgApplyOperator
        from airflow_provider_pgsync.operators.capture import PgCaptureOperator

        source = {"postgres_conn_id": self.hook.postgres_conn_id, "state_backend": "postgres"}
        capture = PgCaptureOperator(
            task_id="capture",
            pipeline=self.name,
            slot_name=self.slot,
            publication_name=self.settings.publication_name,
            changelog_uri=self.settings.changelog_uri,
            **source,
        )
        apply = PgApplyOperator(
            task_id="apply",
            pipeline=self.name,
            changelog_uri=self.settings.changelog_uri,
            destinations=list(destinations),
            **source,
            **apply_kwargs,
        )
        capture >> apply
        return capture, apply

    def slot_info(self) -> SlotInfo:
        info = self.hook.slot_info(self.slot)
        assert info is not None, f"slot {self.slot} does not exist"
        return info

    def changes(self, table: str) -> list[Change]:
        """Every change of ``table`` the state's segments hold."""
        return read_changes(self.settings.changelog_uri, table, self.state().segments)


OpenStore = Callable[[PgReplicationHook], StateStore]


class MakePipeline(Protocol):
    def __call__(
        self,
        ddl: Sequence[str],
        tables: Sequence[str],
        *,
        reference_slot: bool = False,
        open_store: OpenStore | None = None,
    ) -> Pipeline: ...


@pytest.fixture
def make_pipeline(database: Database, source_conn_id: str, tmp_path: Path) -> MakePipeline:
    """``make_pipeline(ddl, tables)``: tables, publication, slot and a state with the tables in Init.

    ``open_store`` gives the state store for the source hook (default: a
    ``PostgresStateStore`` in the source database). With ``reference_slot`` a second
    slot ``<slot>_ref`` is created right after the pipeline's, for decoding the same
    transactions with the reference decoder (creating a slot writes a little WAL of its
    own, so it starts a few bytes later, with no change in between).
    """

    def make(
        ddl: Sequence[str],
        tables: Sequence[str],
        *,
        reference_slot: bool = False,
        open_store: OpenStore | None = None,
    ) -> Pipeline:
        for statement in ddl:
            database.execute(statement)
        hook = PgReplicationHook(postgres_conn_id=source_conn_id)
        with hook.connect() as conn:  # as setup does, before the slot
            assert install_ddl_trigger(conn)
        hook.ensure_publication(PUBLICATION, tables)
        slot = f"s_{database.name}"
        creation = hook.ensure_slot(slot)
        assert creation.created and creation.consistent_point is not None
        if reference_slot:
            hook.ensure_slot(f"{slot}_ref")
        store = PostgresStateStore(hook) if open_store is None else open_store(hook)
        state = PipelineState(f"p_{database.name}").with_slot(slot, creation.consistent_point)
        for table in tables:
            state = state.with_table_phase(table, Init())
        store.save(state)
        settings = CaptureSettings(
            pipeline=state.pipeline,
            slot_name=slot,
            publication_name=PUBLICATION,
            changelog_uri=str(tmp_path / "changelog"),
        )
        return Pipeline(database, hook, store, settings, tuple(tables), creation.consistent_point)

    return make


@dataclass(frozen=True)
class ReferenceTransaction:
    """A transaction as the reference decoder reads it from a peek."""

    xid: int
    final_lsn: LSN
    end_lsn: LSN
    commit_ts: int


def reference_transactions(hook: PgReplicationHook, slot: str) -> list[ReferenceTransaction]:
    """Every committed transaction in the slot up to the current flush LSN, by the reference decoder."""
    decoder = PgOutputDecoder(protocol_version=2)
    out: list[ReferenceTransaction] = []
    begin: Begin | None = None
    upto = hook.wal_positions().flush
    with hook.peek(slot, [PUBLICATION], upto_lsn=upto, upto_nchanges=None) as rows:
        for _lsn, _xid, data in rows:
            message = decoder.decode(data)
            if isinstance(message, Begin):
                begin = message
            elif isinstance(message, Commit):
                assert begin is not None and begin.final_lsn == message.commit_lsn
                out.append(ReferenceTransaction(begin.xid, begin.final_lsn, message.end_lsn, begin.commit_ts))
                begin = None
    return out
