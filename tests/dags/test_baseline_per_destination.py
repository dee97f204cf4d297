"""One destination's limits never block another destination's baseline (real PostgreSQL, Airflow
and Spark, through the drop-in DAGs): each destination's part of a table's baseline succeeds or
fails on its own.

- A timestamp beyond year 294000, which the lake refuses: the lake alone goes Errored (nothing
  of it written), the replica is baselined and streams to Ready, the lake stays Errored.
- A replica whose older, stricter version of a domain's check function refuses the rows: the
  replica alone goes Errored (no staging table left), the lake streams to Ready; once the
  function is fixed, a rebaseline of the table in the replica alone brings it to Ready.
- Three destinations failing at different steps (a replica's staging table, a replica's swap, a
  custom destination's ``load_baseline`` part way through its read) beside a replica and a custom
  destination loaded after the failed one in the same snapshot: those two baselined.

Each time the baseline task fails with ``BaselinePartlyFailedError`` naming the table, the failed
destination, its reason and its remedy, and says which destinations were baselined.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.errors import BaselinePartlyFailedError
from airflow_provider_pgsync.state.phases import Errored, Ready, SyncDone
from tests.apply.lake import lake_session, sort_rows, view_query
from tests.conftest import Database, MakeReplica
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states
from tests.support.replica import rows
from tests.support.sqlite_destination import source_text, sqlite_text

LAKE_AND_REPLICA = [{"kind": "lake"}, {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}]
FAR = "294247-01-01 23:59:59.999999"


def _phases(pipeline: PipelineDags, table: str, *names: str) -> dict[str, Any]:
    state = pipeline.state().table(table)
    return {name: state.destination(name).phase for name in names}


def _partly_failed(
    printed: str, table: str, failed: str, baselined: str, of: tuple[int, int] = (1, 2)
) -> str:
    """The baseline task's error as Airflow logs it (checked for its frame, and ``failed``'s
    line); its text, from its first line on."""
    assert BaselinePartlyFailedError.__name__ in printed, printed[-5000:]
    assert BaselinePartlyFailedError.retryable is False
    head = f"baseline of table {table} failed in {of[0]} of {of[1]} destinations (now Errored); "
    assert head in printed, printed[-5000:]
    text = printed[printed.index(head) :]
    assert text.splitlines()[0].endswith(
        f"{baselined} baselined (SyncDone at {text.split('SyncDone at ')[1].split(',')[0]}, Ready once "
        "apply passes it): do not retry this task, which would baseline those again:"
    ), text.splitlines()[0]
    listed = re.findall(r"^  - destination (\S+): ", text, flags=re.MULTILINE)
    assert len(listed) == of[0] and failed in listed, listed
    assert (
        f"remedy: fix what the reason says, then rebaseline table {table} in destination {failed} alone: "
        f"trigger the pipeline's baseline DAG with tables [{table}], destinations [{failed}] and mode "
        "rebaseline"
    ) in text
    return text


def _staging_tables(replica: Database) -> list[object]:
    return replica.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'pgsync' AND starts_with(c.relname, 'baseline_v')"
    ) + replica.execute("SELECT staging FROM pgsync.baseline_parts")


@pytest.mark.slow
def test_a_value_the_lake_refuses_fails_the_lake_alone(
    database: Database,
    make_replica: MakeReplica,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    replica = make_replica("replica")
    database.execute("CREATE TABLE far (id int PRIMARY KEY, at timestamp, note text)")
    database.execute(
        "INSERT INTO far SELECT g, '2024-01-01'::timestamp + g * interval '1 hour', 'n' || g"
        " FROM generate_series(1, 300) g"
    )
    database.execute("UPDATE far SET at = %s WHERE id = 150", (FAR,))
    pipeline = make_pipeline_dags(["far"], destinations=LAKE_AND_REPLICA)
    assert str(pipeline.run("setup").state) == "success"
    capsys.readouterr()

    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())

    assert str(baseline.state) == "failed" and task_states(baseline)["baseline[0]"] == "failed"
    printed = capsys.readouterr().out
    text = _partly_failed(printed, "public.far", failed="lake", baselined="replica")
    lake_line = next(line for line in text.splitlines() if line.startswith("  - destination lake: "))
    assert "baseline of public.far failed in Spark: " in lake_line
    assert f"beyond year 294000, which Spark cannot hold: {FAR}" in lake_line
    # the task log: one line per destination
    assert re.search(
        r"baseline public\.far: destination replica baselined \(300 rows\), SyncDone at ", printed
    )
    assert re.search(r"baseline public\.far: destination lake failed: .*beyond year 294000", printed)

    phases = _phases(pipeline, "public.far", "lake", "replica")
    assert isinstance(phases["lake"], Errored) and FAR in phases["lake"].reason
    assert phases["lake"].previous == "DataSync" and "destinations [lake]" in phases["lake"].solution
    assert isinstance(phases["replica"], SyncDone)
    state = pipeline.state().table("public.far")
    assert state.destination("replica").lineage == phases["replica"].lineage != ""
    assert not list((lake / "pgsync" / "public__far" / "base").glob("*")), "the lake kept a base version"
    assert rows(replica, "public.far") == rows(database, "public.far")
    assert _staging_tables(replica) == []

    # cdc: the replica streams to Ready; the lake stays Errored, and the run names it alone
    database.execute("INSERT INTO far VALUES (301, %s, 'far again'), (302, '2030-01-01', 'near')", (FAR,))
    database.execute("UPDATE far SET note = 'changed' WHERE id %% 10 = 0")
    database.execute("UPDATE far SET at = '2025-01-01' WHERE id = 150")
    database.execute("DELETE FROM far WHERE id BETWEEN 20 AND 29")
    cdc = pipeline.run("cdc")
    states = task_states(cdc)
    assert (states["capture"], states["apply"], str(cdc.state)) == ("success", "failed", "failed"), states
    printed = capsys.readouterr().out
    assert "table public.far in destination lake is Errored" in printed, printed[-5000:]
    assert "in destination replica" not in printed
    phases = _phases(pipeline, "public.far", "lake", "replica")
    assert phases["replica"] == Ready() and isinstance(phases["lake"], Errored)
    assert FAR in phases["lake"].reason
    assert rows(replica, "public.far") == rows(database, "public.far")
    assert len(rows(database, "public.far")) == 292


@pytest.mark.slow
def test_a_replica_that_refuses_rows_fails_alone_and_a_rebaseline_there_repairs_it(
    database: Database,
    make_replica: MakeReplica,
    make_pipeline_dags: MakePipelineDags,
    lake: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    replica = make_replica("replica")
    # SKUs are checked by a function: the replica has an older, stricter version of it (upper
    # case only), which the domain pgsync makes there from the source's definition calls
    check = (
        "CREATE OR REPLACE FUNCTION public.is_sku(text) RETURNS boolean LANGUAGE sql IMMUTABLE"
        " AS $$ SELECT $1 ~ '{}' $$"
    )
    database.execute(check.format("^[a-z]{3}-[0-9]+$"))
    replica.execute(check.format("^[A-Z]{3}-[0-9]+$"))
    database.execute("CREATE DOMAIN sku AS text CHECK (is_sku(VALUE))")
    database.execute("CREATE TABLE items (id int PRIMARY KEY, code sku NOT NULL, price numeric(10,2))")
    database.execute("INSERT INTO items SELECT g, 'abc-' || g, g * 1.25 FROM generate_series(1, 400) g")
    pipeline = make_pipeline_dags(["items"], destinations=LAKE_AND_REPLICA)
    assert str(pipeline.run("setup").state) == "success"
    capsys.readouterr()

    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())

    assert str(baseline.state) == "failed" and task_states(baseline)["baseline[0]"] == "failed"
    printed = capsys.readouterr().out
    text = _partly_failed(printed, "public.items", failed="replica", baselined="lake")
    assert 'CheckViolation: value for domain sku violates check constraint "sku_check"' in text
    assert re.search(
        r"baseline public\.items: destination lake baselined \(400 rows\), SyncDone at ", printed
    )
    phases = _phases(pipeline, "public.items", "lake", "replica")
    assert isinstance(phases["lake"], SyncDone)
    assert isinstance(phases["replica"], Errored) and "violates check constraint" in phases["replica"].reason
    lake_lineage = pipeline.state().table("public.items").destination("lake").lineage
    # nothing half written in the replica: no table, no staging table, no partition recorded
    assert replica.execute("SELECT to_regclass('public.items')") == [(None,)]
    assert _staging_tables(replica) == []

    database.execute("INSERT INTO items VALUES (401, 'xyz-401', 9.99)")
    database.execute("UPDATE items SET price = price * 2 WHERE id %% 7 = 0")
    database.execute("DELETE FROM items WHERE id <= 5")
    cdc = pipeline.run("cdc")
    assert (task_states(cdc)["apply"], str(cdc.state)) == ("failed", "failed"), task_states(cdc)
    printed = capsys.readouterr().out
    assert "table public.items in destination replica is Errored" in printed
    assert "in destination lake" not in printed
    assert _phases(pipeline, "public.items", "lake")["lake"] == Ready()

    # the cause fixed, the table rebaselined in the replica alone (the remedy's trigger form)
    replica.execute(check.format("^[a-z]{3}-[0-9]+$"))
    again = pipeline.run(
        "baseline", run_conf={"tables": ["public.items"], "destinations": ["replica"], "mode": "rebaseline"}
    )
    assert str(again.state) == "success", task_states(again)
    database.execute("UPDATE items SET code = 'def-' || id WHERE id BETWEEN 100 AND 110")
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert _phases(pipeline, "public.items", "lake", "replica") == {"lake": Ready(), "replica": Ready()}
    assert pipeline.state().table("public.items").destination("lake").lineage == lake_lineage, (
        "lake rebaselined"
    )
    expected = rows(database, "public.items")
    assert len(expected) == 396
    assert rows(replica, "public.items") == expected
    [found] = lake_session(lake, [{"sql": view_query(database, "public.items")}])
    assert sort_rows(found) == expected


@pytest.mark.slow
@pytest.mark.usefixtures("spark_drivers")  # its baselines are Spark jobs (tests/tiers.py)
def test_a_failure_at_any_step_of_a_destination_leaves_the_others_baselined(
    database: Database,
    make_replica: MakeReplica,
    make_pipeline_dags: MakePipelineDags,
    example_module: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Five destinations of one table, three failing at different steps: ``odd`` before the job
    (its staging table: a domain it has with another CHECK), ``viewed`` after it (the swap: a
    view of its own depends on the table it would replace), ``broken`` in ``load_baseline`` after
    reading one batch (its COPY cancelled part way); ``replica`` and ``sqlite`` (loaded after
    ``broken``, in the same snapshot) are baselined and stream to Ready."""
    replica, odd, viewed = make_replica("replica"), make_replica("odd"), make_replica("viewed")
    odd.execute("CREATE DOMAIN posint AS integer CHECK (VALUE > 10)")
    viewed.execute("CREATE TABLE items (id int)")
    viewed.execute("CREATE VIEW items_report AS SELECT count(*) FROM items")
    database.execute("CREATE DOMAIN posint AS integer CHECK (VALUE > 0)")
    database.execute("CREATE TABLE items (id int PRIMARY KEY, n posint, note text)")
    database.execute(
        "INSERT INTO items SELECT g, g, 'n' || g FROM generate_series(1, 60000) g"
    )  # > one batch
    custom = {"kind": "custom", "class": f"{example_module}.SqliteDestination", "name": "sqlite"}
    postgres = {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}
    destinations = [
        postgres,
        {**postgres, "conn_id": "pgsync_odd", "name": "odd"},
        {**postgres, "conn_id": "pgsync_viewed", "name": "viewed"},
        {
            **custom,
            "class": f"{example_module}.BrokenSqlite",
            "name": "broken",
            "path": str(tmp_path / "b.db"),
        },
        {**custom, "path": str(tmp_path / "s.db")},
    ]
    pipeline = make_pipeline_dags(["items"], destinations=destinations)
    assert str(pipeline.run("setup").state) == "success"
    capsys.readouterr()

    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())

    assert str(baseline.state) == "failed" and task_states(baseline)["baseline[0]"] == "failed"
    printed = capsys.readouterr().out
    text = _partly_failed(printed, "public.items", failed="odd", baselined="replica, sqlite", of=(3, 5))
    assert "  - destination odd: destination odd: type public.posint exists in the destination " in text
    assert "  - destination viewed: destination viewed: the baseline of public.items " in text
    assert "cannot drop table items because other objects depend on it" in text
    assert "  - destination broken: RuntimeError: the disk is full; remedy: " in text
    for name in ("replica", "sqlite"):
        assert re.search(rf"baseline public\.items: destination {name} baselined \(60,000 rows\)", printed)
    names = ("replica", "odd", "viewed", "broken", "sqlite")
    phases = _phases(pipeline, "public.items", *names)
    assert isinstance(phases["replica"], SyncDone) and isinstance(phases["sqlite"], SyncDone)
    for name, why in (
        ("odd", "another definition"),
        ("viewed", "depend on it"),
        ("broken", "the disk is full"),
    ):
        assert isinstance(phases[name], Errored) and why in phases[name].reason, (name, phases[name])
    # nothing half written: no staging table in either replica, viewed's own table as it was, and
    # broken's load rolled back
    assert _staging_tables(odd) == _staging_tables(viewed) == []
    assert viewed.execute("SELECT count(*) FROM items") == [(0,)]
    assert sqlite_text(tmp_path / "b.db", "public.items") == []

    database.execute("UPDATE items SET note = 'changed' WHERE id %% 1000 = 0")
    cdc = pipeline.run("cdc")
    assert (task_states(cdc)["apply"], str(cdc.state)) == ("failed", "failed"), task_states(cdc)
    phases = _phases(pipeline, "public.items", *names)
    assert phases["replica"] == Ready() == phases["sqlite"]
    assert all(isinstance(phases[n], Errored) for n in ("odd", "viewed", "broken"))
    assert rows(replica, "public.items") == rows(database, "public.items")
    assert sqlite_text(tmp_path / "s.db", "public.items") == source_text(database, "public.items")
