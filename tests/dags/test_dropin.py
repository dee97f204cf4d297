"""The drop-in DAG file ``dags/pgsync.py`` as Airflow's DagBag imports it: the example YAML
next to it, a config named by ``$PGSYNC_CONFIG``, and a broken config."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO

DAGS = REPO / "dags"
KINDS = ("setup", "baseline", "cdc", "compact", "reconcile", "teardown")


def _bag() -> object:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_the_example_config_gives_the_five_dags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGSYNC_CONFIG", raising=False)
    bag = _bag()
    assert bag.import_errors == {}  # type: ignore[attr-defined]
    assert set(bag.dag_ids) == {f"pgsync_shop_{kind}" for kind in KINDS}  # type: ignore[attr-defined]
    setup = bag.dags["pgsync_shop_setup"]  # type: ignore[attr-defined]
    assert setup.get_task("preflight").postgres_conn_id == "shop_db"
    assert setup.fileloc == str(DAGS / "pgsync.py")


def test_pgsync_config_names_another_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "mine.yaml"
    config.write_text(
        "pipelines:\n"
        "  - {name: billing, source_conn_id: billing_db, tables: [invoices], schedules: {cdc: '@hourly'}}\n"
        "  - {name: crm, source_conn_id: crm_db, tables: [accounts],\n"
        "     destinations: [{kind: postgres, conn_id: replica_db}]}\n"
    )
    monkeypatch.setenv("PGSYNC_CONFIG", str(config))
    bag = _bag()
    assert bag.import_errors == {}  # type: ignore[attr-defined]
    expected = {f"pgsync_billing_{kind}" for kind in KINDS} | {
        "pgsync_crm_setup", "pgsync_crm_baseline", "pgsync_crm_cdc", "pgsync_crm_reconcile",
        "pgsync_crm_teardown",
    }  # fmt: skip
    assert set(bag.dag_ids) == expected  # type: ignore[attr-defined]
    assert getattr(bag.dags["pgsync_billing_cdc"].timetable, "expression", None) == "0 * * * *"  # type: ignore[attr-defined]


def test_a_broken_config_is_an_import_error_naming_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text(
        "name: shop\nsource_conn_id: shop_db\ntables: [orders]\nschedules: {cdc: '@sometimes'}\n"
    )
    monkeypatch.setenv("PGSYNC_CONFIG", str(config))
    bag = _bag()
    assert bag.dag_ids == []  # type: ignore[attr-defined]
    [error] = bag.import_errors.values()  # type: ignore[attr-defined]
    assert "schedules.cdc" in error and "@sometimes" in error and str(config) in error
