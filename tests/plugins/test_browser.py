"""The status page in a real browser: a real ``airflow api-server`` with the plugin, headless Chromium.

The API server runs in its own AIRFLOW_HOME (a tmp folder whose ``plugins/`` imports the
plugin class) on the tests' metadata database, with the SimpleAuthManager letting everyone
in as admin. Screenshots go to ``.dev/screenshots/`` (ignored by git).

The lag chart reads the XCom return values (``start_lsn``, ``upto_lsn``) of ``capture`` runs
of ``pgsync_shop_cdc``. This test runs a stand-in of that DAG whose ``capture`` returns given
positions the way the real capture operator does: the real cdc DAG would move the shop's
saved state and apply into a lake (a Spark job per run).

The trigger form is the one of the real baseline DAG of pipeline ``shop``, built by the DAG
factory from the shop's config and stored in the metadata database like the DAG processor
does (not run): its fields are the Params of ``dags.params.baseline_params``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import REPO, Database, RunDag, free_port
from tests.plugins.conftest import ERROR_REASON, ERROR_REMEDY, TEAMS, Shop

if TYPE_CHECKING:
    from airflow_provider_pgsync.pipeline import PipelineConfig

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = REPO / ".dev" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _wait_healthy(base: str, server: subprocess.Popen[bytes], log: Path, deadline_s: float = 180) -> None:
    """Poll the health endpoint until it answers 200, the server exits or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    last = ""
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"airflow api-server exited with {server.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=0.25)  # doubles as the poll interval; returns early if it exits
    pytest.fail(
        f"airflow api-server did not get healthy in {deadline_s:.0f} s ({last}):\n{log.read_text()[-4000:]}"
    )


@contextlib.contextmanager
def _api_server(shop: Shop, tmp_path: Path, auth: dict[str, str]) -> Iterator[str]:
    """A running ``airflow api-server`` with the plugin and the auth settings ``auth``; yields its URL."""
    from airflow import settings

    home = tmp_path / "airflow-home"
    (home / "plugins").mkdir(parents=True)
    (home / "dags").mkdir()
    (home / "plugins" / "pgsync_status.py").write_text(
        "from airflow_provider_pgsync.plugins.plugin import PgsyncStatusPlugin  # noqa: F401\n"
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=str(settings.SQL_ALCHEMY_CONN),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(home / "plugins"),
        AIRFLOW__CORE__AUTH_MANAGER="airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
        PGSYNC_CONFIG=str(shop.config),
        **auth,
    )
    log = tmp_path / "api-server.log"
    airflow = Path(sys.executable).with_name("airflow")
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(airflow), "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, server, log)
        yield base
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()


@pytest.fixture
def api_server(shop: Shop, airflow_db: None, tmp_path: Path) -> Iterator[str]:
    """A running ``airflow api-server`` with the plugin, everyone in as admin; yields its base URL."""
    with _api_server(shop, tmp_path, {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}) as base:
        yield base


PASSWORDS = {"alice": "alice-secret-1", "bob": "bob-secret-2"}
USERS = {"alice": TEAMS["shop"], "bob": TEAMS["offline"]}
"""Two viewers of the multi-team server, by the team whose pipeline's DAGs they may read."""


@pytest.fixture
def team_api_server(shop: Shop, team_dags: dict[str, list[str]], tmp_path: Path) -> Iterator[str]:
    """A running ``airflow api-server`` with the plugin in multi-team mode: the SimpleAuthManager's
    users ``USERS`` (viewers, each in one team), who log in with ``PASSWORDS``; yields its base URL."""
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    passwords.chmod(0o600)
    auth = {
        "AIRFLOW__CORE__MULTI_TEAM": "True",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:viewer:{t}" for u, t in USERS.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
    }
    with _api_server(shop, tmp_path, auth) as base:
        yield base


def _cdc_stand_in(positions: list[tuple[str, str]]) -> Any:
    """A DAG ``pgsync_shop_cdc`` whose ``capture`` returns the given (start, upto) positions in turn."""
    from airflow.sdk import DAG, task

    with DAG("pgsync_shop_cdc", schedule=None) as dag:

        @task(task_id="capture")
        def capture(**context: Any) -> dict[str, Any]:
            start, upto = positions.pop(0)
            return {"changes": 1, "start_lsn": start, "upto_lsn": upto, "advanced_to": upto}

        @task(task_id="apply")
        def apply() -> None:
            return None

        capture() >> apply()
    return dag


@dataclass
class BaselineDag:
    """The shop's baseline DAG as stored in the metadata database, and the pipeline's config."""

    dag_id: str
    config: PipelineConfig


def _check_baseline_trigger_form(page: Any, base: str, baseline: BaselineDag) -> None:
    """Open the baseline DAG's trigger form and check it shows the Params of ``baseline_params``."""
    from playwright.sync_api import expect

    from airflow_provider_pgsync.dags.params import baseline_params

    params = baseline_params(baseline.config)
    page.goto(f"{base}/dags/{baseline.dag_id}")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(baseline.dag_id, timeout=30_000)

    def row(name: str) -> Any:
        """The form row of param ``name``: its label, its field (id ``element_<name>``), its help."""
        return dialog.get_by_role("group").filter(has=page.locator(f"#element_{name}"))

    row("tables").wait_for(timeout=30_000)  # the form is drawn once the DAG's params are loaded
    for name, param in params.items():
        # the label is the title, with a red * after required ones (hidden from the accessible name)
        expect(row(name).locator("label")).to_have_text(
            re.compile(rf"^{re.escape(param.schema['title'])}\s*\*?$")
        )
        expect(row(name).locator('[data-part="helper-text"]')).to_have_text(param.description)

    # nothing is chosen: tables is an empty multi-select, mode an empty select, and Airflow's
    # Trigger button stays disabled until both are chosen
    tables = row("tables").locator("#element_tables")
    chosen = tables.locator('input[name="element_tables"]')  # a hidden input per chip: the value sent
    assert not params["tables"].has_value and not params["mode"].has_value
    expect(tables.get_by_label(re.compile(r"^Remove "))).to_have_count(0)
    expect(chosen).to_have_value("")  # react-select keeps one empty hidden input
    mode = row("mode").locator("#element_mode")
    modes = params["mode"].schema["enum"]
    expect(mode.locator('input[name="element_mode"]')).to_have_value("")
    expect(row("backfill_filter").locator("#element_backfill_filter")).to_have_value("")
    trigger = dialog.get_by_role("button", name="Trigger")
    expect(trigger).to_be_disabled()
    page.screenshot(path=str(SCREENSHOTS / "baseline-trigger-form.png"), full_page=True)

    # mode: its options are the param's enum, none selected; one can be chosen
    mode.get_by_role("combobox").click()
    expect(mode.get_by_role("option")).to_have_text(modes)
    expect(mode.get_by_role("option", selected=True)).to_have_count(0)
    mode.get_by_role("option", name="backfill", exact=True).click()
    expect(mode.get_by_role("option")).to_have_count(0)  # the menu closed
    expect(mode.locator('input[name="element_mode"]')).to_have_value("backfill")
    expect(trigger).to_be_disabled()  # no table yet

    # tables: the menu offers all the config's tables, in config order; one can be chosen
    tables.get_by_role("combobox").click()
    expect(tables.get_by_role("option")).to_have_text(list(baseline.config.table_keys))
    first = baseline.config.table_keys[0]
    tables.get_by_role("option", name=first, exact=True).click()
    expect(tables.get_by_label(f"Remove {first}", exact=True)).to_be_visible()
    expect(trigger).to_be_enabled()


def _chromium() -> str:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install it with `make deps` (or: apt-get install chromium)")
    return CHROMIUM


@pytest.fixture
def cdc_dag_runs(airflow_db: None) -> Iterator[str]:
    """The id of the stand-in cdc DAG; its runs and XComs are deleted from the session's metadata DB after."""
    from airflow.api.common.delete_dag import delete_dag
    from airflow.exceptions import DagNotFound

    yield "pgsync_shop_cdc"
    with contextlib.suppress(DagNotFound):  # the test failed before running it
        delete_dag("pgsync_shop_cdc")


@pytest.fixture
def baseline_dag(shop: Shop, airflow_db: None) -> Iterator[BaselineDag]:
    """The shop's real baseline DAG (from the DAG factory), stored in the session's metadata DB
    like the DAG processor stores it, without running it; deleted from there after."""
    from airflow.api.common.delete_dag import delete_dag
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    from airflow_provider_pgsync.dags import build_dags, dag_id
    from airflow_provider_pgsync.pipeline import pipelines_from

    (config,) = (c for c in pipelines_from(shop.config) if c.name == "shop")
    baseline_id = dag_id(config.name, "baseline")
    bag = DagBag(dag_folder=os.devnull, collect_dags=False)
    bag.bag_dag(build_dags(config)[baseline_id])
    sync_bag_to_db(bag, "dags-folder", None)
    try:
        yield BaselineDag(baseline_id, config)
    finally:
        delete_dag(baseline_id)


@pytest.mark.slow
def test_status_page_in_chromium(
    shop: Shop,
    database: Database,
    run_dag: RunDag,
    cdc_dag_runs: str,
    baseline_dag: BaselineDag,
    api_server: str,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import sync_playwright

    wal = [str(database.execute("SELECT pg_current_wal_lsn()::text")[0][0])]
    database.execute("INSERT INTO customers SELECT g, 'x' FROM generate_series(100, 2000) g")
    wal.append(str(database.execute("SELECT pg_current_wal_lsn()::text")[0][0]))
    dag = _cdc_stand_in([(wal[0], wal[0]), (wal[0], wal[1])])
    now = datetime.now(UTC)
    run_dag(dag, logical_date=now - timedelta(minutes=10))
    run_dag(dag, logical_date=now - timedelta(minutes=5))

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    profile = tmp_path / "chromium-profile"
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(profile), executable_path=_chromium(), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 1000},
        )  # fmt: skip
        try:
            page = browser.new_page()
            response = page.goto(f"{api_server}/pgsync/status")
            assert response is not None and response.status == 200, response and response.text()
            shop_section = page.locator('section[data-pipeline="shop"]')
            assert shop_section.locator('tr[data-table="public.orders"] .phase').inner_text() == "Ready"
            errored = shop_section.locator('tr[data-table="public.customers"]')
            assert errored.locator(".phase").inner_text() == "Errored"
            assert errored.locator(".reason").inner_text() == f"Reason: {ERROR_REASON}"
            assert errored.locator(".remedy").inner_text() == f"Remedy: {ERROR_REMEDY}"
            assert shop_section.locator("svg.lag-chart rect.lag-bar").count() == 2
            assert "Last capture" in shop_section.inner_text()
            offline = page.locator('section[data-pipeline="offline"]')
            assert "source unreachable: pgsync_offline, " in offline.locator(".problem").first.inner_text()
            assert "Traceback" not in page.content()
            page.screenshot(path=str(SCREENSHOTS / "pgsync-status.png"), full_page=True)

            # the same page in the Airflow UI: the menu entry's route shows it in an iframe
            page.goto(f"{api_server}/plugin/pgsync-status")
            frame = page.frame_locator("iframe")
            frame.locator('section[data-pipeline="shop"]').wait_for(timeout=30_000)
            assert frame.locator('tr[data-table="public.customers"] .phase').inner_text() == "Errored"
            page.screenshot(path=str(SCREENSHOTS / "pgsync-status-in-ui.png"), full_page=True)

            _check_baseline_trigger_form(page, api_server, baseline_dag)
        finally:
            browser.close()
    shutil.rmtree(profile, ignore_errors=True)


def _token(base: str, user: str) -> str:
    """A JWT of ``user`` from the SimpleAuthManager's token endpoint (as an API client logs in)."""
    body = json.dumps({"username": user, "password": PASSWORDS[user]}).encode()
    request = urllib.request.Request(
        f"{base}/auth/token", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.load(response)["access_token"])


def _fetch(url: str, token: str) -> str:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return str(response.read().decode())


@pytest.mark.slow
def test_two_roles_see_different_pipelines_in_chromium(
    shop: Shop, team_dags: dict[str, list[str]], team_api_server: str
) -> None:
    from playwright.sync_api import expect, sync_playwright

    base = team_api_server
    status_url = f"{base}/pgsync/status"
    # no session: an API client gets 401, not the page
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(status_url, timeout=30)
    assert denied.value.code == 401
    assert b"shop" not in denied.value.read()
    # an API client with a bearer token gets the page of its user; a forged token gets nothing
    assert _fetch(status_url, _token(base, "bob")).count("data-pipeline=") == 1
    assert "shop" not in _fetch(status_url, _token(base, "bob"))
    assert 'data-pipeline="shop"' in _fetch(status_url, _token(base, "alice"))
    with pytest.raises(urllib.error.HTTPError) as forged:
        _fetch(status_url, _token(base, "alice")[:-4] + "AAAA")
    assert forged.value.code == 403

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), headless=True, args=CHROMIUM_ARGS)
        try:
            for user, sees, never in (("alice", "shop", "offline"), ("bob", "offline", "shop")):
                context = browser.new_context(viewport={"width": 1280, "height": 1000})
                page = context.new_page()
                # no session: a browser is sent to Airflow's login form, which sends it back after
                page.goto(status_url)
                expect(page.get_by_role("button", name="Sign in")).to_be_visible(timeout=30_000)
                assert "/pgsync/status" not in page.url.split("?")[0]
                assert "data-pipeline" not in page.content()
                page.get_by_label("Username").fill(user)
                page.get_by_label("Password").fill(PASSWORDS[user])
                page.get_by_role("button", name="Sign in").click()
                page.wait_for_url(status_url, timeout=30_000)
                html = page.content()
                assert f'data-pipeline="{sees}"' in html, f"{user} does not see {sees!r}:\n{html}"
                sections = page.locator("section.pipeline").all()
                assert [section.get_attribute("data-pipeline") for section in sections] == [sees]
                assert never not in html, f"{user} sees {never!r} on the status page"
                page.screenshot(path=str(SCREENSHOTS / f"pgsync-status-{user}.png"), full_page=True)
                if user == "alice":
                    shop_section = page.locator('section[data-pipeline="shop"]')
                    orders = shop_section.locator('tr[data-table="public.orders"]')
                    assert orders.locator(".phase").inner_text() == "Ready"
                    errored = shop_section.locator('tr[data-table="public.customers"]')
                    assert errored.locator(".reason").inner_text() == f"Reason: {ERROR_REASON}"
                    # the same in the Airflow UI: the iframe's request carries the session cookie too
                    page.goto(f"{base}/plugin/pgsync-status")
                    frame = page.frame_locator("iframe")
                    frame.locator('section[data-pipeline="shop"]').wait_for(timeout=30_000)
                    expect(frame.locator('section[data-pipeline="offline"]')).to_have_count(0)
                else:
                    problem = page.locator('section[data-pipeline="offline"] .problem').first
                    assert problem.inner_text().startswith(
                        f"source of pipeline offline: source unreachable: {shop.offline_conn_id}, "
                    )
                context.close()
        finally:
            browser.close()
