"""The asset of every destination table is registered (active: listed on the Assets page) as soon
as the DAGs are stored, and a cdc run's asset events land on active assets; real Airflow
(``dag.test()``, its metadata database) and a real source, no Spark job (a custom destination)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.dags import table_asset
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, task_states

TABLES = ["public.items", "public.notes"]


def _assets(pipeline: str) -> dict[str, tuple[bool, list[dict[str, Any]]]]:
    """``{uri: (active, [extra of each event])}`` of the pipeline's assets in the metadata database."""
    from airflow.models.asset import AssetActive, AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        models = session.query(AssetModel).filter(AssetModel.uri.like(f"pgsync://{pipeline}/%")).all()
        found = {}
        for model in models:
            active = (
                session.query(AssetActive)
                .filter(AssetActive.name == model.name, AssetActive.uri == model.uri)
                .count()
                == 1
            )
            events = session.query(AssetEvent).filter(AssetEvent.asset_id == model.id).order_by(AssetEvent.id)
            found[model.uri] = (active, [dict(e.extra or {}) for e in events])
        return found


def test_destination_table_assets_are_active_and_get_the_cdc_runs_events(
    database: Database,
    make_pipeline_dags: MakePipelineDags,
    example_module: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
    database.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
    database.execute("INSERT INTO items SELECT g, 'n' || g FROM generate_series(1, 10) g")
    sqlite = {"kind": "custom", "class": f"{example_module}.SqliteDestination"}
    destinations = [
        {**sqlite, "name": "one", "path": str(tmp_path / "one.db")},
        {**sqlite, "name": "two", "path": str(tmp_path / "two.db")},
    ]
    pipeline = make_pipeline_dags(["items", "notes"], destinations=destinations)
    name = pipeline.config.name
    uris = {table_asset(name, d, t).uri for d in ("one", "two") for t in TABLES}

    # registered when the DAGs are stored, before any run emitted anything
    pipeline.store_dags()
    assert {uri: active for uri, (active, _) in _assets(name).items()} == dict.fromkeys(uris, True)

    assert str(pipeline.run("setup").state) == "success"
    assert str(pipeline.run("baseline", run_conf=pipeline.every_table()).state) == "success"
    database.execute("INSERT INTO items SELECT g, 'new' FROM generate_series(11, 15) g")
    with caplog.at_level(logging.WARNING):
        cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert "inactive AssetModel" not in caplog.text

    found = _assets(name)
    assert set(found) == uris, "an asset outside the destination tables"
    assert all(active for active, _ in found.values())
    # an event for each destination table with changes applied (the first run also hands the
    # tables off: every table is Ready), none for the table without changes
    for destination in ("one", "two"):
        _, events = found[table_asset(name, destination, "public.items").uri]
        assert [e["applied"] for e in events] == [5], (destination, events)
        assert events[0]["phase"] == "Ready"
        assert found[table_asset(name, destination, "public.notes").uri][1] == []
