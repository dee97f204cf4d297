"""Apply one table's changelog to one destination: batches after its watermark, the baseline
hand-off by the visibility rule, schema changes, and the move to Ready (DESIGN §2 rules 4-9).

Pure orchestration over a ``Changelog`` and a ``Destination``: no Airflow, no state store;
the caller records the returned phase.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from airflow_provider_pgsync.apply.backfill import touched_keys
from airflow_provider_pgsync.apply.destination import (
    Destination,
    SchemaAnswer,
    SchemaDecision,
    schema_decision,
)
from airflow_provider_pgsync.apply.prefetch import prefetched
from airflow_provider_pgsync.apply.schema_change import (
    no_identity_phase,
    rebaseline_remedy,
    schema_phase,
    type_text,
)
from airflow_provider_pgsync.baseline.handoff import not_visible, visible_in_snapshot
from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.changelog.metadata import change_of, columns_of
from airflow_provider_pgsync.changelog.retention import handoff_segments
from airflow_provider_pgsync.changelog.schema import COMMIT_LSN, SEQ, XID, segment_schema
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.errors import (
    DestinationDivergedError,
    DestinationError,
    DestinationUnavailableError,
)
from airflow_provider_pgsync.state.model import (
    Backfill,
    ColumnInfo,
    PipelineState,
    SchemaChange,
    SegmentInfo,
    TableState,
)
from airflow_provider_pgsync.state.phases import Errored, Ready, SyncDone, TablePhase
from airflow_provider_pgsync.state.schema_diff import diff_columns

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableApplied:
    """What one apply run did to a table in a destination, and the table's phase after it."""

    table: str
    applied: int
    in_base: int
    watermark: Key | None
    phase: TablePhase
    backfilled: int | None = None
    """Rows of the table's pending backfill written in this run (None: none was due)."""
    schema_change: str | None = None
    """Why a change of the table's columns moved it (to Init or Errored) in this run; None: none did."""


def apply_table(
    changelog: Changelog,
    state: PipelineState,
    table_state: TableState,
    destination: Destination,
    *,
    batch_rows: int = 1_000_000,
    batch_bytes: int = 256 * 2**20,
    on_schema_change: str = "rebaseline",
    baseline_dag_id: str | None = None,
) -> TableApplied:
    """Hand ``destination`` every change of the table after its watermark, in batches of at
    most ``batch_rows`` changes and about ``batch_bytes``, cut between transactions (a
    transaction larger than that is split).

    The phase is the table's in this destination (``TableState.destination``). In SyncDone
    it gets only the changes of transactions its baseline snapshot did not see (the rest is
    in the base), read from the segments that can hold them (``handoff_segments``); it
    becomes Ready once capture has passed its ``baseline_lsn`` and every captured change is
    applied. A Ready table's pending backfill is merged into the destination at the same
    point (``apply/backfill.py``). First the destination proves it still holds the baseline the
    state names (``Destination.verify``, rule 11): one that does not (its table dropped, replaced
    or emptied by someone) leaves the table Errored in it with a rebaseline as the remedy and no
    retry. Whatever else fails for the table in this destination (a refused batch, its DDL, a
    driver's error) leaves it Errored there, never the other tables or destinations (rule 12); a
    schema change it cannot take too; a Rebaseline answer sends it back to Init
    (``on_schema_change`` ``rebaseline``) or Errored with no retry (``fail``), the remedy
    naming ``baseline_dag_id`` (``apply/schema_change.py``); an
    Errored one that may be retried (``DestinationState.applying``) is tried again from its watermark
    and goes back to the phase it left when it succeeds. A destination that cannot be
    reached raises DestinationUnavailableError and nothing changes. Tables in other phases
    are left alone.
    """
    current = table_state.destination(destination.name)
    phase = current.applying()
    table, key = table_state.table, table_state.key
    if phase is None:
        return TableApplied(key, 0, 0, None, current.phase)
    applied = in_base = 0
    watermark: Key | None = None
    batches: Generator[tuple[int, pa.RecordBatch], None, None] | None = None
    try:
        if current.lineage:  # rule 11: the destination still holds what the state says
            destination.verify(table, current.lineage)
        segments = kept = [s for s in state.segments if s.table == key]
        watermark = destination.watermark(table)
        if isinstance(phase, SyncDone) and watermark is None:
            segments = handoff_segments(segments, phase)
        # read from each version's first segment, which may be before the hand-off
        columns_of_version, started = _versions(changelog, kept)
        markers = _markers(changelog, kept, started)
        handed = {s.schema_version for s in segments}
        versions = {v: c for v, c in columns_of_version.items() if v in handed}
        known = _version_at(segments, watermark)
        opened = known is not None or bool(versions)
        if opened:
            first = known if known is not None else min(versions)
            destination.open_table(table, versions.get(first, table_state.columns), first)
        handed_off = (
            isinstance(phase, SyncDone)
            and state.last_end_lsn is not None
            and state.last_end_lsn >= phase.baseline_lsn
        )
        # a hand-off starts from the columns the baseline copied: a change of them between its
        # snapshot and the first captured change is a schema change like any other
        copied = phase.schema_version if isinstance(phase, SyncDone) and watermark is None else None
        changes_read = changelog.read_changes(
            table,
            segments,
            after=watermark,
            batch_rows=batch_rows,
            batch_bytes=batch_bytes,
            xid_reference=phase.xmax if isinstance(phase, SyncDone) else None,
        )
        # the next batch is read while the destination applies this one
        batches = prefetched(_regroup(changes_read, batch_rows, batch_bytes))
        # the version the destination's columns are at: the last applied, or the baseline's copy
        since = known if known is not None else copied
        for version, batch in batches:
            columns = versions[version]
            if since is not None and version != since:
                change = SchemaChange()
                for between in sorted(v for v in started if since < v <= version):
                    change = change.joined(started[between])
                before = columns_of_version.get(since)
                if before is None and known is not None:
                    before = list(table_state.columns)
                diff = diff_columns(before or (), columns, change)
                if isinstance(phase, SyncDone) and _seen_by_baseline(change, phase):
                    # the baseline read the catalog after this DDL: it copied the new columns (and
                    # the rows a change of partitions brought or took: its marker is in the base)
                    decision = schema_decision(SchemaAnswer.CONTINUE)
                    destination.open_table(table, columns, version)
                elif change.outside:
                    # rows came or went without changes (partitions): no destination can follow
                    decision = schema_decision(SchemaAnswer.REBASELINE)
                elif not _identified(columns):
                    # no replica identity any more: refused below, before any change is applied
                    decision = schema_decision(SchemaAnswer.CONTINUE)
                elif not before or version < since:
                    decision = _unknown_copy(batch, phase, since, version)
                else:
                    decision = schema_decision(destination.change_schema(table, diff))
                if decision.answer is not SchemaAnswer.CONTINUE:
                    moved, reason = schema_phase(
                        key,
                        destination.name,
                        decision,
                        change.outside
                        or (diff.describe(type_text) if before else f"schema version {since} to {version}"),
                        phase,
                        on_schema_change=on_schema_change,
                        baseline_dag_id=baseline_dag_id,
                        rows_outside=bool(change.outside),
                    )
                    log.warning("%s in %s: %s", key, destination.name, reason)
                    return TableApplied(key, applied, in_base, watermark, moved, schema_change=reason)
            known = version
            since = max(version, since) if since is not None else version
            upto = _last_key(batch)
            changes = _after_baseline(batch, phase) if isinstance(phase, SyncDone) else batch
            if version in markers and _holds(changes, markers[version]):
                # rows changed outside the stream there, after this destination's base: whatever
                # version its base was given, only a new baseline follows
                moved, reason = schema_phase(
                    key,
                    destination.name,
                    schema_decision(SchemaAnswer.REBASELINE),
                    started[version].outside,
                    phase,
                    on_schema_change=on_schema_change,
                    baseline_dag_id=baseline_dag_id,
                    rows_outside=True,
                )
                log.warning("%s in %s: %s", key, destination.name, reason)
                return TableApplied(key, applied, in_base, watermark, moved, schema_change=reason)
            if changes.num_rows and not _identified(columns):
                moved, reason = no_identity_phase(
                    key, str(table_state.source_table), destination.name, phase, baseline_dag_id
                )
                log.warning("%s in %s: %s", key, destination.name, reason)
                return TableApplied(key, applied, in_base, watermark, moved)
            destination.apply(table, columns, changes, upto)
            watermark = upto
            applied += changes.num_rows
            in_base += batch.num_rows - changes.num_rows
        mark = _handoff_mark(kept, watermark) if handed_off else None
        if mark is not None:
            version = max(columns_of_version) if columns_of_version else 0
            columns = columns_of_version.get(version) or list(table_state.columns)
            if not opened:
                destination.open_table(table, columns, version)
            nothing = pa.RecordBatch.from_pylist([], schema=segment_schema(columns))
            destination.apply(table, columns, nothing, mark)
            watermark = mark
        backfill = table_state.backfill
        if backfill is not None and _backfill_due(state, backfill, destination):
            touched = touched_keys(changelog, table_state, segments, versions, backfill)
            columns = versions.get(known, []) if known is not None else []
            columns = columns or list(table_state.columns)
            upto = (watermark[0], watermark[1] + 1) if watermark is not None else (0, 1)
            written = destination.backfill(table, columns, backfill.staged[destination.name], touched, upto)
            log.info(
                "%s: backfill %s (%s) in %s: %s of %s staged rows written, %s keys changed since its "
                "snapshot kept their newer rows%s",
                key,
                backfill.id,
                backfill.condition or "all rows",
                destination.name,
                f"{written:,}",
                f"{backfill.rows:,}",
                f"{touched.keys.num_rows:,}",
                " (a TRUNCATE since the snapshot: nothing to write)" if touched.truncated else "",
            )
            return TableApplied(key, applied, in_base, upto, phase, backfilled=written)
    except DestinationUnavailableError:
        raise  # transient: the task fails for Airflow to retry, the phase stays as it is
    except DestinationDivergedError as exc:
        # only a new baseline repairs it: apply leaves it alone until then (retry none)
        remedy = rebaseline_remedy(key, destination.name, baseline_dag_id)
        errored = Errored(reason=str(exc), solution=remedy, retry="none", previous=phase.kind)
        return TableApplied(key, applied, in_base, watermark, errored)
    except Exception as exc:  # rule 12: whatever fails here is this table's in this destination
        if not isinstance(exc, DestinationError):
            log.exception("%s in %s: apply failed", key, destination.name)
        reason = str(exc) if isinstance(exc, DestinationError) else f"{type(exc).__name__}: {exc}"
        errored = Errored(
            reason=reason[:2000],
            solution=(
                f"fix table {key} in destination {destination.name} as the reason says, then run "
                f"apply again (the cdc DAG), or {rebaseline_remedy(key, destination.name, baseline_dag_id)}"
            ),
            retry="manual",
            previous=phase.kind,
        )
        return TableApplied(key, applied, in_base, watermark, errored)
    finally:
        if batches is not None:
            batches.close()
    new_phase: TablePhase = phase
    if handed_off:
        assert isinstance(phase, SyncDone) and state.last_end_lsn is not None
        log.info(
            "%s: in sync in %s from %s on (baseline at %s)",
            key,
            destination.name,
            state.last_end_lsn,
            phase.baseline_lsn,
        )
        new_phase = Ready()
    return TableApplied(key, applied, in_base, watermark, new_phase)


HANDOFF_SEQ = 2**62
"""The ``_seq`` of the watermark a hand-off leaves at a commit LSN: past every change of that
transaction (and short of overflowing the int64 a backfill adds one to)."""


def _handoff_mark(segments: Sequence[SegmentInfo], watermark: Key | None) -> Key | None:
    """Where a finished hand-off moves the watermark: past every captured change of the table,
    when that is beyond ``watermark`` (None: it is not).

    Once capture has passed the baseline's LSN, each captured change is in the base (its
    transaction was visible to the snapshot) or was applied by the hand-off; but the hand-off
    reads only the segments that may hold the others, so its watermark can stay short of (or,
    with nothing to apply, never reach) changes the base already holds. Left there, the Ready
    table's next apply would read those again: rows twice in a table without a key, a failing
    INSERT in one with a key."""
    if not segments:
        return None
    mark = (max(s.last_commit_lsn for s in segments).value, HANDOFF_SEQ)
    return mark if watermark is None or mark > watermark else None


def _unknown_copy(batch: pa.RecordBatch, phase: TablePhase, copied: int, version: int) -> SchemaDecision:
    """At a hand-off, a batch of schema version ``version`` where the baseline copied version
    ``copied`` and no diff between them can be made: Continue for an older version whose changes
    the baseline's snapshot all saw (they are in its base: changes of columns older than the copy
    committed before the DDL it saw), else Rebaseline, since nothing tells whether the copied
    columns can take the batch."""
    if version < copied:
        if isinstance(phase, SyncDone) and _after_baseline(batch, phase).num_rows == 0:
            return SchemaDecision(SchemaAnswer.CONTINUE)
        why = f"changes after its baseline have the older columns of schema version {version}"
    else:
        why = "the changelog does not describe those columns"
    return SchemaDecision(
        SchemaAnswer.REBASELINE,
        f"its baseline copied the columns of schema version {copied} and {why}",
    )


def _seen_by_baseline(change: SchemaChange, done: SyncDone) -> bool:
    """Whether the baseline's snapshot saw every DDL transaction of ``change`` (none known: no)."""
    seen = (visible_in_snapshot(x, done.xmin, done.xmax, done.xip) for x in change.xids)
    return bool(change.xids) and all(seen)


def _backfill_due(state: PipelineState, backfill: Backfill, destination: Destination) -> bool:
    """Whether ``destination`` takes ``backfill`` now: it is one of its destinations and does not
    have it yet, and capture has passed the snapshot's ``baseline_lsn`` (every change the
    snapshot saw is captured, so the loop before has applied it)."""
    return (
        destination.name in backfill.pending
        and state.last_end_lsn is not None
        and state.last_end_lsn >= backfill.baseline_lsn
    )


def _regroup(
    batches: Iterator[tuple[int, pa.RecordBatch]], rows: int, size: int
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The changelog's batches joined up to ``rows`` changes or ``size`` bytes, each ending
    with a whole transaction (unless one transaction alone is larger), one schema version each."""
    pending: list[pa.RecordBatch] = []
    pending_version = -1
    for version, batch in batches:
        if pending and version != pending_version:
            yield pending_version, _joined(pending)
            pending = []
        pending.append(batch)
        pending_version = version
        if sum(b.num_rows for b in pending) >= rows or sum(b.nbytes for b in pending) >= size:
            joined = _joined(pending)
            lsn = joined.column(COMMIT_LSN).to_numpy(zero_copy_only=False)
            cut = int(np.searchsorted(lsn, lsn[-1], side="left")) or joined.num_rows
            yield version, joined.slice(0, cut)
            pending = [joined.slice(cut)] if cut < joined.num_rows else []
    if pending:
        yield pending_version, _joined(pending)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _versions(
    changelog: Changelog, segments: Sequence[SegmentInfo]
) -> tuple[dict[int, list[ColumnInfo]], dict[int, SchemaChange]]:
    """The columns of each schema version and the DDL it started with, from the metadata of its
    first segment (``segments`` in order; one read per version)."""
    columns: dict[int, list[ColumnInfo]] = {}
    changes: dict[int, SchemaChange] = {}
    for seg in segments:
        if seg.schema_version not in columns:
            meta = changelog.segment_metadata(seg.path)
            columns[seg.schema_version] = columns_of(meta, seg.path)
            changes[seg.schema_version] = change_of(meta, seg.path)
    return columns, changes


def _markers(
    changelog: Changelog, segments: Sequence[SegmentInfo], started: dict[int, SchemaChange]
) -> dict[int, Key]:
    """The key of the marker row (``capture/columns.py``) that starts each schema version whose
    change says rows changed outside the stream (``SchemaChange.outside``): the first row of the
    version's first segment (``segments`` in order; one small read per such version, rare)."""
    found: dict[int, Key] = {}
    for version, change in started.items():
        if not change.outside:
            continue
        first = next(s for s in segments if s.schema_version == version)
        for _, batch in changelog.read_changes(first.table, [first], batch_rows=1):
            found[version] = int(batch.column(COMMIT_LSN)[0].as_py()), int(batch.column(SEQ)[0].as_py())
            break
    return found


def _holds(batch: pa.RecordBatch, key: Key) -> bool:
    """Whether ``batch`` has the change of ``key`` (commit LSN, seq)."""
    lsn = batch.column(COMMIT_LSN).to_numpy(zero_copy_only=False)
    seq = batch.column(SEQ).to_numpy(zero_copy_only=False)
    return bool(((lsn == key[0]) & (seq == key[1])).any())


def _version_at(segments: Sequence[SegmentInfo], watermark: Key | None) -> int | None:
    """The schema version of the last change the destination applied (None: unknown)."""
    if watermark is None:
        return None
    holding = [
        s.schema_version
        for s in segments
        if s.first_commit_lsn.value <= watermark[0] <= s.last_commit_lsn.value
    ]
    return max(holding) if holding else None


def _identified(columns: Sequence[ColumnInfo]) -> bool:
    """Whether the changes of a table with ``columns`` say which row they change: a replica
    identity (a key, or the whole row under REPLICA IDENTITY FULL) is in them."""
    return not columns or any(c.is_key for c in columns)


def _last_key(batch: pa.RecordBatch) -> Key:
    return int(batch.column(COMMIT_LSN)[-1].as_py()), int(batch.column(SEQ)[-1].as_py())


def _after_baseline(batch: pa.RecordBatch, done: SyncDone) -> pa.RecordBatch:
    """The changes of transactions the baseline snapshot did not see (rule 5), vectorised; the
    batch's ``_xid`` are 64-bit (``read_changes`` widens a legacy segment's against ``done.xmax``)."""
    newer = not_visible(batch.column(XID), done.xmin, done.xmax, done.xip)
    if newer.all():  # the common case once the snapshot's transactions are behind
        return batch
    return batch.filter(pa.array(newer))
