"""PgReplicationHook.preflight against real servers: every problem at once, with its fix."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest

from airflow_provider_pgsync.errors import PreflightError, Problem
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.preflight import TableFacts
from tests.conftest import Cluster, Database, free_port, login_role


@pytest.fixture
def slot(database: Database) -> str:
    """A slot name of this test's own (slots are cluster-wide, databases are not)."""
    return f"s_{database.name}"


@pytest.fixture
def hook(source_conn_id: str) -> PgReplicationHook:
    return PgReplicationHook(postgres_conn_id=source_conn_id)


# ---- acceptance: a wal_level=replica server ---------------------------------------------------


@pytest.fixture(scope="module")
def replica_cluster(pg_cluster: Cluster) -> Iterator[Cluster]:
    """A second private cluster with wal_level=replica (named so stale ones are cleaned up)."""
    cluster = Cluster(
        root=pg_cluster.root.parent / f"test-pg-walreplica-{os.getpid()}",
        port=free_port(),
        wal_level="replica",
    )
    try:
        cluster.start()
        cluster.create_database("src")
        yield cluster
    finally:
        cluster.destroy()


def test_unfit_source_reports_all_three_problems_in_one_error(
    replica_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(replica_cluster.conninfo("src"), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS events")
        conn.execute("CREATE TABLE events (at timestamptz, payload text)")  # no key, identity DEFAULT
        assert conn.execute("SELECT current_setting('wal_level')").fetchone() == ("replica",)
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica_cluster.url("src", with_password=True))
    hook = PgReplicationHook(postgres_conn_id="pgsync_replica")

    with pytest.raises(PreflightError) as excinfo:
        hook.preflight(slot_name="pgsync_slot", tables=["events", "public.missing"], publication_name="pub")

    error = excinfo.value
    assert error.problems == (
        Problem(
            "server setting wal_level",
            "wal_level is 'replica'; logical decoding needs 'logical'",
            "ALTER SYSTEM SET wal_level = logical; then restart the server",
        ),
        Problem(
            "table public.events",
            "has no primary key and REPLICA IDENTITY DEFAULT, so updates and deletes cannot be replicated",
            "ALTER TABLE public.events ADD PRIMARY KEY (<key columns>);  or  "
            "ALTER TABLE public.events REPLICA IDENTITY FULL;",
        ),
        Problem(
            "table public.missing",
            "does not exist",
            "create it, or correct the name in the pipeline configuration "
            '(quoted names are case-sensitive: "MyTable" is not mytable)',
        ),
    )
    text = str(error)
    assert text.startswith("preflight found 3 problem(s):\n")
    assert "ALTER SYSTEM SET wal_level = logical" in text
    assert "ALTER TABLE public.events REPLICA IDENTITY FULL" in text
    assert "table public.missing: does not exist" in text
    assert error.retryable is False


# ---- the normal (logical) server ------------------------------------------------------------------


def test_fit_source_passes_and_returns_the_facts(
    database: Database, hook: PgReplicationHook, slot: str
) -> None:
    database.execute("CREATE TABLE orders (id int PRIMARY KEY, total int)")
    database.execute('CREATE SCHEMA "Sales"')
    database.execute('CREATE TABLE "Sales"."Big Orders" (id int)')
    database.execute('ALTER TABLE "Sales"."Big Orders" REPLICA IDENTITY FULL')  # no key, but FULL
    database.execute("CREATE TABLE parts (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)")
    version = database.execute("SELECT current_setting('server_version_num')::int")[0][0]

    facts = hook.preflight(
        slot_name=slot,
        tables=["Orders", {"table": '"Sales"."Big Orders"', "columns": ["id"]}, "parts"],
        publication_name="pub",
    )

    assert (facts.database, facts.role, facts.wal_level) == (database.name, "pgsync", "logical")
    assert facts.server_version_num == version
    assert (facts.role_superuser, facts.role_replication, facts.can_create_in_database) == (True, True, True)
    assert facts.max_replication_slots == 40
    assert (facts.slot_name, facts.slot_plugin, facts.slot_database) == (slot, None, None)
    assert facts.publication_exists is False
    assert facts.tables == (
        TableFacts(TableRef("public", "orders"), True, "r", "d", True, True, True, False),
        TableFacts(TableRef("Sales", "Big Orders"), True, "r", "f", False, True, True, False),
        TableFacts(TableRef("public", "parts"), True, "p", "d", True, True, True, False),
    )


def test_partitioned_table_without_key_is_reported(
    database: Database, hook: PgReplicationHook, slot: str
) -> None:
    database.execute("CREATE TABLE parts (id int NOT NULL, v int) PARTITION BY RANGE (id)")
    with pytest.raises(PreflightError) as excinfo:
        hook.preflight(slot_name=slot, tables=["parts"], publication_name="pub")
    assert [(p.subject, p.problem) for p in excinfo.value.problems] == [
        (
            "table public.parts",
            "has no primary key and REPLICA IDENTITY DEFAULT, so updates and deletes cannot be replicated",
        )
    ]


def test_quoted_names_are_case_sensitive(database: Database, hook: PgReplicationHook, slot: str) -> None:
    database.execute('CREATE TABLE "MyTable" (id int PRIMARY KEY)')
    hook.preflight(slot_name=slot, tables=['"MyTable"'], publication_name="pub")
    with pytest.raises(PreflightError) as excinfo:
        hook.preflight(slot_name=slot, tables=["MyTable"], publication_name="pub")
    assert [(p.subject, p.problem) for p in excinfo.value.problems] == [
        ("table public.mytable", "does not exist")
    ]


def test_view_is_not_a_table(database: Database, hook: PgReplicationHook, slot: str) -> None:
    database.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    database.execute("CREATE VIEW recent_orders AS SELECT * FROM orders")
    database.execute("CREATE MATERIALIZED VIEW order_count AS SELECT count(*) FROM orders")
    with pytest.raises(PreflightError) as excinfo:
        hook.preflight(
            slot_name=slot, tables=["orders", "recent_orders", "order_count"], publication_name="pub"
        )
    assert excinfo.value.problems == (
        Problem("table public.recent_orders", "is a view, not a table", "replicate the underlying table"),
        Problem(
            "table public.order_count",
            "is a materialized view, not a table",
            "replicate the underlying table",
        ),
    )


def test_replica_identity_nothing_is_reported(database: Database, hook: PgReplicationHook, slot: str) -> None:
    database.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    database.execute("ALTER TABLE orders REPLICA IDENTITY NOTHING")
    with pytest.raises(PreflightError) as excinfo:
        hook.preflight(slot_name=slot, tables=["orders"], publication_name="pub")
    assert excinfo.value.problems == (
        Problem(
            "table public.orders",
            "has REPLICA IDENTITY NOTHING, so updates and deletes cannot be replicated",
            "ALTER TABLE public.orders REPLICA IDENTITY FULL;  (or DEFAULT, if it has a primary key)",
        ),
    )


def test_replica_identity_full_or_index_without_a_key_passes(
    database: Database, hook: PgReplicationHook, slot: str
) -> None:
    database.execute("CREATE TABLE events (at timestamptz, payload text)")
    database.execute("ALTER TABLE events REPLICA IDENTITY FULL")
    database.execute("CREATE TABLE codes (code text NOT NULL)")
    database.execute("CREATE UNIQUE INDEX codes_code ON codes (code)")
    database.execute("ALTER TABLE codes REPLICA IDENTITY USING INDEX codes_code")
    facts = hook.preflight(slot_name=slot, tables=["events", "codes"], publication_name="pub")
    assert [(t.table.name, t.replica_identity, t.has_primary_key) for t in facts.tables] == [
        ("events", "f", False),
        ("codes", "i", False),
    ]


def test_the_fix_makes_the_no_key_table_pass(database: Database, hook: PgReplicationHook, slot: str) -> None:
    database.execute("CREATE TABLE events (at timestamptz, payload text)")
    with pytest.raises(PreflightError) as excinfo:
        hook.preflight(slot_name=slot, tables=["events"], publication_name="pub")
    (problem,) = excinfo.value.problems
    database.execute(problem.fix.split(";  or  ")[1])  # ALTER TABLE public.events REPLICA IDENTITY FULL;
    hook.preflight(slot_name=slot, tables=["events"], publication_name="pub")


def test_slot_name_taken_by_a_test_decoding_slot(
    database: Database, hook: PgReplicationHook, slot: str
) -> None:
    database.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    database.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slot,))
    with pytest.raises(PreflightError) as excinfo:
        hook.preflight(slot_name=slot, tables=["orders"], publication_name="pub")
    assert excinfo.value.problems == (
        Problem(
            f"replication slot {slot}",
            f"exists already with plugin 'test_decoding' in database {database.name!r}; "
            f"pgsync needs a pgoutput slot in {database.name!r}",
            f"choose another slot name, or SELECT pg_drop_replication_slot('{slot}'); "
            "if nothing else uses it",
        ),
    )


def test_own_pgoutput_slot_passes(database: Database, hook: PgReplicationHook, slot: str) -> None:
    database.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    database.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    facts = hook.preflight(slot_name=slot, tables=["orders"], publication_name="pub")
    assert (facts.slot_plugin, facts.slot_database) == ("pgoutput", database.name)


# ---- a role that is neither superuser nor REPLICATION ---------------------------------------------


@pytest.fixture
def etl_role(database: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A login role without REPLICATION, with an Airflow connection of its own."""
    with login_role(database, monkeypatch, "pgsync_etl") as role:
        yield role


def test_role_without_replication_and_privileges(database: Database, etl_role: str, slot: str) -> None:
    database.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    hook = PgReplicationHook(postgres_conn_id="pgsync_etl")

    with pytest.raises(PreflightError) as excinfo:
        hook.preflight(slot_name=slot, tables=["orders"], publication_name="pub")

    db = database.name
    assert excinfo.value.problems == (
        Problem(
            f"role {etl_role}",
            "may not use replication slots (neither REPLICATION nor superuser)",
            f"ALTER ROLE {etl_role} WITH REPLICATION;",
        ),
        Problem(
            f"role {etl_role}",
            f"may not create a publication in database {db}",
            f"GRANT CREATE ON DATABASE {db} TO {etl_role};",
        ),
        Problem(
            "table public.orders",
            f"role {etl_role} may not read it",
            f"GRANT SELECT ON public.orders TO {etl_role};",
        ),
        Problem(
            "table public.orders",
            f"role {etl_role} does not own it, so it cannot add it to the publication",
            f"ALTER TABLE public.orders OWNER TO {etl_role};  or let the owner add it to the publication",
        ),
    )

    # every fix is SQL that works as printed; applied, the role passes
    for problem in excinfo.value.problems:
        database.execute(problem.fix.split(";  or ")[0])
    facts = hook.preflight(slot_name=slot, tables=["orders"], publication_name="pub")
    assert (facts.role, facts.role_superuser, facts.role_replication) == (etl_role, False, True)
    assert facts.tables == (
        TableFacts(TableRef("public", "orders"), True, "r", "d", True, True, True, False),
    )


def test_role_that_is_not_owner_passes_once_the_table_is_in_the_publication(
    database: Database, etl_role: str, slot: str
) -> None:
    database.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    database.execute(f"ALTER ROLE {etl_role} WITH REPLICATION")
    database.execute(f"GRANT SELECT ON orders TO {etl_role}")
    database.execute("CREATE PUBLICATION pub FOR TABLE orders")  # made by the owner
    hook = PgReplicationHook(postgres_conn_id="pgsync_etl")
    facts = hook.preflight(slot_name=slot, tables=["orders"], publication_name="pub")
    assert facts.publication_exists is True
    assert facts.can_create_in_database is False
    assert facts.tables == (
        TableFacts(TableRef("public", "orders"), True, "r", "d", True, True, False, True),
    )
