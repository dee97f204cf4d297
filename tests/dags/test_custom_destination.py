"""A pipeline whose only destination is a custom one (the SQLite example of
docs/writing-a-destination.md), from its config through the drop-in DAGs: setup, baseline
(no Spark job), cdc; the SQLite tables equal the source as text and every table is Ready."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_pgsync.state.model import Ready, SyncDone
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, task_states
from tests.support.sqlite_destination import source_text, sqlite_text

TABLES = ["public.items", "public.notes"]


@pytest.mark.slow
def test_a_pipeline_with_a_custom_destination_only_runs_its_dags_without_spark(
    database: Database,
    make_pipeline_dags: MakePipelineDags,
    example_module: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2), ok boolean)")
    database.execute("CREATE TABLE notes (id int PRIMARY KEY, body text, at timestamptz)")
    database.execute(
        "INSERT INTO items SELECT g, 'item ' || g, g * 1.5, g %% 2 = 0 FROM generate_series(1, 200) g"
    )
    database.execute("INSERT INTO notes SELECT g, md5(g::text), now() FROM generate_series(1, 100) g")
    path = tmp_path / "dest.sqlite"
    sqlite = {
        "kind": "custom",
        "class": f"{example_module}.SqliteDestination",
        "name": "sqlite",
        "path": str(path),
    }
    pipeline = make_pipeline_dags(["items", "notes"], destinations=[sqlite])
    assert set(pipeline.dags) == {
        f"pgsync_{pipeline.config.name}_{k}" for k in ("setup", "baseline", "cdc", "reconcile", "teardown")
    }

    assert str(pipeline.run("setup").state) == "success"
    baseline = pipeline.run("baseline", run_conf=pipeline.every_table())
    assert task_states(baseline)["baseline[0]"] == "success", task_states(baseline)
    assert task_states(baseline)["baseline[1]"] == "success", task_states(baseline)
    results = {r["table"]: r for r in baseline.get_task_instances()[0].xcom_pull(task_ids="baseline")}
    assert {t: r["rows"] for t, r in results.items()} == {"public.items": 200, "public.notes": 100}
    assert all(isinstance(pipeline.state().table(t).phase, SyncDone) for t in TABLES)
    printed = capsys.readouterr().out
    assert "no Spark job" in printed and "Spark-Submit cmd" not in printed

    database.execute("INSERT INTO items SELECT g, 'new ' || g, g, NULL FROM generate_series(201, 230) g")
    database.execute("UPDATE items SET price = price * 2 WHERE id %% 7 = 0")
    database.execute("DELETE FROM items WHERE id BETWEEN 50 AND 59")
    database.execute("UPDATE notes SET body = 'edited' WHERE id <= 5")
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    for table in TABLES:
        assert sqlite_text(path, table) == source_text(database, table), table
        assert pipeline.state().table(table).destination("sqlite").phase == Ready()
