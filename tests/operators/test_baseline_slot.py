"""A baseline refuses without its pipeline's slot (DESIGN rules 5 and 10): the slot must exist
before the snapshot, or the changes committed between the snapshot and the slot's creation
would be in neither the base nor the changelog.

Real PostgreSQL; the refusals come before any Spark job, so only the passing baseline runs Spark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.capture.health import baseline_slot_problem
from airflow_provider_pgsync.errors import SlotError
from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook, SlotInfo
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import PipelineState, SyncDone
from tests.apply.lake import written_to
from tests.capture.conftest import MakePipeline
from tests.conftest import Database

DDL = ["CREATE TABLE items (id int PRIMARY KEY, payload text)", "INSERT INTO items VALUES (1, 'a'), (2, 'b')"]


def _baseline(conn_id: str, pipeline: str, **kwargs: Any) -> dict[str, Any]:
    op = PgBaselineOperator(
        task_id="baseline",
        pipeline=pipeline,
        table="public.items",
        postgres_conn_id=conn_id,
        state_backend="postgres",
        progress_seconds=2,
        **kwargs,
    )
    return op.execute({"ti": None})  # type: ignore[typeddict-item]


def _state(conn_id: str, pipeline: str) -> PipelineState:
    return PostgresStateStore(PgReplicationHook(postgres_conn_id=conn_id)).load(pipeline)


def _untouched(lake: Path) -> None:
    assert written_to(lake) == [], "the refused baseline wrote to the lake"


def test_a_baseline_without_a_slot_to_check_is_refused(
    database: Database, source_conn_id: str, lake: Path
) -> None:
    """No ``slot_name`` and a state that records no slot: refused, nothing written."""
    for statement in DDL:
        database.execute(statement)
    with pytest.raises(SlotError) as raised:
        _baseline(source_conn_id, "no_slot")
    message = str(raised.value)
    assert "public.items" in message and "'no_slot'" in message and "slot_name" in message
    assert "PgCreateSlotOperator" in message
    _untouched(lake)
    assert _state(source_conn_id, "no_slot").version == 0, "the refused baseline wrote state"


def test_a_baseline_whose_slot_does_not_exist_is_refused(
    database: Database, source_conn_id: str, lake: Path
) -> None:
    for statement in DDL:
        database.execute(statement)
    with pytest.raises(SlotError) as raised:
        _baseline(source_conn_id, "missing", slot_name="not_there")
    message = str(raised.value)
    assert "replication slot not_there does not exist" in message
    assert "public.items" in message and "'missing'" in message
    assert "PgCreateSlotOperator" in message and "create_slot" in message
    _untouched(lake)


def test_a_baseline_on_a_slot_created_after_the_pipelines_is_refused(
    make_pipeline: MakePipeline, source_conn_id: str, lake: Path
) -> None:
    """The state records the slot it was built from; the slot was dropped and created again
    later (changes in between lost): a baseline on it is refused, the state is unchanged."""
    pipeline = make_pipeline(DDL, ["public.items"])
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    assert hook.drop_slot(pipeline.slot)
    pipeline.database.execute("INSERT INTO items VALUES (3, 'lost')")  # WAL between the two slots
    assert hook.ensure_slot(pipeline.slot).created
    before = pipeline.state()
    with pytest.raises(SlotError) as raised:
        _baseline(source_conn_id, pipeline.name)
    message = str(raised.value)
    assert f"replication slot {pipeline.slot} is at" in message and "replaced" in message
    assert "public.items" in message and pipeline.name in message and "rebaseline" in message
    assert pipeline.state() == before
    _untouched(lake)


def _info(confirmed: LSN | None) -> SlotInfo:
    return SlotInfo("s", "pgoutput", "logical", "db", False, "reserved", confirmed, confirmed, 0)


def test_a_slot_created_after_the_snapshot_is_a_problem() -> None:
    """The rule itself: the slot's creation (as the state recorded it, else its confirmed
    position, which is never before its creation) must not come after ``baseline_lsn``."""
    unrecorded = PipelineState("p")
    assert baseline_slot_problem(unrecorded, "s", _info(LSN(100)), baseline_lsn=LSN(200)) is None
    late = baseline_slot_problem(unrecorded, "s", _info(LSN(300)), baseline_lsn=LSN(200))
    assert late is not None and "created at 0/12C, after the baseline's snapshot at 0/C8" in late.reason
    assert "PgCreateSlotOperator" in late.solution
    recorded = unrecorded.with_slot("s", LSN(250))
    assert baseline_slot_problem(recorded, "s", _info(LSN(250)), baseline_lsn=LSN(200)) is not None
    assert baseline_slot_problem(recorded, "s", _info(LSN(250)), baseline_lsn=LSN(260)) is None
    missing = baseline_slot_problem(unrecorded, "s", None)
    assert missing is not None and "does not exist" in missing.reason
    creating = baseline_slot_problem(unrecorded, "s", _info(None))
    assert creating is not None and "being created" in creating.reason


@pytest.mark.slow
def test_a_baseline_with_its_slot_passes_and_records_the_slot(
    database: Database, source_conn_id: str, lake: Path
) -> None:
    """The slot created first (as setup does): the baseline runs, and the state now records the
    slot it relies on, so a later replacement of the slot is noticed by capture."""
    for statement in DDL:
        database.execute(statement)
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    created = hook.ensure_slot("slot_first")
    assert created.consistent_point is not None
    result = _baseline(source_conn_id, "with_slot", slot_name="slot_first")
    assert result["rows"] == 2
    state = _state(source_conn_id, "with_slot")
    assert state.slot_name == "slot_first" and state.slot_creation_lsn == created.consistent_point
    phase = state.table("public.items").phase
    assert isinstance(phase, SyncDone) and phase.baseline_lsn >= created.consistent_point
