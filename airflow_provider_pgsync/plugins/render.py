"""The status page as one HTML document with an inline SVG chart, from the Jinja2 template
``templates/status.html`` with autoescaping on: every value from data is escaped. This module
holds the texts and figures the template shows (pure functions of the view model)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, Template, select_autoescape
from markupsafe import Markup

from airflow_provider_pgsync.plugins.reconciled import KINDS, Reconciled
from airflow_provider_pgsync.plugins.status import (
    DestinationRow,
    LagPoint,
    PipelineStatus,
    StatusPage,
    TableRow,
    format_bytes,
    format_seconds,
)

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1rem 1.5rem; color: #1a202c; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { border: 1px solid #cbd5e0; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #edf2f7; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.phase, .destination-phase { font-weight: 600; } .destination-reason { color: #c53030; }
ul.destinations { margin: 0; padding-left: 1rem; }
.phase-Ready { color: #276749; } .phase-Errored { color: #c53030; }
.dropped { color: #c05621; font-weight: 600; font-size: .9rem; }
.reconciled-equal { color: #276749; } .reconciled-different, .reconciled-error { color: #c53030; }
.problem { border-left: 4px solid #c53030; background: #fff5f5; padding: .4rem .8rem; margin: .4rem 0; }
.note { color: #4a5568; font-size: .9rem; } dl { display: grid; grid-template-columns: max-content auto; }
dt { font-weight: 600; margin-right: 1rem; } dd { margin: 0; }
svg text { font-size: 11px; fill: #4a5568; }
"""


def _time(value: datetime | None) -> str:
    return "never" if value is None else value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


@cache
def _template() -> Template:
    env = Environment(
        loader=PackageLoader("airflow_provider_pgsync.plugins", "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(bytes=format_bytes, time=_time)
    env.globals.update(
        kinds=KINDS,
        style=Markup(_STYLE),  # a constant of this module, not data
        config_note=config_note,
        pipeline_facts=pipeline_facts,
        unreconciled_text=unreconciled_text,
        reconciled_summary=reconciled_summary,
        chart_view=chart_view,
    )
    return env.get_template("status.html")


def _macro(name: str, *args: Any) -> str:
    return str(getattr(_template().module, name)(*args))


def render_page(page: StatusPage) -> str:
    """The whole status page."""
    return _template().render(page=page)


def render_tables(rows: Sequence[TableRow], unreconciled: str = "never reconciled") -> str:
    """The tables of a pipeline; an Errored table shows its reason, remedy and retry mode."""
    return _macro("tables", rows, unreconciled)


def render_destinations(rows: Sequence[DestinationRow], unreconciled: str = "never reconciled") -> str:
    """Each destination of a table: its phase, watermark, lag, when changes were last applied and
    its last reconciliation; an Errored one its reason."""
    return _macro("destinations", rows, unreconciled)


def render_chart(points: Sequence[LagPoint]) -> str:
    """A bar chart of lag in bytes per capture run (oldest left), as inline SVG."""
    return _macro("chart", chart_view(points))


# ---- what the template shows ------------------------------------------------------------------


def config_note(page: StatusPage) -> str:
    read = f"read at {_time(page.generated_at)}."
    return f"Pipeline config {page.config_path}; {read}" if page.config_path else read.capitalize()


def pipeline_facts(status: PipelineStatus) -> list[tuple[str, str]]:
    """The summary figures of a pipeline, ``(label, text)``."""
    slot = status.slot
    facts = [
        ("Slot", status.slot_name + ("" if slot is None else f" ({slot.wal_status or 'unknown'} WAL status, "
                                     f"{'active' if slot.active else 'inactive'})")),
        ("State", f"{status.state_backend}, " + (f"version {status.state_version}" if status.state_known
                                                 else "unknown (the state store could not be read)")),
        ("Last captured LSN", str(status.last_end_lsn or "none") if status.state_known else "unknown"),
        ("Last capture", _time(status.last_capture_at)),
        ("Last apply", _time(status.last_apply_at)),
        ("Current WAL LSN", "unknown" if slot is None or slot.current_lsn is None else str(slot.current_lsn)),
        ("Slot confirmed LSN", "unknown" if slot is None or slot.confirmed_flush_lsn is None
                               else str(slot.confirmed_flush_lsn)),
        ("Lag", lag_text(status)),
        ("Changelog retained", f"{format_bytes(status.changelog_bytes)} in all; " + (
            f"{status.changelog_segments:,}" if status.state_known else "an unknown number of")
            + " segment(s) a destination still needs"),
        ("Last reconciliation", reconcile_text(status)),
    ]  # fmt: skip
    for mark in status.watermarks:
        facts.append((f"Applied ({mark.destination})", mark.text if mark.lsn is None else
                      f"commit LSN {mark.lsn}, change {mark.seq}"))  # fmt: skip
    return facts


def reconcile_text(status: PipelineStatus) -> str:
    """When the last reconciliation finished, its run and snapshot; or why there is none."""
    run = status.reconcile
    if not status.reconcile_known:
        return "unknown (see the problems above)"
    if run is None:
        return f"never reconciled (DAG pgsync_{status.name}_reconcile has recorded no result)"
    finished = _time(run.finished_at) if run.finished_at is not None else _time(run.pushed_at)
    lsn = f", source snapshot at {run.snapshot_lsn}" if run.snapshot_lsn else ""
    return f"{finished} (run {run.run_id}{lsn})"


def unreconciled_text(status: PipelineStatus) -> str:
    """What a destination table without a result of its own shows."""
    if not status.reconcile_known:
        return "reconciliation unknown"
    return "never reconciled" if status.reconcile is None else "not in the last reconciliation"


def reconciled_summary(found: Reconciled) -> str:
    """``reconciled: different; 1,201 source rows, 2 keys left out (...); 1 missing, ...``."""
    parts = [f"reconciled: {found.status}"]
    if found.source_rows is not None:
        left = f", {found.left_out:,} keys left out (changed after the snapshot)" if found.left_out else ""
        parts.append(f"{found.source_rows:,} source rows{left}")
    if found.status != "equal" and found.counts:
        parts.append(found.counts)
    return "; ".join(parts)


def lag_text(status: PipelineStatus) -> str:
    lag_bytes = None if status.slot is None else status.slot.lag_bytes
    text = f"{format_bytes(lag_bytes)} of WAL after the slot's confirmed position"
    if status.lag_seconds is None:
        return text + ("" if lag_bytes is None else "; time unknown (no successful capture run yet)")
    if status.lag_seconds == 0:
        return text + "; nothing pending"
    return text + f"; at most {format_seconds(status.lag_seconds)} behind (since the last capture)"


@dataclass(frozen=True)
class Bar:
    """One capture run's bar in the chart (coordinates as the SVG shows them)."""

    point: LagPoint
    x: str
    y: str
    width: str
    height: str


@dataclass(frozen=True)
class ChartView:
    """The lag chart's geometry: the plot's box, the peak lag, the bars, the first and last time."""

    width: int
    height: int
    left: int
    right: int
    top: int
    axis_y: int
    peak: int
    bars: tuple[Bar, ...]
    first: datetime
    last: datetime


def chart_view(points: Sequence[LagPoint], *, width: int = 640, height: int = 180) -> ChartView | None:
    """The chart of ``points`` (oldest left); None when there is no point."""
    if not points:
        return None
    left, bottom, top = 80, 30, 10
    plot_w, plot_h = width - left - 10, height - bottom - top
    peak = max(p.lag_bytes for p in points) or 1
    slot_w = plot_w / len(points)
    bar_w = max(2.0, slot_w * 0.7)
    bars = []
    for i, point in enumerate(points):
        h = plot_h * point.lag_bytes / peak
        x = left + i * slot_w + (slot_w - bar_w) / 2
        bars.append(Bar(point, f"{x:.1f}", f"{top + plot_h - h:.1f}", f"{bar_w:.1f}", f"{h:.1f}"))
    return ChartView(
        width, height, left, width - 10, top, top + plot_h, peak, tuple(bars), points[0].at, points[-1].at
    )
