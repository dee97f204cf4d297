"""PgSlotLagSensor in DAG runs, deferrable and poking: a crossed threshold, a missing slot."""

from __future__ import annotations

from airflow_provider_pgsync.errors import SlotError
from tests.conftest import RunDag
from tests.sensors.conftest import LagSensor, run_sensor
from tests.triggers.conftest import Source


def test_succeeds_with_the_figures_when_the_lag_crosses_the_threshold(
    source: Source, run_dag: RunDag, deferrable: bool
) -> None:
    source.execute("INSERT INTO items SELECT generate_series(1, 100), 'x'")
    unconfirmed = source.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots"
        " WHERE slot_name = %s",
        (source.slot,),
    )[0][0]
    assert isinstance(unconfirmed, int) and unconfirmed > 0

    result = run_sensor(
        run_dag,
        f"lag_threshold_{deferrable}",
        LagSensor,
        slot_name=source.slot,
        threshold_bytes=unconfirmed,
        lag_measure="unconfirmed",
        wal_statuses=[],
        postgres_conn_id=source.conn_id,
        deferrable=deferrable,
    )

    assert (result.state, result.error) == ("success", None)
    xcom = result.xcom
    assert (xcom["fired"], xcom["lag_measure"], xcom["threshold_bytes"], xcom["wal_statuses"]) == (
        "threshold",
        "unconfirmed",
        unconfirmed,
        [],
    )
    assert xcom["lag_bytes"] == xcom["unconfirmed_bytes"] >= unconfirmed
    assert xcom["confirmed_flush_lsn"] == str(source.creation_lsn)
    assert xcom["wal_status"] == "reserved"


def test_a_missing_slot_fails_with_the_remedy(source: Source, run_dag: RunDag, deferrable: bool) -> None:
    result = run_sensor(
        run_dag,
        f"lag_no_slot_{deferrable}",
        LagSensor,
        slot_name="no_such_slot",
        threshold_bytes=1,
        postgres_conn_id=source.conn_id,
        deferrable=deferrable,
    )

    assert result.state == "failed"
    assert isinstance(result.error, SlotError), repr(result.error)
    assert "replication slot no_such_slot does not exist" in str(result.error)
