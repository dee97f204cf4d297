"""Keys that change kind, through the drop-in DAGs on real servers (PostgreSQL, Airflow, Spark)
with a writer running, into a lake, a PostgreSQL replica and a custom destination at once:

- ``ADD PRIMARY KEY`` on a table without a key under REPLICA IDENTITY FULL changes nothing
  pgoutput sends (every column stays in the identity): each destination continues, no
  rebaseline; ``REPLICA IDENTITY DEFAULT`` after it makes the primary key the identity;
- ``REPLICA IDENTITY USING INDEX`` on another column than the primary key;
- ``REPLICA IDENTITY FULL`` with ``DROP CONSTRAINT <pkey>``: the whole row is the identity.

Each of the last three changes which columns identify a row: every destination answers
Rebaseline (``on_schema_change: rebaseline``, the default), the cdc run fails naming the key
change and triggers the baseline DAG for exactly those tables and destinations, and that
baseline, then cdc, bring every destination to Ready, equal to the source row by row.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from airflow_provider_pgsync.state.phases import Errored, Ready
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, task_states, triggered_baselines
from tests.dags.scenario import (  # noqa: F401 (multiset_sqlite: a fixture)
    KINDS,
    destinations,
    equal_everywhere,
    equal_without_spark,
    multiset_sqlite,
    phases,
)
from tests.support.sqlite_destination import source_text, sqlite_text
from tests.support.writer import Writes, concurrent_writer

TABLES = ["public.events", "public.items", "public.orders"]


@contextmanager
def writer(database: Database, seed: int, orders_keyless: threading.Event) -> Iterator[Writes]:
    """A thread committing inserts, updates (of key columns too) and deletes over the three
    tables until the block ends; duplicate rows in ``orders`` once ``orders_keyless`` is set.
    A DDL meanwhile may deadlock a transaction: the next one goes on."""
    rng = random.Random(seed)

    def transaction(conn: Any, new: int) -> None:
        _transaction(conn, rng, new, orders_keyless.is_set())

    with concurrent_writer(database, transaction, first=1_000_000 * seed) as writes:
        yield writes


def _transaction(conn: Any, rng: random.Random, new: int, orders_keyless: bool) -> None:
    old = rng.randint(1, 300)
    conn.execute("INSERT INTO events VALUES (%s, %s, 'w')", (new, f"e{new}"))
    conn.execute("UPDATE events SET v = v || '+' WHERE id = %s", (old,))
    conn.execute("DELETE FROM events WHERE id = %s", (new - 2,))
    conn.execute("INSERT INTO items VALUES (%s, %s, 'w')", (new, f"i{new}"))
    conn.execute("UPDATE items SET v = v || '+' WHERE id = %s", (old,))
    if rng.random() < 0.3:  # the column that becomes the identity changes
        conn.execute("UPDATE items SET code = code || 'k' WHERE id = %s", (rng.randint(1, 300),))
    conn.execute("DELETE FROM items WHERE id = %s", (new - 3,))
    conn.execute("INSERT INTO orders VALUES (%s, 'w')", (new,))
    if orders_keyless:  # two equal rows: only a multiset holds them
        conn.execute("INSERT INTO orders VALUES (%s, 'twin'), (%s, 'twin')", (-new, -new))
    conn.execute("UPDATE orders SET v = v || '+' WHERE id = %s", (old,))
    if rng.random() < 0.3:  # the primary key changes
        conn.execute("UPDATE orders SET id = %s WHERE id = %s", (-new - 500_000, rng.randint(1, 300)))
    conn.execute("DELETE FROM orders WHERE id = %s", (new - 4,))


def _written_after(writes: Writes, count: int) -> None:
    """Wait until the writer has committed ``count`` more transactions (changes after a DDL)."""
    writes.wait_for(writes.done + count, "after the DDL")


@pytest.mark.slow
def test_a_key_that_changes_kind_continues_or_rebaselines_and_ends_equal_everywhere(
    database: Database,
    replica: Database,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
    multiset_sqlite: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_REPLICA", replica.cluster.url(replica.name, with_password=True))
    database.execute("CREATE TABLE events (id int NOT NULL, code text NOT NULL, v text)")
    database.execute("ALTER TABLE events REPLICA IDENTITY FULL")
    database.execute("CREATE TABLE items (id int PRIMARY KEY, code text NOT NULL UNIQUE, v text)")
    database.execute("CREATE TABLE orders (id int PRIMARY KEY, v text)")
    database.execute("INSERT INTO events SELECT g, 'e' || g, 'r' FROM generate_series(1, 300) g")
    database.execute("INSERT INTO items SELECT g, 'i' || g, 'r' FROM generate_series(1, 300) g")
    database.execute("INSERT INTO orders SELECT g, 'r' FROM generate_series(1, 300) g")
    path = tmp_path / "dest.sqlite"
    every_kind = destinations(multiset_sqlite, path)
    pipeline = make_pipeline_dags(["events", "items", "orders"], destinations=every_kind)
    assert pipeline.config.on_schema_change == "rebaseline"  # the default
    assert str(pipeline.run("setup").state) == "success"
    orders_keyless = threading.Event()
    with writer(database, 1, orders_keyless):
        baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
        assert str(baseline.state) == "success", task_states(baseline)
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert set(phases(pipeline, TABLES).values()) == {"Ready"}
    equal_without_spark(database, replica, path, TABLES)
    identities = {t: pipeline.state().table(t).columns for t in TABLES}
    assert all(c.is_key for c in identities["public.events"])  # REPLICA IDENTITY FULL: the whole row

    # ADD PRIMARY KEY under REPLICA IDENTITY FULL: the identity stays the whole row (no new
    # schema version); a column added then keeps it the whole row too: every destination
    # continues, nothing goes back to baseline (the lake's view shows the column once compacted)
    before = triggered_baselines(pipeline)
    with writer(database, 2, orders_keyless) as writes:
        database.execute("ALTER TABLE events ADD PRIMARY KEY (id)")
        _written_after(writes, 20)
        database.execute("ALTER TABLE events ADD COLUMN note text")
        database.execute("UPDATE events SET note = 'n' || id WHERE id <= 50")
        _written_after(writes, 20)
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert triggered_baselines(pipeline) == before
    assert set(phases(pipeline, TABLES).values()) == {"Ready"}
    assert pipeline.state().table("public.events").schema_version == 1  # the column, not the key
    equal_everywhere(database, replica, path, lake, TABLES, compact=["public.events"])

    # three changes of the identity, each with writes around it; capture meets them in one run
    capsys.readouterr()
    with writer(database, 3, orders_keyless) as writes:
        database.execute("ALTER TABLE events REPLICA IDENTITY DEFAULT")  # keyless -> keyed (id)
        database.execute("ALTER TABLE items REPLICA IDENTITY USING INDEX items_code_key")  # id -> code
        # -> the whole row
        database.execute("ALTER TABLE orders REPLICA IDENTITY FULL, DROP CONSTRAINT orders_pkey")
        orders_keyless.set()
        _written_after(writes, 20)
        cdc = pipeline.run("cdc")
    assert str(cdc.state) == "failed", task_states(cdc)
    assert task_states(cdc) == {
        "capture": "success", "apply": "success", "rebaselines": "success",
        "trigger_rebaseline[0]": "success", "outcome": "failed",
    }, task_states(cdc)  # fmt: skip
    assert set(phases(pipeline, TABLES).values()) == {"Init"}
    triggered = triggered_baselines(pipeline)[len(before) :]
    assert [conf for _, conf in triggered] == [
        {"tables": TABLES, "destinations": list(KINDS), "mode": "rebaseline"}
    ]
    printed = capsys.readouterr().out
    for table, change in [
        ("public.events", "key changed from the whole row (id, code, v, note) to (id)"),
        ("public.items", "key changed from (id) to (code)"),
        ("public.orders", "key changed from (id) to the whole row (id, v)"),
    ]:
        for destination in KINDS:
            assert (
                f"  - table {table} changed its columns ({change}); destination {destination} cannot follow "
                "it without a rebaseline; rebaseline triggered:"
            ) in printed, (table, destination, printed[-4000:])

    # the baseline run the cdc DAG triggered (its conf), with the writer going on; then cdc
    with writer(database, 4, orders_keyless):
        rebaseline = pipeline.run("baseline", run_conf=triggered[0][1])
        assert str(rebaseline.state) == "success", task_states(rebaseline)
        cdc = pipeline.run("cdc")
        assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert set(phases(pipeline, TABLES).values()) == {"Ready"}
    keys = {t: [c.name for c in pipeline.state().table(t).columns if c.is_key] for t in TABLES}
    assert keys == {"public.events": ["id"], "public.items": ["code"], "public.orders": ["id", "v"]}
    assert database.execute("SELECT count(*) > count(DISTINCT (id, v)) FROM orders") == [(True,)]
    equal_everywhere(database, replica, path, lake, TABLES)


@pytest.mark.slow
def test_a_primary_key_dropped_without_an_identity_stops_the_table_with_the_remedy(
    database: Database,
    make_pipeline_dags: MakePipelineDags,
    multiset_sqlite: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``DROP CONSTRAINT <pkey>`` under REPLICA IDENTITY DEFAULT leaves no identity (DESIGN §2 rule
    7): the source refuses UPDATE and DELETE, and no destination can tell the rows apart. The
    table goes Errored at once, naming the ALTER TABLE that fixes it (no rebaseline is triggered:
    it could not succeed); the remedy then brings it back. A custom destination alone (no Spark):
    the rule is apply's, the same for every destination."""
    database.execute("CREATE TABLE orders (id int PRIMARY KEY, v text)")
    database.execute("INSERT INTO orders SELECT g, 'r' FROM generate_series(1, 50) g")
    path = tmp_path / "dest.sqlite"
    sqlite = {"kind": "custom", "class": multiset_sqlite, "name": "sqlite", "path": str(path)}
    pipeline = make_pipeline_dags(["orders"], destinations=[sqlite])
    assert str(pipeline.run("setup").state) == "success"
    assert str(pipeline.run("baseline", run_conf=pipeline.every_table()).state) == "success"
    database.execute("UPDATE orders SET v = 'u' WHERE id <= 5")
    assert task_states(pipeline.run("cdc")) == CDC_GREEN
    before = triggered_baselines(pipeline)

    database.execute("ALTER TABLE orders DROP CONSTRAINT orders_pkey")
    database.execute("INSERT INTO orders VALUES (100, 'after'), (100, 'after')")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="does not have a replica identity"):
        database.execute("UPDATE orders SET v = 'x' WHERE id = 1")
    capsys.readouterr()
    for _ in range(2):  # and every run after it, as long as the table waits for its remedy
        cdc = pipeline.run("cdc")
        assert task_states(cdc)["apply"] == "failed", task_states(cdc)
    assert triggered_baselines(pipeline) == before
    phase = pipeline.state().table("public.orders").destination("sqlite").phase
    assert isinstance(phase, Errored) and phase.retry == "none", phase
    assert "table public.orders has no replica identity any more" in phase.reason
    baseline_dag = f"pgsync_{pipeline.config.name}_baseline"
    assert phase.solution == (
        "ALTER TABLE public.orders REPLICA IDENTITY FULL; (or give it a primary key again), then rebaseline "
        f'public.orders in sqlite: trigger {baseline_dag} with tables=["public.orders"], '
        'destinations=["sqlite"], mode=rebaseline'
    )
    assert "table public.orders in destination sqlite is Errored: table public.orders has no replica" in (
        capsys.readouterr().out
    )

    # the remedy: an identity, then the rebaseline it names
    database.execute("ALTER TABLE orders REPLICA IDENTITY FULL")
    database.execute("UPDATE orders SET v = 'x' WHERE id <= 3")
    remedy = {"tables": ["public.orders"], "destinations": ["sqlite"], "mode": "rebaseline"}
    assert str(pipeline.run("baseline", run_conf=remedy).state) == "success"
    database.execute("INSERT INTO orders VALUES (101, 'later'), (101, 'later')")
    database.execute("DELETE FROM orders WHERE ctid = (SELECT min(ctid) FROM orders WHERE id = 100)")
    assert task_states(pipeline.run("cdc")) == CDC_GREEN
    assert pipeline.state().table("public.orders").destination("sqlite").phase == Ready()
    assert sqlite_text(path, "public.orders") == source_text(database, "public.orders")
