"""A pipeline ``shop`` on the test database for the status page: source tables, a slot, a saved
state (PostgreSQL backend) with a Ready, an Errored and a SyncDone table, and a config file
that also holds a pipeline ``offline`` whose source cannot be reached.

``team_dags``: Airflow teams (multi-team mode) owning the DAG bundles that hold each pipeline's
DAGs, so that an auth manager lets a team's users read only their pipeline's DAGs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state import DataSync, Errored, Init, PipelineState, Ready, SyncDone
from tests.conftest import Database, free_port

ERROR_REASON = "column <b>price</b> changed type from numeric to text"
ERROR_REMEDY = "ALTER the destination column, then rebaseline public.customers"


@dataclass
class Shop:
    """The prepared pipeline: its config file and the state as saved."""

    config: Path
    state: PipelineState
    offline_conn_id: str


def shop_state(slot_lsn: LSN) -> PipelineState:
    """The state of pipeline ``shop``: orders Ready, customers Errored, events SyncDone."""
    baseline = SyncDone(snapshot="00000003-00000002-1", baseline_lsn=LSN.parse("0/1000"), xmin=10, xmax=12)
    state = PipelineState("shop").with_slot("pgsync_shop", slot_lsn)
    for table in ("public.orders", "public.customers", "public.events"):
        state = state.with_table_phase(table, Init())
    for table in ("public.orders", "public.events"):
        state = state.with_table_phase(table, DataSync()).with_table_phase(table, baseline)
    state = state.with_table_phase("public.orders", Ready())
    state = state.with_table_phase("public.customers", Errored(ERROR_REASON, ERROR_REMEDY, retry="manual"))
    return state.with_capture(slot_lsn).with_watermark("lake", f"{slot_lsn}/3")


CONFIG = """
pipelines:
  - name: shop
    source_conn_id: {source}
    tables: [orders, customers, events]
    state: {{backend: postgres}}
    changelog: {{uri: {root}/changelog/shop}}
  - name: offline
    source_conn_id: {offline}
    tables: [orders]
    changelog: {{uri: {root}/changelog/offline}}
"""


@pytest.fixture
def shop(database: Database, source_conn_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Shop:
    """The ``shop`` pipeline set up on the test database, and its config file (also PGSYNC_CONFIG)."""
    database.execute("CREATE TABLE orders (id int PRIMARY KEY, note text)")
    database.execute("CREATE TABLE customers (id int PRIMARY KEY, name text)")
    database.execute("CREATE TABLE events (id int PRIMARY KEY)")
    database.execute("INSERT INTO orders SELECT g, 'n' FROM generate_series(1, 1200) g")
    database.execute("INSERT INTO customers SELECT g, 'c' FROM generate_series(1, 30) g")
    database.execute("ANALYZE orders")
    database.execute("ANALYZE customers")  # events stays never analyzed
    row = database.execute(
        "SELECT lsn::text FROM pg_create_logical_replication_slot('pgsync_shop', 'pgoutput')"
    )
    saved = PostgresStateStore(database.connect).save(shop_state(LSN.parse(str(row[0][0]))))
    database.execute("INSERT INTO orders VALUES (5000, 'after the capture')")  # some lag
    offline = "pgsync_offline"
    # a port nothing listens on: the connection is refused at once
    monkeypatch.setenv(f"AIRFLOW_CONN_{offline.upper()}", f"postgresql://nobody@127.0.0.1:{free_port()}/none")
    config = tmp_path / "pgsync.yaml"
    config.write_text(CONFIG.format(source=source_conn_id, offline=offline, root=tmp_path))
    monkeypatch.setenv("PGSYNC_CONFIG", str(config))
    return Shop(config, saved, offline)


TEAMS = {"shop": "team_shop", "offline": "team_other"}
"""The team owning each pipeline's DAGs (through the DAG bundle that holds them)."""


@pytest.fixture
def team_dags(shop: Shop, airflow_db: None) -> Iterator[dict[str, list[str]]]:
    """Every DAG of each pipeline of the shop's config, built by the DAG factory and stored like the
    DAG processor stores it in a bundle owned by the pipeline's team (``TEAMS``); yields the DAG ids
    by pipeline. Teams, bundles and DAGs are deleted from the session's metadata DB after."""
    from airflow.api.common.delete_dag import delete_dag
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    from airflow_provider_pgsync.dags import build_dags
    from airflow_provider_pgsync.pipeline import pipelines_from

    configs = {c.name: c for c in pipelines_from(shop.config)}
    with create_session() as session:
        for team_name in TEAMS.values():
            team = Team(name=team_name)
            bundle = DagBundleModel(name=f"{team_name}_dags")
            bundle.teams = [team]
            session.add_all([team, bundle])
    dag_ids: dict[str, list[str]] = {}
    try:
        for name, team_name in TEAMS.items():
            dags = build_dags(configs[name])
            dag_ids[name] = list(dags)
            bag = DagBag(dag_folder=os.devnull, collect_dags=False)
            for dag in dags.values():
                bag.bag_dag(dag)
            sync_bag_to_db(bag, f"{team_name}_dags", None)
        yield dag_ids
    finally:
        for ids in dag_ids.values():
            for dag_id in ids:
                delete_dag(dag_id)
        with create_session() as session:
            names = list(TEAMS.values())
            session.execute(
                delete(DagBundleModel).where(DagBundleModel.name.in_([f"{n}_dags" for n in names]))
            )
            session.execute(delete(Team).where(Team.name.in_(names)))
