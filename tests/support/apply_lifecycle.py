"""Two replicas through an apply's life: the table, its destinations and their phases (test-only)."""

from __future__ import annotations

import pytest

from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import DataSync, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import Pipeline
from tests.conftest import Database, MakeReplica
from tests.support.replica import empty_baseline

TABLE = "public.items"


@pytest.fixture
def two_replicas(make_replica: MakeReplica) -> tuple[Database, Database]:
    """Destinations ``good`` and ``picky`` (Airflow connections pgsync_good and pgsync_picky)."""
    return make_replica("good"), make_replica("picky")


DESTINATIONS = [
    {"kind": "postgres", "conn_id": "pgsync_good", "name": "good"},
    {"kind": "postgres", "conn_id": "pgsync_picky", "name": "picky"},
]


def handed_off(
    pipeline: Pipeline, database: Database, names: list[str], replicas: tuple[Database, Database]
) -> None:
    """The empty table's baseline in each destination ``names``: every later change applies."""
    replica = dict(zip(("good", "picky"), replicas, strict=True))
    for name in names:
        empty_baseline(database, replica[name], name, TABLE, f"v-{name}")
    xmax, lsn = database.execute(
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text"
    )[0]

    def change(state: PipelineState) -> PipelineState:
        for name in names:
            lineage = f"v-{name}"
            done = SyncDone("00000003-00000002-1", LSN.parse(str(lsn)), int(str(xmax)), int(str(xmax)))
            state = state.with_destination_phase(TABLE, name, DataSync(lineage))
            state = state.with_destination_phase(TABLE, name, _with_lineage(done, lineage))
        return state

    update_state(pipeline.store, pipeline.name, change)


def _with_lineage(done: SyncDone, lineage: str) -> SyncDone:
    return SyncDone(done.snapshot, done.baseline_lsn, done.xmin, done.xmax, done.xip, lineage=lineage)


def phases_of(run: object) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}  # type: ignore[attr-defined]
