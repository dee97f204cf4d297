"""The whole pipeline as a role that is not a superuser, as on a managed server (RDS, Cloud SQL):
LOGIN and REPLICATION, owner of the source tables, CREATE on the database (the state table's
schema). Real PostgreSQL, Airflow (``dag.test()``) and Spark.

setup (no DDL trigger: only a superuser may install one; setup warns and goes on) -> a
baseline of both tables (a keyed one, a keyless one) -> writes, also while a writer runs ->
cdc: the destination equals the source, every table Ready. The role matters on the source
only (publication, slot, snapshot, the baseline's read, capture, the state table), which every
destination shares: one destination, a PostgreSQL replica, keeps the test to one Spark job.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from psycopg import sql

from airflow_provider_pgsync.state.model import Ready
from tests.conftest import Database, MakeReplica, login_role
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, task_states
from tests.support.replica import rows

TABLES = ["public.items", "public.tags"]


@pytest.fixture
def etl_conn_id(database: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An Airflow connection of a new role: LOGIN REPLICATION, no superuser, owner of nothing yet,
    CREATE on the test database."""
    with login_role(database, monkeypatch, "pgsync_etl", "REPLICATION NOSUPERUSER") as role:
        database.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO {}")
            .format(sql.Identifier(database.name), sql.Identifier(role))
            .as_string(None)
        )
        yield role


def _writes(database: Database, start: int, count: int) -> None:
    """``count`` committed transactions over both tables from id ``start`` on."""
    with database.connect() as conn:
        for i in range(start, start + count):
            with conn.transaction():
                conn.execute("INSERT INTO items VALUES (%s, %s, %s)", (i, f"w{i}", i % 50))
                conn.execute("UPDATE items SET qty = qty + 1 WHERE id = %s", (i % 200 + 1,))
                conn.execute("INSERT INTO tags VALUES (%s)", (f"tag {i % 7}",))  # duplicates: keyless
                conn.execute("DELETE FROM items WHERE id = %s", (i % 97 + 100,))


@pytest.mark.slow
@pytest.mark.usefixtures("spark_drivers")  # its baselines are Spark jobs (tests/tiers.py)
def test_a_replication_role_without_superuser_runs_the_pipeline_exactly(
    database: Database,
    etl_conn_id: str,
    make_pipeline_dags: MakePipelineDags,
    make_replica: MakeReplica,
) -> None:
    role = sql.Identifier(etl_conn_id)
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text, qty int)")
    database.execute("CREATE TABLE tags (label text)")
    database.execute("ALTER TABLE tags REPLICA IDENTITY FULL")
    database.execute("INSERT INTO items SELECT g, 'item ' || g, g %% 10 FROM generate_series(1, 200) g")
    database.execute("INSERT INTO tags SELECT 'tag ' || (g %% 5) FROM generate_series(1, 40) g")
    for table in ("items", "tags"):  # the role owns the tables: it may publish them
        database.execute(
            sql.SQL("ALTER TABLE {} OWNER TO {}").format(sql.Identifier(table), role).as_string(None)
        )
    replica = make_replica("replica")
    pipeline = make_pipeline_dags(
        ["items", "tags"],
        source_conn_id="pgsync_etl",
        state={"backend": "postgres"},
        destinations=[{"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}],
    )
    assert not database.execute(
        "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (etl_conn_id,)
    )[0][0], "the role is a superuser: the test proves nothing"

    setup = pipeline.run("setup")
    assert str(setup.state) == "success", task_states(setup)
    owner = database.execute(
        "SELECT pg_get_userbyid(pubowner) FROM pg_publication WHERE pubname = %s",
        (pipeline.config.publication_name,),
    )
    assert owner == [(etl_conn_id,)], "setup did not run as the role"

    _writes(database, 1000, 20)  # before the baseline: the baseline's snapshot holds them
    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
    assert str(baseline.state) == "success", task_states(baseline)

    # a writer commits while cdc captures and applies, then the rest is caught up
    done = threading.Event()

    def write() -> None:
        _writes(database, 2000, 60)
        done.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    first = pipeline.run("cdc")
    writer.join(timeout=120)
    assert done.is_set(), "the writer did not finish"
    assert task_states(first) == CDC_GREEN, task_states(first)
    last = pipeline.run("cdc")
    assert task_states(last) == CDC_GREEN, task_states(last)

    state = pipeline.state()
    assert {t: state.table(t).destination("replica").phase for t in TABLES} == dict.fromkeys(TABLES, Ready())
    for table in TABLES:
        expected = rows(database, table)
        assert expected, f"{table} is empty: the comparison would prove nothing"
        assert rows(replica, table) == expected, f"{table} differs in the replica"
