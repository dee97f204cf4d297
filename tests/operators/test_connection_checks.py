"""Every operator resolves all its Airflow connections (source, state store, destinations)
before it writes anything: a missing one fails the task naming the connection, the operator
and the remedy, and the changelog, the lake, the state and the slot are as they were.

Real PostgreSQL and real Airflow connections (environment variables); no Spark job starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.operators.backfill import PgBackfillOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.operators.capture import PgCaptureOperator
from airflow_provider_pgsync.operators.compact import PgCompactOperator
from airflow_provider_pgsync.operators.reconcile import PgReconcileOperator
from airflow_provider_pgsync.operators.replication import (
    PgCreatePublicationOperator,
    PgCreateSlotOperator,
    PgDropSlotOperator,
    PgPreflightOperator,
)
from tests.capture.conftest import MakePipeline, Pipeline

DDL = ["CREATE TABLE items (id int PRIMARY KEY, payload text)", "INSERT INTO items VALUES (1, 'a')"]
MISSING = "pgsync_not_defined"


def _files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` with its size (empty when it does not exist)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def _snapshot(pipeline: Pipeline, lake: Path) -> tuple[Any, ...]:
    """What a task could write: changelog files, lake files, the state, the slot's position."""
    changelog = Path(pipeline.settings.changelog_uri)
    return _files(changelog), _files(lake), pipeline.state(), pipeline.slot_info().confirmed_flush_lsn


def _refused(run: Any, operator: str, *missing: str) -> str:
    with pytest.raises(ConfigError) as raised:
        run({"ti": None})
    message = str(raised.value)
    assert operator in message and "nothing was written" in message
    assert "airflow connections add" in message and "AIRFLOW_CONN_" in message
    for conn_id in missing:
        assert repr(conn_id) in message, (conn_id, message)
    return message


@pytest.fixture
def pipeline(make_pipeline: MakePipeline) -> Pipeline:
    """A pipeline with a captured change waiting in the changelog (apply would write it)."""
    made = make_pipeline(DDL, ["public.items"])
    made.database.execute("INSERT INTO items VALUES (2, 'b')")
    made.capture_until_idle()
    return made


def _apply(pipeline: Pipeline, source_conn_id: str, **kwargs: Any) -> PgApplyOperator:
    kwargs.setdefault("postgres_conn_id", source_conn_id)
    return PgApplyOperator(
        task_id="apply",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        state_backend="postgres",
        **kwargs,
    )


def test_apply_with_an_unknown_destination_connection_writes_nothing(
    pipeline: Pipeline, source_conn_id: str, lake: Path
) -> None:
    """The lake comes first in ``destinations``: it is not applied either (it was, before the
    check, and the task failed only when it reached the replica)."""
    before = _snapshot(pipeline, lake)
    op = _apply(
        pipeline,
        source_conn_id,
        destinations=[{"kind": "lake"}, {"kind": "postgres", "conn_id": MISSING, "name": "replica"}],
    )
    message = _refused(op.execute, "PgApplyOperator", MISSING)
    assert "destination 'replica'" in message and "task 'apply'" in message
    assert _snapshot(pipeline, lake) == before


def test_apply_with_an_unknown_source_or_state_connection_writes_nothing(
    pipeline: Pipeline, source_conn_id: str, lake: Path
) -> None:
    before = _snapshot(pipeline, lake)
    op = _apply(pipeline, source_conn_id, postgres_conn_id=MISSING, destinations=[{"kind": "lake"}])
    assert "source database (postgres_conn_id)" in _refused(op.execute, "PgApplyOperator", MISSING)
    op = _apply(pipeline, source_conn_id, state_conn_id="pgsync_no_state", destinations=[{"kind": "lake"}])
    assert "state store (state_conn_id)" in _refused(op.execute, "PgApplyOperator", "pgsync_no_state")
    assert _snapshot(pipeline, lake) == before


def test_capture_with_an_unknown_state_connection_writes_nothing(
    pipeline: Pipeline, source_conn_id: str, lake: Path
) -> None:
    """Changes are waiting: a capture would write a segment and advance the slot."""
    pipeline.database.execute("INSERT INTO items VALUES (3, 'c')")
    before = _snapshot(pipeline, lake)
    op = PgCaptureOperator(
        task_id="capture",
        pipeline=pipeline.name,
        slot_name=pipeline.slot,
        publication_name=pipeline.settings.publication_name,
        changelog_uri=pipeline.settings.changelog_uri,
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
        state_conn_id=MISSING,
    )
    _refused(op.execute, "PgCaptureOperator", MISSING)
    assert _snapshot(pipeline, lake) == before


def test_baseline_with_an_unknown_replica_connection_writes_nothing(
    pipeline: Pipeline, source_conn_id: str, lake: Path
) -> None:
    """The lake comes first: no Spark job starts, no table goes DataSync."""
    before = _snapshot(pipeline, lake)
    op = PgBaselineOperator(
        task_id="baseline",
        pipeline=pipeline.name,
        table="public.items",
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
        destinations=[{"kind": "lake"}, {"kind": "postgres", "conn_id": MISSING, "name": "replica"}],
    )
    _refused(op.execute, "PgBaselineOperator", MISSING)
    assert _snapshot(pipeline, lake) == before


def test_backfill_with_an_unknown_state_connection_writes_nothing(
    pipeline: Pipeline, source_conn_id: str, lake: Path
) -> None:
    before = _snapshot(pipeline, lake)
    op = PgBackfillOperator(
        task_id="backfill",
        pipeline=pipeline.name,
        table="public.items",
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
        state_conn_id=MISSING,
    )
    _refused(op.execute, "PgBackfillOperator", MISSING)
    assert _snapshot(pipeline, lake) == before


def test_compact_with_an_unknown_source_connection_fails_first(pipeline: Pipeline, lake: Path) -> None:
    before = _snapshot(pipeline, lake)
    op = PgCompactOperator(
        task_id="compact", tables=["public.items"], pipeline=pipeline.name, postgres_conn_id=MISSING
    )
    _refused(op.execute, "PgCompactOperator", MISSING)
    assert _snapshot(pipeline, lake) == before


def test_setup_operators_name_their_missing_connection(pipeline: Pipeline, lake: Path) -> None:
    before = _snapshot(pipeline, lake)
    common = {"postgres_conn_id": MISSING}
    tables = ["public.items"]
    for op in (
        PgPreflightOperator(task_id="p", slot_name="s", publication_name="p", tables=tables, **common),
        PgCreatePublicationOperator(task_id="p", publication_name="p", tables=tables, **common),
        PgCreateSlotOperator(task_id="p", slot_name="other_slot", **common),
        PgDropSlotOperator(task_id="p", slot_name=pipeline.slot, **common),
    ):
        _refused(op.execute, type(op).__name__, MISSING)
    assert _snapshot(pipeline, lake) == before


def test_reconcile_with_an_unknown_destination_connection_reads_and_stages_nothing(
    pipeline: Pipeline, source_conn_id: str, lake: Path
) -> None:
    """With ``repair="backfill"`` a reconciliation writes (a staged backfill): the replica's
    missing connection stops it before it reads anything."""
    before = _snapshot(pipeline, lake)
    op = PgReconcileOperator(
        task_id="reconcile",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
        destinations=[{"kind": "lake"}, {"kind": "postgres", "conn_id": MISSING, "name": "replica"}],
        repair="backfill",
        wait_timeout=5,
    )
    message = _refused(op.execute, "PgReconcileOperator", MISSING)
    assert "destination 'replica'" in message
    assert _snapshot(pipeline, lake) == before
