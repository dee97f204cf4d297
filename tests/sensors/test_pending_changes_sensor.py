"""PgPendingChangesSensor in DAG runs, deferrable and poking: enough changes, max wait, a missing slot."""

from __future__ import annotations

import time

from airflow_provider_pgsync.errors import SlotError
from tests.conftest import RunDag
from tests.sensors.conftest import PendingSensor, run_sensor
from tests.triggers.conftest import PUBLICATION, Source


def test_succeeds_when_enough_changes_are_pending(source: Source, run_dag: RunDag, deferrable: bool) -> None:
    source.execute("INSERT INTO items SELECT generate_series(1, 3), 'x'")

    result = run_sensor(
        run_dag,
        f"pending_enough_{deferrable}",
        PendingSensor,
        slot_name=source.slot,
        publication_name=PUBLICATION,
        min_changes=3,
        postgres_conn_id=source.conn_id,
        deferrable=deferrable,
    )

    assert (result.state, result.error) == ("success", None)
    assert (result.xcom["fired"], result.xcom["pending_changes"], result.xcom["slot_name"]) == (
        "changes",
        3,
        source.slot,
    )
    assert source.confirmed_flush_lsn() == source.creation_lsn


def test_succeeds_after_the_maximum_wait(source: Source, run_dag: RunDag, deferrable: bool) -> None:
    source.execute("INSERT INTO items VALUES (1, 'one')")
    started = time.monotonic()

    result = run_sensor(
        run_dag,
        f"pending_max_wait_{deferrable}",
        PendingSensor,
        slot_name=source.slot,
        publication_name=PUBLICATION,
        min_changes=100,
        max_wait_for_changes=1.5,
        postgres_conn_id=source.conn_id,
        deferrable=deferrable,
    )

    assert (result.state, result.error) == ("success", None)
    assert (result.xcom["fired"], result.xcom["pending_changes"]) == ("max_wait", 1)
    assert time.monotonic() - started >= 1.5


def test_a_missing_slot_fails_with_the_remedy(source: Source, run_dag: RunDag, deferrable: bool) -> None:
    result = run_sensor(
        run_dag,
        f"pending_no_slot_{deferrable}",
        PendingSensor,
        slot_name="no_such_slot",
        publication_name=PUBLICATION,
        postgres_conn_id=source.conn_id,
        deferrable=deferrable,
    )

    assert result.state == "failed"
    assert isinstance(result.error, SlotError), repr(result.error)
    assert "replication slot no_such_slot does not exist: run the pipeline's setup DAG" in str(result.error)
