"""The status page per destination table: when changes were last applied (the asset's latest
event), the last reconciliation (the reconcile DAG's XCom ``result``) and the changelog bytes
each table retains; from a real source, a real Airflow metadata database (tiny DAGs run with
``dag.test()`` push the XCom and emit the asset event, as the pipeline's tasks do) and a real
changelog folder. Every string from them is shown escaped."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG, task

from airflow_provider_pgsync.dags import table_asset
from airflow_provider_pgsync.plugins.access import FullAccess
from airflow_provider_pgsync.plugins.collect import collect_page
from airflow_provider_pgsync.plugins.reconciled import parse_result
from airflow_provider_pgsync.plugins.render import render_page
from airflow_provider_pgsync.plugins.status import PipelineStatus
from tests.conftest import RunDag
from tests.plugins.conftest import Shop

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
HOSTILE = "<script>alert('x')</script>"
RESULT = {
    "snapshot_lsn": "0/1A2B3C4",
    "finished_at": "2026-05-01T11:30:00+00:00",
    "tables": [
        {
            "table": "public.orders",
            "destination": "lake",
            "status": "different",
            "source_rows": 1201,
            "left_out": 2,
            "missing": 1,
            "extra": 1,
            "different": 3,
            "samples": {"missing": [{"id": "7"}], "extra": [{"id": HOSTILE}], "different": [{"id": None}]},
            "repair": "staged",
            "reason": f"differs; {HOSTILE}",
        },
        {
            "table": "public.events",
            "destination": "lake",
            "status": "equal",
            "source_rows": 0,
            "left_out": 0,
            "missing": 0,
            "extra": 0,
            "different": 0,
            "samples": {"missing": [], "extra": [], "different": []},
            "repair": "none",
            "reason": "",
        },
    ],
}


@pytest.fixture(autouse=True)
def _forget_runs(request: pytest.FixtureRequest) -> Iterator[None]:
    """The tiny DAGs' runs, XComs and asset events are deleted after each test that uses the
    metadata database (it is the session's)."""
    yield
    if "airflow_db" not in request.fixturenames:
        return
    from airflow.api.common.delete_dag import delete_dag
    from airflow.exceptions import DagNotFound
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    for dag_id in ("pgsync_shop_reconcile", "pgsync_shop_fake_apply"):
        with contextlib.suppress(DagNotFound):
            delete_dag(dag_id)
        with create_session() as session:
            session.execute(delete(AssetEvent).where(AssetEvent.source_dag_id == dag_id))


def _shop(shop: Shop) -> PipelineStatus:
    page = collect_page(str(shop.config), access=FullAccess(), now=NOW)
    return {p.name: p for p in page.pipelines}["shop"]


def _destination(status: PipelineStatus, table: str, destination: str = "lake") -> Any:
    row = {r.table: r for r in status.tables}[table]
    return {d.name: d for d in row.destinations}[destination]


def _reconcile_dag(value: Any) -> DAG:
    """``pgsync_shop_reconcile`` whose task ``reconcile`` pushes ``value`` as XCom ``result``."""
    with DAG("pgsync_shop_reconcile", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:

        @task(task_id="reconcile")
        def reconcile(**context: Any) -> None:
            context["ti"].xcom_push(key="result", value=value)

        reconcile()
    return dag


def _apply_dag() -> DAG:
    """A DAG whose task emits an event of the asset of public.orders in the shop's lake, as apply does."""
    asset = table_asset("shop", "lake", "public.orders")
    with DAG("pgsync_shop_fake_apply", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:

        @task(task_id="apply", outlets=[asset])
        def apply() -> None:
            pass

        apply()
    return dag


def test_never_reconciled_and_nothing_applied_is_said_so(shop: Shop, airflow_db: None) -> None:
    status = _shop(shop)
    assert status.reconcile is None and status.reconcile_known
    orders = _destination(status, "public.orders")
    assert orders.reconciled is None and orders.applied_at is None
    html = render_page(collect_page(str(shop.config), access=FullAccess(), now=NOW))
    assert "never reconciled (DAG pgsync_shop_reconcile has recorded no result)" in html
    section = html[html.index('data-table="public.orders"') :]
    assert "never reconciled" in section[: section.index("</tr>")]
    assert "changes last applied" not in section[: section.index("</tr>")]


def test_the_last_reconciliation_is_shown_per_destination_escaped(shop: Shop, run_dag: RunDag) -> None:
    older = {**RESULT, "finished_at": "2026-05-01T10:00:00+00:00", "tables": []}
    assert str(run_dag(_reconcile_dag(older)).state) == "success"
    assert str(run_dag(_reconcile_dag(RESULT)).state) == "success"
    status = _shop(shop)
    assert status.reconcile is not None, status.problems
    assert status.reconcile.finished_at == datetime(2026, 5, 1, 11, 30, tzinfo=UTC)  # the latest run's
    assert status.reconcile.snapshot_lsn == "0/1A2B3C4"
    orders = _destination(status, "public.orders").reconciled
    assert (orders.status, orders.missing, orders.extra, orders.different) == ("different", 1, 1, 3)
    assert orders.samples["extra"] == (f"id={HOSTILE}",) and orders.samples["different"] == ("id=NULL",)
    assert _destination(status, "public.events").reconciled.status == "equal"
    assert _destination(status, "public.customers").reconciled is None

    html = render_page(collect_page(str(shop.config), access=FullAccess(), now=NOW))
    assert "<script>" not in html and "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "2026-05-01 11:30:00 UTC (run manual__" in html and "source snapshot at 0/1A2B3C4" in html
    row = html[html.index('data-table="public.orders"') :]
    row = row[: row.index("</tr>")]
    assert 'class="reconciled reconciled-different"' in row
    assert "reconciled: different; 1,201 source rows, 2 keys left out" in row
    assert "1 missing, 1 extra, 3 different" in row and "repair staged" in row
    assert '<li data-kind="missing">missing: id=7</li>' in row
    customers = html[html.index('data-table="public.customers"') :]
    assert "not in the last reconciliation" in customers[: customers.index("</tr>")]


def test_applied_time_per_destination_is_the_assets_last_event(shop: Shop, run_dag: RunDag) -> None:
    run = run_dag(_apply_dag())
    assert str(run.state) == "success"
    status = _shop(shop)
    applied = _destination(status, "public.orders").applied_at
    assert applied is not None and run.start_date <= applied <= datetime.now(UTC)
    assert _destination(status, "public.events").applied_at is None
    html = render_page(collect_page(str(shop.config), access=FullAccess(), now=NOW))
    row = html[html.index('data-table="public.orders"') :]
    assert f"changes last applied {applied:%Y-%m-%d %H:%M:%S}" in row[: row.index("</tr>")]


def test_changelog_bytes_retained_per_table(shop: Shop, airflow_db: None, tmp_path: Path) -> None:
    root = tmp_path / "changelog" / "shop"
    files = {
        "public.orders/v0001/0000000001000000-0000000001000100-0000.parquet": 1000,
        "public.orders/v0002/0000000001000200-0000000001000300-0000.parquet": 234,
        "public.events/v0001/0000000001000000-0000000001000100-0000.parquet": 500,
        "public.events/v0001/not-a-segment.txt": 99,  # not counted: not a segment's name
    }
    for path, size in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"x" * size)
    status = _shop(shop)
    retained = {r.table: r.changelog_bytes for r in status.tables}
    assert retained == {"public.orders": 1234, "public.customers": 0, "public.events": 500}
    assert status.changelog_bytes == 1734
    html = render_page(collect_page(str(shop.config), access=FullAccess(), now=NOW))
    row = html[html.index('data-table="public.orders"') :]
    assert '<td class="num changelog-bytes"' in row and "1.2 KiB</td>" in row[: row.index("</tr>")]


def test_a_result_of_the_wrong_shape_is_a_note_not_an_error() -> None:
    assert parse_result("oops", "r1", None).note.startswith("the result of reconcile run r1 is not a mapping")
    run = parse_result({"tables": [{"table": "public.t"}, 7, RESULT["tables"][1]]}, "r2", None)
    assert list(run.results) == [("public.events", "lake")]
    assert run.note == "2 entries of the result could not be read"
    odd = parse_result(
        {"finished_at": "yesterday", "tables": [{**RESULT["tables"][0], "missing": -1, "samples": "x"}]},
        "r3",
        None,
    )
    assert odd.finished_at is None
    found = odd.results[("public.orders", "lake")]
    assert found.missing is None and found.samples == {"missing": (), "extra": (), "different": ()}
    assert found.counts == "1 extra, 3 different"


def test_bytes_by_table_follow_the_changelogs_folder_names() -> None:
    from airflow_provider_pgsync.changelog.paths import segment_path
    from airflow_provider_pgsync.plugins.collect import bytes_by_table
    from airflow_provider_pgsync.source.names import TableRef

    odd, dotted = TableRef("My Schema", "Odd/Name"), TableRef("a.b", "c")
    sizes = {
        segment_path(odd, 1, 1, 2, 0): 10,
        segment_path(odd, 2, 3, 4, 1): 5,
        segment_path(dotted, 1, 1, 2, 0): 7,
        segment_path(TableRef("a", "b.c"), 1, 1, 2, 0): 1000,  # another table, not listed
    }
    assert bytes_by_table(sizes, [str(odd), str(dotted), "public.none"]) == {
        str(odd): 15,
        str(dotted): 7,
        "public.none": 0,
    }
