"""The PostgreSQL destination's session outlives a replica whose database and role defaults are
1 s timeouts: it waits idle between batches and runs statements longer than the default."""

from __future__ import annotations

from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.source.names import TableRef
from tests.capture.conftest import wait_for
from tests.conftest import Database
from tests.hooks.low_timeouts import LowTimeouts, low_timeouts_fixture, session_of  # noqa: F401


def test_the_replica_session_outlives_low_timeouts(
    database: Database, replica: Database, low_timeouts: LowTimeouts
) -> None:
    low_timeouts.conn_id(replica, "low_replica")  # the replica's database defaults: 1 s
    conninfo = f"{replica.conninfo} user={low_timeouts.role} password={low_timeouts.password}"
    destination = PostgresDestination(conninfo, name="replica")
    try:
        pid = destination._conn.info.backend_pid

        def idle_long() -> bool:
            found = session_of(replica, "pid = %s", pid)
            assert found, "the server ended the destination's idle session"
            return found[0][1] == "idle" and float(found[0][2]) > 2.5  # type: ignore[arg-type]

        wait_for("the destination's session idle > 2.5 s", idle_long)
        with destination._conn.transaction():  # a statement longer than the default, in a batch
            destination._conn.execute("SELECT pg_sleep(1.2)")
        assert destination.watermark(TableRef("public", "t")) is None
    finally:
        destination.close()
