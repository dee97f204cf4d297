"""A whole pipeline against servers whose database and role defaults are 1 s timeouts
(statement, idle, idle in transaction): a baseline by a real Spark job (its snapshot session
idle in its transaction, its lock session idle, far longer than 1 s), then capture and apply
through the operators into a PostgreSQL replica whose defaults are as low; the replica then
equals the source exactly."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.operators.capture import PgCaptureOperator
from airflow_provider_pgsync.state.phases import Ready
from tests.capture.conftest import MakePipeline
from tests.capture.conftest import make_pipeline as make_pipeline_fixture  # noqa: F401
from tests.conftest import Database
from tests.hooks.low_timeouts import LowTimeouts, low_timeouts_fixture, unlimited  # noqa: F401
from tests.support.replica import rows

# the subject is every session of the pipeline, the Spark job's own driver and executors included:
# not the worker's resident driver (tests/support/resident_spark.py)
pytestmark = pytest.mark.spark_submit

DDL = ["CREATE TABLE items (id bigint PRIMARY KEY, name text, n numeric, at timestamptz)"]
LOAD = """INSERT INTO items SELECT g, 'name ' || g, g / 7.0, '2024-01-01 00:00+00'::timestamptz
    + g * interval '1 minute' FROM generate_series(%s::bigint, %s::bigint) g"""


@contextmanager
def longest_waits(database: Database, role: str) -> Iterator[dict[tuple[str, str], float]]:
    """While the block runs: per (application name, state) of the role's sessions, the longest
    time one of them was seen in an idle state, in seconds."""
    found: dict[tuple[str, str], float] = {}
    stop = threading.Event()
    errors: list[BaseException] = []

    def watch() -> None:
        try:
            with unlimited(database) as conn:
                while not stop.is_set():
                    for app, state, seconds in conn.execute(
                        "SELECT application_name, state, extract(epoch FROM now() - state_change)::float8"
                        " FROM pg_stat_activity WHERE usename = %s AND state LIKE 'idle%%'",
                        (role,),
                    ):
                        key = (str(app), str(state))
                        found[key] = max(found.get(key, 0.0), float(seconds))
                    stop.wait(0.2)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=watch, name="session-watcher", daemon=True)
    thread.start()
    try:
        yield found
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors


@pytest.mark.slow
@pytest.mark.usefixtures("spark_drivers")  # its baselines are Spark jobs (tests/tiers.py)
def test_a_pipeline_runs_exactly_under_low_server_timeouts(
    request: pytest.FixtureRequest, database: Database, replica: Database, low_timeouts: LowTimeouts
) -> None:
    make_pipeline: MakePipeline = request.getfixturevalue("make_pipeline_fixture")
    pipeline = make_pipeline(DDL, ["items"])
    with unlimited(database) as conn:
        conn.execute(LOAD, (1, 20_000))
        conn.execute("ANALYZE items")
    source = low_timeouts.conn_id(database, "low_source")
    replica_conn = low_timeouts.conn_id(replica, "low_replica")
    destinations = [{"kind": "postgres", "conn_id": replica_conn, "name": "replica"}]
    common: dict[str, Any] = {"pipeline": pipeline.name, "postgres_conn_id": source}
    common["state_backend"] = "postgres"

    with longest_waits(database, low_timeouts.role) as waits:
        baseline = PgBaselineOperator(
            task_id="baseline", table="public.items", destinations=destinations, target_partition_mb=0.2,
            **common,
        ).execute({"ti": None})  # type: ignore[arg-type]
    assert baseline["rows"] == 20_000 and baseline["partitions"] > 1
    holder = f"pgsync baseline {pipeline.name} public.items {baseline['lineage']}"[:63]  # application_name
    assert waits.get((holder, "idle"), 0.0) > 1.5, waits  # the baseline's lock session
    snapshot_waits = [s for (app, state), s in waits.items() if state == "idle in transaction"]
    assert max(snapshot_waits, default=0.0) > 1.5, waits  # the snapshot session, while Spark ran

    with unlimited(database) as conn:  # a backlog whose apply into the replica is a large batch
        conn.execute(LOAD, (20_001, 300_000))
        conn.execute("UPDATE items SET name = name || ' changed', n = -n WHERE id % 3 = 0")
        conn.execute("DELETE FROM items WHERE id % 10 = 0")
    capture = PgCaptureOperator(
        task_id="capture",
        slot_name=pipeline.slot,
        publication_name=pipeline.settings.publication_name,
        changelog_uri=pipeline.settings.changelog_uri,
        **common,
    ).execute({"ti": None})  # type: ignore[arg-type]
    # the load before the baseline too (after the slot): apply finds it in the base
    assert capture["idle"] and capture["changes"] == 20_000 + 280_000 + 100_000 + 30_000
    applied = PgApplyOperator(
        task_id="apply", changelog_uri=pipeline.settings.changelog_uri, destinations=destinations, **common
    ).execute({"ti": None})  # type: ignore[arg-type]
    assert applied["public.items"]["phase"] == Ready().kind

    low_timeouts.lift()
    assert rows(replica, "public.items") == rows(database, "public.items")
