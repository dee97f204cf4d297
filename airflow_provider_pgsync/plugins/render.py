"""The status page as one HTML document with an inline SVG chart; every value from data is escaped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape

from airflow_provider_pgsync.plugins.reconciled import KINDS, Reconciled
from airflow_provider_pgsync.plugins.status import (
    DestinationRow,
    LagPoint,
    PipelineStatus,
    Problem,
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
.reconciled-equal { color: #276749; } .reconciled-different, .reconciled-error { color: #c53030; }
.problem { border-left: 4px solid #c53030; background: #fff5f5; padding: .4rem .8rem; margin: .4rem 0; }
.note { color: #4a5568; font-size: .9rem; } dl { display: grid; grid-template-columns: max-content auto; }
dt { font-weight: 600; margin-right: 1rem; } dd { margin: 0; }
svg text { font-size: 11px; fill: #4a5568; }
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _time(value: datetime | None) -> str:
    return "never" if value is None else value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def render_page(page: StatusPage) -> str:
    """The whole status page."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>pgsync status</title>',
        f"<style>{_STYLE}</style></head><body>",
        "<h1>pgsync status</h1>",
        f'<p class="note">{_e(_config_note(page))}</p>',
        render_problems(page.problems),
    ]
    parts.extend(render_pipeline(p) for p in page.pipelines)
    if not page.pipelines and not page.problems:
        parts.append(
            '<p class="note no-pipelines">No pipeline to show: the page shows a pipeline to users '
            "who may read all of its DAGs.</p>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def _config_note(page: StatusPage) -> str:
    read = f"read at {_time(page.generated_at)}."
    return f"Pipeline config {page.config_path}; {read}" if page.config_path else read.capitalize()


def render_problems(problems: Iterable[Problem]) -> str:
    """Each problem in a box: the object, what happened, and the remedy."""
    return "\n".join(
        f'<div class="problem" role="alert"><strong>{_e(p.subject)}</strong>: {_e(p.message)}'
        f'<br><span class="remedy">Remedy: {_e(p.remedy)}</span></div>'
        for p in problems
    )


def render_pipeline(status: PipelineStatus) -> str:
    """One pipeline: its problems, summary figures, tables and lag chart."""
    slot = status.slot
    facts = [
        ("Slot", status.slot_name + ("" if slot is None else f" ({slot.wal_status or 'unknown'} WAL status, "
                                     f"{'active' if slot.active else 'inactive'})")),
        ("State", f"{status.state_backend}, " + (f"version {status.state_version}" if status.state_known
                                                 else "unknown (the state store could not be read)")),
        ("Last captured LSN", (status.last_end_lsn or "none") if status.state_known else "unknown"),
        ("Last capture", _time(status.last_capture_at)),
        ("Last apply", _time(status.last_apply_at)),
        ("Current WAL LSN", "unknown" if slot is None or slot.current_lsn is None else slot.current_lsn),
        ("Slot confirmed LSN", "unknown" if slot is None or slot.confirmed_flush_lsn is None
                               else slot.confirmed_flush_lsn),
        ("Lag", _lag_text(status)),
        ("Changelog retained", f"{format_bytes(status.changelog_bytes)} in all; " + (
            f"{status.changelog_segments:,}" if status.state_known else "an unknown number of")
            + " segment(s) a destination still needs"),
    ]  # fmt: skip
    facts.append(("Last reconciliation", _reconcile_text(status)))
    for mark in status.watermarks:
        facts.append((f"Applied ({mark.destination})", mark.text if mark.lsn is None else
                      f"commit LSN {mark.lsn}, change {mark.seq}"))  # fmt: skip
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts)
    return "\n".join(
        [
            f'<section class="pipeline" data-pipeline="{_e(status.name)}">',
            f"<h2>Pipeline {_e(status.name)}</h2>",
            render_problems(status.problems),
            f"<dl>{dl}</dl>",
            f'<p class="note reconcile-note">{_e(status.reconcile.note)}</p>'
            if status.reconcile is not None and status.reconcile.note
            else "",
            render_tables(status.tables, _unreconciled(status)),
            "<h3>Lag over recent capture runs</h3>",
            render_chart(status.history),
            f'<p class="note">{_e(status.history_note)}</p>' if status.history_note else "",
            "</section>",
        ]
    )


def _reconcile_text(status: PipelineStatus) -> str:
    run = status.reconcile
    if not status.reconcile_known:
        return "unknown (see the problems above)"
    if run is None:
        return f"never reconciled (DAG pgsync_{status.name}_reconcile has recorded no result)"
    finished = _time(run.finished_at) if run.finished_at is not None else _time(run.pushed_at)
    lsn = f", source snapshot at {run.snapshot_lsn}" if run.snapshot_lsn else ""
    return f"{finished} (run {run.run_id}{lsn})"


def _unreconciled(status: PipelineStatus) -> str:
    """What a destination table without a result of its own shows."""
    if not status.reconcile_known:
        return "reconciliation unknown"
    return "never reconciled" if status.reconcile is None else "not in the last reconciliation"


def _lag_text(status: PipelineStatus) -> str:
    lag_bytes = None if status.slot is None else status.slot.lag_bytes
    text = f"{format_bytes(lag_bytes)} of WAL after the slot's confirmed position"
    if status.lag_seconds is None:
        return text + ("" if lag_bytes is None else "; time unknown (no successful capture run yet)")
    if status.lag_seconds == 0:
        return text + "; nothing pending"
    return text + f"; at most {format_seconds(status.lag_seconds)} behind (since the last capture)"


def render_tables(rows: Sequence[TableRow], unreconciled: str = "never reconciled") -> str:
    """The tables of a pipeline; an Errored table shows its reason, remedy and retry mode."""
    head = (
        "<tr><th>Table</th><th>Phase</th><th>Rows</th><th>Changelog</th><th>Destinations</th>"
        "<th>Details</th></tr>"
    )
    body = []
    for row in rows:
        rows_text = "" if row.rows is None else f"{row.rows:,}"
        if row.errored:
            details = (
                f'<span class="reason">Reason: {_e(row.reason)}</span><br>'
                f'<span class="remedy">Remedy: {_e(row.solution)}</span><br>'
                f'<span class="note">Retry: {_e(row.retry)}</span>'
            )
        else:
            details = _e(row.detail)
        renamed = (
            f'<div class="note renamed">renamed in the source to {_e(row.source_name)}</div>'
            if row.source_name
            else ""
        )
        body.append(
            f'<tr data-table="{_e(row.table)}"><td>{_e(row.table)}{renamed}</td>'
            f'<td class="phase phase-{_e(row.phase.replace(" ", "-"))}">{_e(row.phase)}</td>'
            f'<td class="num" title="{_e(row.rows_note)}">{_e(rows_text)}'
            f'<div class="note">{_e(row.rows_note)}</div></td>'
            '<td class="num changelog-bytes" title="the bytes of its segment files the changelog keeps">'
            f"{_e(format_bytes(row.changelog_bytes))}</td>"
            f"<td>{render_destinations(row.destinations, unreconciled)}</td><td>{details}</td></tr>"
        )
    return f'<table class="tables">{head}{"".join(body)}</table>'


def render_destinations(rows: Sequence[DestinationRow], unreconciled: str = "never reconciled") -> str:
    """Each destination of a table: its phase, watermark, lag, when changes were last applied and
    its last reconciliation; an Errored one its reason."""
    items = []
    for d in rows:
        mark = f"applied to {d.watermark}" if d.watermark else "nothing applied yet"
        lag = "" if d.lag_bytes is None else f", {format_bytes(d.lag_bytes)} behind capture"
        at = f"; changes last applied {_time(d.applied_at)}" if d.applied_at else ""
        text = (
            f'<li data-destination="{_e(d.name)}">{_e(d.name)}: '
            f'<span class="destination-phase phase-{_e(d.phase)}">{_e(d.phase)}</span> '
            f'<span class="note">({_e(mark)}{_e(lag)}<span class="applied-at">{_e(at)}</span>)</span>'
            f"<br>{render_reconciled(d.reconciled, unreconciled)}"
        )
        if d.phase == "Errored":
            text += (
                f'<br><span class="destination-reason">{_e(d.reason)}</span>'
                f'<br><span class="destination-remedy">Remedy: {_e(d.solution)} (retry: {_e(d.retry)})</span>'
            )
        items.append(text + "</li>")
    return f'<ul class="destinations">{"".join(items)}</ul>' if items else ""


def render_reconciled(found: Reconciled | None, unreconciled: str) -> str:
    """A destination table's last reconciliation: status, counts, sample keys, repair, reason."""
    if found is None:
        return f'<span class="reconciled reconciled-none note">{_e(unreconciled)}</span>'
    parts = [f"reconciled: {found.status}"]
    if found.source_rows is not None:
        left = f", {found.left_out:,} keys left out (changed after the snapshot)" if found.left_out else ""
        parts.append(f"{found.source_rows:,} source rows{left}")
    if found.status != "equal" and found.counts:
        parts.append(found.counts)
    samples = "".join(
        f'<li data-kind="{_e(kind)}">{_e(kind)}: {_e("; ".join(found.samples[kind]))}</li>'
        for kind in KINDS
        if found.samples.get(kind)
    )
    repair = f"repair {found.repair}" if found.repair and found.repair != "none" else ""
    tail = "".join(f"<br>{_e(t)}" for t in (repair, found.reason) if t)
    return (
        f'<span class="reconciled reconciled-{_e(found.status)}">{_e("; ".join(parts))}{tail}</span>'
        + (f'<ul class="samples">{samples}</ul>' if samples else "")
    )


def render_chart(points: Sequence[LagPoint], *, width: int = 640, height: int = 180) -> str:
    """A bar chart of lag in bytes per capture run (oldest left), as inline SVG."""
    if not points:
        return '<p class="note lag-chart-empty">No capture runs with positions yet.</p>'
    left, bottom, top = 80, 30, 10
    plot_w, plot_h = width - left - 10, height - bottom - top
    peak = max(p.lag_bytes for p in points) or 1
    slot_w = plot_w / len(points)
    bar_w = max(2.0, slot_w * 0.7)
    shapes = [
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 10}" y2="{top + plot_h}" stroke="#a0aec0"/>',
        f'<text x="{left - 6}" y="{top + 10}" text-anchor="end">{_e(format_bytes(peak))}</text>',
        f'<text x="{left - 6}" y="{top + plot_h}" text-anchor="end">0</text>',
    ]
    for i, point in enumerate(points):
        h = plot_h * point.lag_bytes / peak
        x = left + i * slot_w + (slot_w - bar_w) / 2
        shapes.append(
            f'<rect class="lag-bar" x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w:.1f}" '
            f'height="{h:.1f}" fill="#3182ce"><title>{_e(_time(point.at))} ({_e(point.run_id)}): '
            f"{_e(format_bytes(point.lag_bytes))}</title></rect>"
        )
    first, last = points[0].at, points[-1].at
    shapes.append(f'<text x="{left}" y="{height - 8}">{_e(_time(first))}</text>')
    shapes.append(f'<text x="{width - 10}" y="{height - 8}" text-anchor="end">{_e(_time(last))}</text>')
    return (
        f'<svg class="lag-chart" role="img" aria-label="slot lag in bytes per capture run" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(shapes)}</svg>'
    )
