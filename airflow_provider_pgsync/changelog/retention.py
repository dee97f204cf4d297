"""Retention: which changelog segments every destination is done with (DESIGN §3, pure decisions).

The state lists only the segments a destination may still read, so its size follows the
destinations' lag, not the history; a segment no destination needs leaves the state at once
(``unneeded_segments``), and its file is deleted once it is older than the retention
(``expired_files``: until then it stays for a replay by hand). A destination of a table
still reads a segment when it is:

- Ready (or Errored, to resume in Ready): it reads after its watermark, so it needs every
  segment whose last commit LSN is not below the watermark's (a destination part-way
  through a transaction still needs its segment); with no watermark recorded, everything;
- SyncDone (or Errored, to resume there): the same once it has a watermark; before, its
  hand-off reads the segments that can hold a transaction its snapshot did not see
  (``handoff_segments``);
- DataSync: a baseline is running and its snapshot is not recorded yet: everything;
- Init, and Errored for good (retry ``none``): nothing (the next baseline's snapshot sees
  every transaction captured so far);
- a pending backfill keeps the segments that can hold transactions its snapshot did not see.

The watermarks are those apply recorded in the state, never ahead of the destinations' own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from airflow_provider_pgsync.changelog.prune import may_hold_unseen
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.destination import DestinationState
from airflow_provider_pgsync.state.model import PipelineState, SegmentInfo, TableState
from airflow_provider_pgsync.state.phases import DataSync, SyncDone


def unneeded_segments(state: PipelineState, destinations: Sequence[str]) -> list[SegmentInfo]:
    """The segments of ``state`` no destination of their table may still read (in state
    order); ``destinations`` are the pipeline's destination names (every destination the
    state holds a table's state for counts too, configured or not). None without destinations."""
    if not destinations:
        return []
    result = []
    for segment in state.segments:
        table = state.tables.get(segment.table)
        if table is None or not _needed(segment, table, destinations):
            result.append(segment)
    return result


def expired_files(
    files: Iterable[tuple[str, int, datetime]],
    state: PipelineState,
    *,
    now: datetime,
    retention: timedelta,
) -> list[str]:
    """The segment files ``(path, first commit LSN, modification time)`` that may be deleted:
    not listed in ``state``, holding only transactions the state has passed (a capture that
    is writing its batch writes after ``last_end_lsn``, and records its files after), and
    older than ``retention``."""
    if state.last_end_lsn is None:
        return []
    listed = {s.path for s in state.segments}
    end = state.last_end_lsn.value
    return [
        path
        for path, first, mtime in files
        if path not in listed and first <= end and now - mtime >= retention
    ]


def _needed(segment: SegmentInfo, table: TableState, destinations: Sequence[str]) -> bool:
    if table.backfill is not None and may_hold_unseen(segment, table.backfill.xmin):
        return True
    names = set(destinations) | set(table.destinations)
    return any(_needed_by(segment, table.destination(name)) for name in names)


def _needed_by(segment: SegmentInfo, held: DestinationState) -> bool:
    if isinstance(held.phase, DataSync):
        return True
    phase = held.applying()
    if phase is None:
        return False
    mark = watermark_lsn(held.watermark)
    if mark is not None:
        return segment.last_commit_lsn >= mark
    if isinstance(phase, SyncDone):
        return bool(handoff_segments([segment], phase))
    return True


def handoff_segments(segments: Sequence[SegmentInfo], done: SyncDone) -> list[SegmentInfo]:
    """The segments a hand-off from baseline ``done`` reads: those of the schema version the
    baseline copied or later that can hold a transaction its snapshot did not see. Older
    versions hold only transactions the snapshot saw: a schema change waits for every writer
    of the table, and the baseline started after capture had seen the change."""
    return [s for s in segments if s.schema_version >= done.schema_version and may_hold_unseen(s, done.xmin)]


def watermark_lsn(text: str | None) -> LSN | None:
    """The commit LSN of a watermark text ``X/Y/seq`` as apply records it (None: none or unreadable)."""
    if not text:
        return None
    lsn_text, _, seq = text.rpartition("/")
    try:
        return LSN.parse(lsn_text) if seq.isdigit() else None
    except ConfigError:
        return None
