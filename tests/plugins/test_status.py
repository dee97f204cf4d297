"""The status page's view model and HTML, from real states on the test database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.plugins.access import FullAccess
from airflow_provider_pgsync.plugins.collect import collect_page
from airflow_provider_pgsync.plugins.render import render_chart, render_page
from airflow_provider_pgsync.plugins.status import (
    NOT_SET_UP,
    UNKNOWN,
    lag_history,
    lag_seconds,
    parse_watermark,
    row_estimate,
    table_rows,
)
from airflow_provider_pgsync.state import Backfill, DataSync, Init, PipelineState, Ready, SyncDone
from tests.plugins.conftest import ERROR_REASON, ERROR_REMEDY, Shop

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
FULL = FullAccess()


def test_collect_reads_state_source_and_config(shop: Shop, airflow_db: None) -> None:
    page = collect_page(str(shop.config), access=FULL, now=NOW)
    assert not page.problems
    status = {p.name: p for p in page.pipelines}["shop"]
    assert not status.problems, status.problems
    rows = {r.table: r for r in status.tables}
    assert [r.table for r in status.tables] == ["public.orders", "public.customers", "public.events"]
    assert rows["public.orders"].phase == "Ready"
    assert rows["public.orders"].rows == 1200 and "estimate" in rows["public.orders"].rows_note
    assert rows["public.customers"].errored
    assert (rows["public.customers"].reason, rows["public.customers"].solution) == (
        ERROR_REASON,
        ERROR_REMEDY,
    )
    assert rows["public.events"].phase == "SyncDone" and rows["public.events"].rows is None
    assert "ANALYZE public.events" in rows["public.events"].rows_note
    assert status.state_version == shop.state.version and status.last_end_lsn == shop.state.last_end_lsn
    assert [(w.destination, w.lsn, w.seq) for w in status.watermarks] == [
        ("lake", shop.state.last_end_lsn, 3)
    ]
    assert status.slot is not None and status.slot.lag_bytes is not None and status.slot.lag_bytes > 0
    assert status.slot.confirmed_flush_lsn is not None and status.slot.current_lsn is not None
    assert status.slot.lag_bytes == status.slot.current_lsn - status.slot.confirmed_flush_lsn
    # no capture run yet: the time lag is unknown and the chart has no points, and says why
    assert status.last_capture_at is None and status.lag_seconds is None
    assert status.history == () and "no capture run" in status.history_note


def test_unreachable_source_is_a_problem_of_its_own(shop: Shop, airflow_db: None) -> None:
    page = collect_page(str(shop.config), access=FULL, now=NOW)
    offline = {p.name: p for p in page.pipelines}["offline"]
    subjects = [p.subject for p in offline.problems]
    assert subjects[:2] == ["source of pipeline offline", "state of pipeline offline"]
    unreachable = offline.problems[0]
    assert unreachable.message.startswith(f"source unreachable: {shop.offline_conn_id}, ")
    assert "Connection refused" in unreachable.message  # the driver's error, with host and port
    assert unreachable.remedy.startswith("check that the source server runs")
    assert f"Airflow connection {shop.offline_conn_id!r} points at it" in unreachable.remedy
    # the Variables store needs no source to load: nothing is saved for this pipeline, and setting
    # it up waits for the source
    assert "no state is saved" in offline.problems[1].message
    assert offline.problems[1].remedy.startswith(
        "once the source is reachable, run the DAG pgsync_offline_setup"
    )
    assert [(r.phase, r.detail) for r in offline.tables] == [
        (NOT_SET_UP, "run the pipeline's setup DAG once the source is reachable")
    ]
    assert offline.tables[0].rows_note == "unknown: the source could not be read"
    html = render_page(page)
    assert "Traceback" not in html and f"source unreachable: {shop.offline_conn_id}, " in html


def _config_with_unreachable_source(shop: Shop, state: str) -> str:
    """The shop's config with its source at the offline connection and its state where ``state`` says."""
    text = shop.config.read_text().replace(
        "source_conn_id: pgsync_source", f"source_conn_id: {shop.offline_conn_id}", 1
    )
    text = text.replace("state: {backend: postgres}", f"state: {state}", 1)
    config = shop.config.with_name("unreachable.yaml")
    config.write_text(text)
    return str(config)


def test_unreachable_source_still_shows_the_phases_from_a_reachable_state_store(
    shop: Shop, source_conn_id: str, airflow_db: None
) -> None:
    config = _config_with_unreachable_source(shop, f"{{backend: postgres, conn_id: {source_conn_id}}}")
    status = {p.name: p for p in collect_page(config, access=FULL, now=NOW).pipelines}["shop"]
    assert [p.subject for p in status.problems] == ["source of pipeline shop"]
    assert status.problems[0].message.startswith(f"source unreachable: {shop.offline_conn_id}, ")
    assert [(r.table, r.phase) for r in status.tables] == [
        ("public.orders", "Ready"),
        ("public.customers", "Errored"),
        ("public.events", "SyncDone"),
    ]
    assert status.tables[1].reason == ERROR_REASON
    assert all(
        r.rows is None and r.rows_note == "unknown: the source could not be read" for r in status.tables
    )
    assert status.state_version == shop.state.version and status.slot is None
    html = render_page(collect_page(config, access=FULL, now=NOW))
    section = html[html.index('data-pipeline="shop"') :]
    section = section[: section.index("</section>")]
    assert "setup" not in section  # no advice to set up a pipeline whose tables are Ready
    assert "does not exist" not in section  # nor that its slot is gone: it is unknown


def test_unreachable_source_holding_the_state_shows_unknown_phases(shop: Shop, airflow_db: None) -> None:
    config = _config_with_unreachable_source(shop, "{backend: postgres}")
    page = collect_page(config, access=FULL, now=NOW)
    status = {p.name: p for p in page.pipelines}["shop"]
    assert [p.subject for p in status.problems] == ["source of pipeline shop", "state of pipeline shop"]
    assert "the tables' phases are unknown" in status.problems[1].message
    assert [r.phase for r in status.tables] == [UNKNOWN] * 3
    assert not status.state_known
    html = render_page(page)
    section = html[html.index('data-pipeline="shop"') :]
    section = section[: section.index("</section>")]
    assert "setup" not in section and "not set up" not in section
    assert "postgres, unknown (the state store could not be read)" in section


def test_state_saved_nowhere_says_to_run_setup(shop: Shop, database: object, airflow_db: None) -> None:
    text = shop.config.read_text().replace("name: shop", "name: fresh").replace("changelog/shop", "cl/fresh")
    config = shop.config.with_name("fresh.yaml")
    config.write_text(text)
    status = {p.name: p for p in collect_page(str(config), access=FULL, now=NOW).pipelines}["fresh"]
    problems = {p.subject: p for p in status.problems}
    assert "run the DAG pgsync_fresh_setup" in problems["state of pipeline fresh"].remedy
    assert "replication slot pgsync_fresh" in problems


def test_config_problems_name_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGSYNC_CONFIG", raising=False)
    page = collect_page(access=FULL, now=NOW)
    assert page.problems[0].subject == "pipeline config" and "PGSYNC_CONFIG" in page.problems[0].remedy
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipelines: [{name: x}]\n")
    page = collect_page(str(bad), access=FULL, now=NOW)
    assert page.problems[0].subject == f"pipeline config {bad}"
    assert "source_conn_id" in page.problems[0].message


def test_html_escapes_data(shop: Shop, airflow_db: None) -> None:
    html = render_page(collect_page(str(shop.config), access=FULL, now=NOW))
    assert "<b>price</b>" not in html and "&lt;b&gt;price&lt;/b&gt;" in html
    assert 'data-table="public.customers"' in html and "Remedy: ALTER the destination column" in html


# ---- pure rules -------------------------------------------------------------------------------


def test_table_rows_keep_config_order_and_show_tables_the_config_lost() -> None:
    state = PipelineState("p").with_table_phase("public.gone", Init())
    rows = table_rows(["public.a"], state, {"public.a": 10.4, "public.gone": None})
    assert [(r.table, r.phase, r.rows, r.in_config) for r in rows] == [
        ("public.a", NOT_SET_UP, 10, True),
        ("public.gone", "Init", None, False),
    ]
    assert "no longer in the config" in rows[1].detail
    assert row_estimate("public.a", None) == (None, "unknown: the source could not be read")


def test_a_pending_backfill_is_shown_with_what_it_waits_for() -> None:
    state = PipelineState("p").with_table_phase("public.a", Init()).with_table_phase("public.a", DataSync())
    state = state.with_table_phase("public.a", SyncDone("s", LSN.parse("0/10"), 5, 5))
    state = state.with_table_phase("public.a", Ready())
    backfill = Backfill("b7", "id > 3", "s2", LSN.parse("0/20"), 6, 6, (), {"lake": "/b7"}, rows=1234)
    [row] = table_rows(["public.a"], state.with_backfill("public.a", backfill), {})
    assert row.phase == "Ready"
    assert row.detail == "backfill b7 (id > 3, 1,234 rows) waits for apply into lake once capture passes 0/20"


def test_watermark_and_lag_seconds() -> None:
    assert parse_watermark("lake", "0/16B3748/7") == parse_watermark("lake", "0/16B3748/7")
    mark = parse_watermark("lake", "0/16B3748/7")
    assert (mark.lsn, mark.seq) == (LSN.parse("0/16B3748"), 7)
    assert parse_watermark("pg", "none").lsn is None
    assert lag_seconds(0, None, NOW) == 0.0
    assert lag_seconds(10, None, NOW) is None
    assert lag_seconds(10, NOW - timedelta(minutes=3), NOW) == 180.0


def test_lag_history_uses_positions_and_says_which_runs_had_none() -> None:
    runs = [
        (NOW, "r3", {"start_lsn": "0/100", "upto_lsn": "0/300", "changes": 4}),
        (NOW - timedelta(minutes=5), "r2", {"changes": 1, "advanced_to": "0/100"}),
        (NOW - timedelta(minutes=10), "r1", {"start_lsn": "0/0", "upto_lsn": "0/80"}),
    ]
    points, note = lag_history(runs)
    assert [(p.run_id, p.lag_bytes) for p in points] == [("r1", 0x80), ("r3", 0x200)]
    assert note.startswith("1 capture run(s) returned no start_lsn and upto_lsn")
    svg = render_chart(points)
    assert svg.count('class="lag-bar"') == 2 and svg.startswith("<svg")
    assert "No capture runs" in render_chart(())


def test_each_destination_of_a_table_shows_its_phase_watermark_and_lag() -> None:
    from airflow_provider_pgsync.plugins.render import render_tables
    from airflow_provider_pgsync.state import Errored

    done = SyncDone("s", LSN(0x100), 5, 9, lineage="L1")
    state = PipelineState("p", last_end_lsn=LSN(0x1000)).with_table_phase("public.t", Init())
    for name in ("lake", "replica"):
        state = state.with_destination_phase("public.t", name, DataSync("L1"))
        state = state.with_destination_phase("public.t", name, done)
    state = state.with_destination_phase("public.t", "lake", Ready())
    state = state.with_destination_watermark("public.t", "lake", "0/F00/2")
    state = state.with_destination_phase("public.t", "replica", Errored("replica lost rows", "rebaseline it"))

    (row,) = table_rows(["public.t"], state, {}, ["lake", "replica", "archive"])

    assert row.phase == "Errored"  # the worst destination
    shown = {d.name: d for d in row.destinations}
    assert [d.name for d in row.destinations] == ["lake", "replica", "archive"]
    assert (shown["lake"].phase, shown["lake"].watermark, shown["lake"].lag_bytes) == (
        "Ready",
        "0/F00/2",
        0x100,
    )
    assert (shown["replica"].phase, shown["replica"].reason) == ("Errored", "replica lost rows")
    assert shown["replica"].lag_bytes is None  # nothing applied there yet
    assert shown["archive"].phase == "Init"  # configured, never baselined
    html = render_tables([row])
    assert 'data-destination="replica"' in html and "Remedy: rebaseline it" in html
    assert "applied to 0/F00/2" in html and "256 B behind capture" in html


def test_a_table_renamed_in_the_source_is_shown_under_the_pipelines_name_with_the_mapping() -> None:
    from airflow_provider_pgsync.plugins.render import render_tables
    from airflow_provider_pgsync.source.names import TableRef

    state = PipelineState("p").with_table_phase("public.s", Init()).with_table_phase("public.s", DataSync())
    state = state.with_table_source("public.s", 42, TableRef("public", "s_new"))
    # the config may name the table by its old or its new name: one row, in the config, either way
    for name in ("public.s", "public.s_new"):
        (row,) = table_rows([name], state, {name: 12.0})
        assert (row.table, row.source_name, row.phase, row.in_config) == (
            "public.s",
            "public.s_new",
            "DataSync",
            True,
        )
    assert row.rows == 12
    html = render_tables([row])
    assert 'public.s<div class="note renamed">renamed in the source to public.s_new</div>' in html
    (row,) = table_rows(["public.s"], state, {"public.s": None})
    assert row.rows is None and "now public.s_new in the source" in row.rows_note


def test_a_table_dropped_in_the_source_is_flagged_with_what_its_destinations_keep() -> None:
    from airflow_provider_pgsync.plugins.render import render_tables
    from airflow_provider_pgsync.state.model import SourceDrop

    done = SyncDone("s", LSN(0x100), 5, 9, lineage="L1")
    state = PipelineState("p", last_end_lsn=LSN(0x1000)).with_table_phase("public.t", Init())
    state = state.with_destination_phase("public.t", "replica", DataSync("L1"))
    state = state.with_destination_phase("public.t", "replica", done)
    state = state.with_destination_phase("public.t", "replica", Ready())
    state = state.with_table_source("public.t", 42, state.table("public.t").table)
    drop = SourceDrop(42, LSN(0xF00))
    state = state.with_capture(LSN(0x1000), (), [state.table("public.t").with_dropped(drop)])
    assert PipelineState.from_json(state.to_json()) == state

    # a table of that name on the source now is another one: its estimate is not this table's
    (row,) = table_rows(["public.t"], state, {"public.t": 77.0}, ["replica"])
    assert (row.phase, row.rows) == ("Ready", None)
    assert row.dropped == "dropped in the source at 0/F00 (relation OID 42)"
    assert row.rows_note == "no such table on the source: it was dropped there"
    assert "its destinations keep its rows as of the drop" in row.detail
    assert "teardown DAG with param tables [public.t]" in row.detail
    html = render_tables([row])
    assert '<div class="dropped" title="dropped in the source at 0/F00 (relation OID 42)">' in html
    # taken out of the config: still flagged, and the teardown named
    (row,) = table_rows([], state, {}, ["replica"])
    assert not row.in_config and row.dropped and row.detail.startswith("dropped in the source at 0/F00")
    assert "no longer in the config: run the teardown DAG with param tables [public.t]" in row.detail
    # found by the catalog (no DDL trigger): at or before the capture's bound
    found = SourceDrop(42, LSN(0xF00), exact=False)
    assert found.describe() == "dropped in the source at or before 0/F00 (relation OID 42)"
