"""The status page's view model: pure values, and the rules that derive them from state and facts.

Where each figure comes from (``collect`` reads them):

- phase, reason, remedy: the pipeline state (``PipelineState.tables``); a table's phase is
  the worst of its destinations', each of which is shown with its own phase, watermark (as
  apply last recorded it) and lag (bytes of WAL between the last captured position and it);
  a table dropped in the source is flagged "dropped in the source" (``TableState.dropped``)
- a destination table's last applied time: the latest event of its asset (apply emits one
  when it applied changes there); its last reconciliation: the latest XCom ``result`` of the
  pipeline's reconcile DAG (``reconciled``)
- row count: the source's planner estimate, ``pg_class.reltuples`` (summed over the leaf
  partitions of a partitioned table); -1 there means never vacuumed or analyzed
- last captured LSN: ``PipelineState.last_end_lsn``; last applied LSN: each destination's
  watermark (``commit_lsn/seq``) in ``PipelineState.watermarks``
- last capture / apply time: the end date of the latest successful ``capture`` / ``apply``
  task instance of the pipeline's cdc DAG (state records no times)
- lag in bytes: ``pg_current_wal_lsn() - confirmed_flush_lsn`` of the slot; lag in seconds:
  an upper bound, the time since the last successful capture while that lag is not zero
- changelog retained: the segments the state lists (a destination still needs them) and the
  bytes of every segment file kept (those, and the ones kept for the retention), in all and
  per table (the files in the table's folder of the changelog)
- lag history: the XCom return values of recent capture runs, when they carry the positions
  of the run (``start_lsn``, ``upto_lsn``); see ``lag_history``
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.plugins.reconciled import Reconciled, ReconcileRun
from airflow_provider_pgsync.state.model import Errored, PipelineState, SyncDone, TableState

NOT_SET_UP = "not set up"
"""The phase shown for a configured table that the state does not hold (yet)."""

UNKNOWN = "unknown"
"""The phase shown for every table when the state store cannot be read."""

HISTORY_KEYS = ("start_lsn", "upto_lsn")
"""The keys a capture run's XCom return value needs to give a point of the lag chart."""


@dataclass(frozen=True)
class Problem:
    """Something the page could not read or found wrong: the object, what happened, the remedy."""

    subject: str
    message: str
    remedy: str


@dataclass(frozen=True)
class DestinationRow:
    """One table in one destination: its phase, the watermark apply last recorded, how far it
    is behind what capture has (``lag_bytes``; None when either position is unknown), when
    changes were last applied to it (``applied_at``) and its last reconciliation."""

    name: str
    phase: str
    watermark: str = ""
    lag_bytes: int | None = None
    reason: str = ""
    solution: str = ""
    retry: str = ""
    applied_at: datetime | None = None
    reconciled: Reconciled | None = None


@dataclass(frozen=True)
class TableRow:
    """One table of a pipeline as the page shows it.

    ``rows`` is the source's estimate (None when unknown; ``rows_note`` says why).
    """

    table: str
    phase: str
    rows: int | None = None
    rows_note: str = ""
    detail: str = ""
    reason: str = ""
    solution: str = ""
    retry: str = ""
    in_config: bool = True
    destinations: tuple[DestinationRow, ...] = ()
    source_name: str = ""
    """The table's name in the source when it was renamed there (the pipeline keeps ``table``)."""
    changelog_bytes: int | None = None
    """The bytes of the table's segment files in the changelog (None: unknown)."""
    dropped: str = ""
    """Where the table was dropped in the source (``SourceDrop.describe``); "" while it exists."""

    @property
    def errored(self) -> bool:
        return self.phase == Errored.kind


@dataclass(frozen=True)
class Watermark:
    """A destination's watermark: the last applied commit LSN and the change's position in it."""

    destination: str
    text: str
    lsn: LSN | None = None
    seq: int | None = None


@dataclass(frozen=True)
class SlotStatus:
    """The pipeline's slot as the source reports it."""

    slot_name: str
    active: bool
    wal_status: str | None
    current_lsn: LSN | None
    confirmed_flush_lsn: LSN | None
    lag_bytes: int | None


@dataclass(frozen=True)
class LagPoint:
    """The slot's lag when one capture run started: WAL between its start and its bound."""

    at: datetime
    run_id: str
    lag_bytes: int


@dataclass(frozen=True)
class PipelineStatus:
    """Everything the page shows about one pipeline."""

    name: str
    slot_name: str
    state_backend: str
    tables: tuple[TableRow, ...] = ()
    state_version: int = 0
    last_end_lsn: LSN | None = None
    watermarks: tuple[Watermark, ...] = ()
    slot: SlotStatus | None = None
    last_capture_at: datetime | None = None
    last_apply_at: datetime | None = None
    lag_seconds: float | None = None
    history: tuple[LagPoint, ...] = ()
    history_note: str = ""
    problems: tuple[Problem, ...] = ()
    changelog_segments: int = 0
    changelog_bytes: int | None = None
    """The bytes of every segment file the changelog keeps (None: its storage could not be read)."""
    state_known: bool = True
    """False when the state store could not be read: the state figures are unknown, not empty."""
    reconcile: ReconcileRun | None = None
    """The latest reconciliation (None: never reconciled; unknown when ``reconcile_known`` is False)."""
    reconcile_known: bool = True


@dataclass(frozen=True)
class DestinationFacts:
    """What the page knows of the tables in their destinations beyond the state, by
    ``(table, destination)``: when changes were last applied, the last reconciliation; and by
    table the changelog bytes retained (None: unknown)."""

    applied_at: Mapping[tuple[str, str], datetime] = field(default_factory=dict)
    reconciled: Mapping[tuple[str, str], Reconciled] = field(default_factory=dict)
    retained: Mapping[str, int] | None = None


@dataclass(frozen=True)
class StatusPage:
    """The whole page: every pipeline of the config, and problems of the config itself."""

    generated_at: datetime
    config_path: str
    pipelines: tuple[PipelineStatus, ...] = ()
    problems: tuple[Problem, ...] = field(default_factory=tuple)


# ---- rules ----------------------------------------------------------------------------------


def table_rows(
    config_tables: Sequence[str],
    state: PipelineState | None,
    estimates: Mapping[str, float | None] | None = None,
    destinations: Sequence[str] = (),
    facts: DestinationFacts | None = None,
) -> tuple[TableRow, ...]:
    """The configured tables in config order, then tables the state holds that the config lost.

    ``state`` None means the state store could not be read: every table's phase is unknown
    (never "not set up", which would advise running the setup DAG for tables that may be Ready).
    ``estimates`` maps a table key to ``pg_class.reltuples`` (None: no such table on the
    source); a missing mapping means the source could not be asked. ``destinations`` are the
    configured destinations' names (each table shows each of them, and any other the state has).
    A config may name a table renamed in the source by its new name: it is the state's table
    that records that source name, shown under the pipeline's name with the mapping.
    ``facts``: applied times, reconciliations and changelog bytes (none known by default).
    """
    facts = facts or DestinationFacts()
    if state is None:
        detail = "the state store could not be read (see the problems above), so the phase is unknown"
        return tuple(
            TableRow(
                key,
                UNKNOWN,
                *row_estimate(key, estimates),
                detail=detail,
                changelog_bytes=_retained(facts, key),
            )
            for key in config_tables
        )
    by_source = {str(ts.source_name): ts.key for ts in state.tables.values() if ts.source_name}
    configured = [k if k in state.tables else by_source.get(k, k) for k in config_tables]
    estimated = dict(estimates or {})
    for name, key in zip(config_tables, configured, strict=True):
        if estimates is not None and name in estimates:
            estimated[key] = estimates[name]  # the estimate of the name the config gives
    keys = configured + [k for k in state.tables if k not in configured]
    rows = []
    for key in keys:
        found = estimated if estimates is not None else None
        row = _table_row(key, state, found, destinations, facts, in_config=key in configured)
        rows.append(dataclasses.replace(row, changelog_bytes=_retained(facts, key)))
    return tuple(rows)


def _retained(facts: DestinationFacts, key: str) -> int | None:
    return None if facts.retained is None else facts.retained.get(key, 0)


def destination_rows(
    ts: TableState, state: PipelineState, names: Sequence[str], facts: DestinationFacts | None = None
) -> tuple[DestinationRow, ...]:
    """The table in each destination ``names``, then in any other the state holds."""
    facts = facts or DestinationFacts()
    shown = list(names) + [n for n in sorted(ts.destinations) if n not in names]
    rows = []
    for name in shown:
        held = ts.destination(name)
        mark = parse_watermark(name, held.watermark) if held.watermark else None
        lag = None
        if mark is not None and mark.lsn is not None and state.last_end_lsn is not None:
            lag = max(0, state.last_end_lsn - mark.lsn)
        phase = held.phase
        errored = (phase.reason, phase.solution, phase.retry) if isinstance(phase, Errored) else ("", "", "")
        at, reconciled = facts.applied_at.get((ts.key, name)), facts.reconciled.get((ts.key, name))
        rows.append(DestinationRow(name, phase.kind, held.watermark or "", lag, *errored, at, reconciled))
    return tuple(rows)


def _table_row(
    key: str,
    state: PipelineState,
    estimates: Mapping[str, float | None] | None,
    destinations: Sequence[str],
    facts: DestinationFacts,
    *,
    in_config: bool,
) -> TableRow:
    count, note = row_estimate(key, estimates)
    ts = state.tables.get(key)
    if ts is None:
        # estimates None: the source could not be read, and the setup DAG would fail on it too
        setup = "run the pipeline's setup DAG"
        setup += " once the source is reachable" if estimates is None else ""
        return TableRow(key, NOT_SET_UP, count, note, detail=setup)
    per_destination = destination_rows(ts, state, destinations, facts)
    renamed = str(ts.source_name) if ts.source_name else ""
    if renamed and count is None and estimates is not None:
        note = f"not estimated: the config names {key}, now {renamed} in the source"
    dropped = ts.dropped.describe() if ts.dropped is not None else ""
    if dropped:  # a table of that name now, if any, is another one
        count, note = None, "no such table on the source: it was dropped there"
    phase = ts.phase
    detail = ""
    if isinstance(phase, SyncDone):
        detail = f"baseline at {phase.baseline_lsn}; Ready once every destination applied past it"
    if ts.backfill is not None:
        b = ts.backfill
        detail = (
            f"backfill {b.id} ({b.condition or 'all rows'}, {b.rows:,} rows) waits for apply into "
            f"{', '.join(b.pending)} once capture passes {b.baseline_lsn}"
        )
    teardown = (
        f"the teardown DAG with param tables [{key}] (and drop_tables to drop its destination tables too)"
    )
    if dropped:
        detail = (
            f"{dropped}: nothing more is captured of it, and its destinations keep its rows as of the "
            f"drop; to take it out of the pipeline, remove it from the config, run the setup DAG, then "
            f"{teardown}"
        )
    if not in_config:
        detail = f"in the state but no longer in the config: run {teardown}, or add the table back"
        detail = f"{dropped}; {detail}" if dropped else detail
    if isinstance(phase, Errored):
        return TableRow(
            key,
            phase.kind,
            count,
            note,
            detail,
            phase.reason,
            phase.solution,
            phase.retry,
            in_config,
            per_destination,
            renamed,
            dropped=dropped,
        )
    return TableRow(
        key,
        phase.kind,
        count,
        note,
        detail,
        in_config=in_config,
        destinations=per_destination,
        source_name=renamed,
        dropped=dropped,
    )


def row_estimate(key: str, estimates: Mapping[str, float | None] | None) -> tuple[int | None, str]:
    """The estimated row count of a table and a note on it (how it was counted, or why it is unknown)."""
    if estimates is None:
        return None, "unknown: the source could not be read"
    if key not in estimates or estimates[key] is None:
        return None, "no such table on the source"
    value = estimates[key]
    assert value is not None
    if value < 0:
        return None, f"never analyzed: run ANALYZE {key}"
    return round(value), "estimate (pg_class.reltuples)"


def parse_watermark(destination: str, text: str) -> Watermark:
    """A watermark text ``X/Y/seq`` (what apply records); anything else is kept as text only."""
    lsn_text, _, seq_text = text.rpartition("/")
    try:
        return Watermark(destination, text, LSN.parse(lsn_text), int(seq_text))
    except (ConfigError, ValueError):
        return Watermark(destination, text)


def watermarks(state: PipelineState) -> tuple[Watermark, ...]:
    """The state's destination watermarks, by destination name."""
    return tuple(parse_watermark(name, state.watermarks[name]) for name in sorted(state.watermarks))


def lag_seconds(lag_bytes: int | None, last_capture_at: datetime | None, now: datetime) -> float | None:
    """An upper bound of the lag in time: nothing pending is 0 s; else the time since the last capture.

    Everything up to the slot's confirmed position was captured by then, so what is pending
    was written after it. None when either figure is unknown.
    """
    if lag_bytes is None:
        return None
    if lag_bytes <= 0:
        return 0.0
    if last_capture_at is None:
        return None
    return max(0.0, (now - last_capture_at).total_seconds())


def lag_history(runs: Iterable[tuple[datetime, str, Any]]) -> tuple[tuple[LagPoint, ...], str]:
    """Points of the lag chart from capture runs ``(start date, run id, XCom return value)``, oldest
    first, and a note when some or all runs carry no positions."""
    points = []
    without = 0
    for at, run_id, value in runs:
        point = _lag_point(at, run_id, value)
        if point is None:
            without += 1
        else:
            points.append(point)
    points.sort(key=lambda p: p.at)
    note = ""
    if without:
        note = (
            f"{without} capture run(s) returned no {' and '.join(HISTORY_KEYS)} in their XCom, so they "
            "give no point: the capture operator must return the run's start and bound positions"
        )
    return tuple(points), note


def _lag_point(at: datetime, run_id: str, value: Any) -> LagPoint | None:
    if not isinstance(value, Mapping) or not all(isinstance(value.get(k), str) for k in HISTORY_KEYS):
        return None
    try:
        start, upto = LSN.parse(value["start_lsn"]), LSN.parse(value["upto_lsn"])
    except ConfigError:
        return None
    return LagPoint(at, run_id, max(0, upto - start))


def format_bytes(value: int | None) -> str:
    """``1.5 MiB``-style text of a byte count ("unknown" for None)."""
    if value is None:
        return "unknown"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{value:,} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def format_seconds(value: float | None) -> str:
    """``2 h 5 min``-style text of a duration ("unknown" for None)."""
    if value is None:
        return "unknown"
    seconds = round(value)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"
