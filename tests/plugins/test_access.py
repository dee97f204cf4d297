"""Who sees which pipeline on the status page: Airflow's auth manager decides, per user, from the
permissions on each pipeline's DAGs (here: teams owning the DAG bundles, multi-team mode)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from airflow_provider_pgsync.pipeline import PipelineConfig
from airflow_provider_pgsync.plugins.access import AuthManagerAccess, FullAccess, pipeline_dag_ids
from airflow_provider_pgsync.plugins.collect import collect_page
from airflow_provider_pgsync.plugins.render import render_page
from tests.plugins.conftest import ERROR_REASON, TEAMS, Shop

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@dataclass
class OnlyPipelines:
    """Access to the named pipelines; records which pipelines it was asked about."""

    names: set[str]
    config: bool = False
    asked: list[str] = field(default_factory=list)

    def may_read_pipeline(self, config: PipelineConfig) -> bool:
        self.asked.append(config.name)
        return config.name in self.names

    def may_read_config(self) -> bool:
        return self.config


def _html_of(shop: Shop, access: object) -> str:
    return render_page(collect_page(str(shop.config), access=access, now=NOW))  # type: ignore[arg-type]


def test_a_pipeline_the_user_may_not_read_is_left_out_entirely(shop: Shop, airflow_db: None) -> None:
    access = OnlyPipelines({"offline"})
    page = collect_page(str(shop.config), access=access, now=NOW)
    assert [p.name for p in page.pipelines] == ["offline"]
    assert sorted(access.asked) == ["offline", "shop"]
    html = render_page(page)
    # nothing of it: name, slot, tables, error; the config path is hidden too (it is the deployment's)
    for shown in ("shop", "public.customers", "price", ERROR_REASON, str(shop.config)):
        assert shown not in html, shown
    assert 'data-pipeline="offline"' in html

    nothing = _html_of(shop, OnlyPipelines(set()))
    assert "shop" not in nothing and "offline" not in nothing
    assert "No pipeline to show" in nothing

    everything = _html_of(shop, FullAccess())
    assert 'data-pipeline="shop"' in everything and str(shop.config) in everything
    assert "No pipeline to show" not in everything


def test_config_errors_are_detailed_only_to_config_readers(shop: Shop) -> None:
    broken = shop.config.with_name("broken.yaml")
    broken.write_text("pipelines: [{name: secret_pipeline}]\n")
    hidden = render_page(collect_page(str(broken), access=OnlyPipelines(set()), now=NOW))
    assert "secret_pipeline" not in hidden and str(broken) not in hidden
    assert "the pipeline config cannot be loaded" in hidden and "Airflow admin" in hidden
    shown = render_page(collect_page(str(broken), access=OnlyPipelines(set(), config=True), now=NOW))
    assert str(broken) in shown and "source_conn_id" in shown


def test_dag_ids_are_the_factorys(shop: Shop) -> None:
    from airflow_provider_pgsync.dags.factory import pipeline_dags
    from airflow_provider_pgsync.pipeline import pipelines_from

    configs = pipelines_from(shop.config)
    assert configs
    for config in configs:
        assert set(pipeline_dag_ids(config)) == {d.dag_id for d in pipeline_dags(config)}
    no_lake = pipelines_from({"pipelines": [{"name": "p", "source_conn_id": "c", "tables": ["t"],
                                             "destinations": [{"name": "r", "kind": "postgres",
                                                               "conn_id": "r"}]}]})  # fmt: skip
    assert [d.dag_id for d in pipeline_dags(no_lake[0])] == list(pipeline_dag_ids(no_lake[0]))


@pytest.fixture
def simple_auth_manager(monkeypatch: pytest.MonkeyPatch) -> object:
    """Airflow's SimpleAuthManager in multi-team mode (its users may belong to teams)."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    return SimpleAuthManager()


def test_each_user_sees_the_pipelines_whose_dags_their_team_may_read(
    shop: Shop, team_dags: dict[str, list[str]], simple_auth_manager: object
) -> None:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    def seen(user: SimpleAuthManagerUser) -> list[str]:
        access = AuthManagerAccess(user, simple_auth_manager)  # type: ignore[arg-type]
        page = collect_page(str(shop.config), access=access, now=NOW)
        return [p.name for p in page.pipelines]

    shop_viewer = SimpleAuthManagerUser(username="alice", role="viewer", teams=[TEAMS["shop"]])
    other_viewer = SimpleAuthManagerUser(username="bob", role="viewer", teams=[TEAMS["offline"]])
    no_team = SimpleAuthManagerUser(username="carol", role="viewer", teams=[])
    admin = SimpleAuthManagerUser(username="root", role="admin")
    assert seen(shop_viewer) == ["shop"]
    assert seen(other_viewer) == ["offline"]
    assert seen(no_team) == []
    assert seen(admin) == ["shop", "offline"]

    # all of a pipeline's DAGs: one of them in another team's bundle hides the pipeline
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    (cdc,) = (d for d in team_dags["shop"] if d.endswith("_cdc"))
    with create_session() as session:
        session.get(DagModel, cdc).bundle_name = f"{TEAMS['offline']}_dags"  # type: ignore[union-attr]
    assert seen(shop_viewer) == []
    assert seen(other_viewer) == ["offline"]
    html = render_page(
        collect_page(str(shop.config), access=AuthManagerAccess(other_viewer, simple_auth_manager), now=NOW)  # type: ignore[arg-type]
    )
    assert "shop" not in html.replace(str(shop.config), "")
