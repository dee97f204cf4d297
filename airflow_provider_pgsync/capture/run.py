"""Capture one bounded batch: peek, decode, durable segments, state, advance (DESIGN §2 rules 1-4, 10).

The order is the whole point: the slot is advanced only after the batch's segments are
published and recorded in the state, so a crash anywhere re-peeks the same
transactions (at-least-once), and a re-run drops the transactions the state already
holds (commit LSN below the recorded end LSN).

The state write is a compare-and-set on the version loaded before the peek. A baseline's
or an apply's write in between (phases, watermarks, backfills, segments pruned, a
baseline's first columns of a table the batch holds nothing of) does not cost the batch:
capture reloads and records the same batch on the state saved now (a few attempts). Only
a change of what the batch was decoded from (the slot identity, the captured end LSN,
segments added, a table's schema version, columns, DDL, relation OID or source name: another
capture, or a setup) is a true conflict: StateConflictError, the slot stays, and the next
run decodes the batch again from the new state (``PipelineState.capture_conflict``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from airflow_provider_pgsync.capture.columns import arrow_payloads
from airflow_provider_pgsync.capture.dropped import (
    drop_warnings,
    followed_oids,
    skipped_warning,
    with_catalog_drops,
)
from airflow_provider_pgsync.capture.health import SlotProblem, slot_problem, source_behind
from airflow_provider_pgsync.capture.worker import Decoder, DecodeResult, DecodeWriter, ProcessDecodeWriter
from airflow_provider_pgsync.errors import ConfigError, SlotError, StateConflictError, StateError
from airflow_provider_pgsync.failpoints import fail_point, pause_point
from airflow_provider_pgsync.hooks.catalog import names_by_oid
from airflow_provider_pgsync.hooks.ddl_trigger import ddl_catalog
from airflow_provider_pgsync.hooks.replication import PgReplicationHook, SlotInfo
from airflow_provider_pgsync.hooks.run_locks import HeldLock
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.source.names import validate_publication_name, validate_slot_name
from airflow_provider_pgsync.source.sessions import timeout_ms
from airflow_provider_pgsync.state.model import PipelineState, SegmentInfo
from airflow_provider_pgsync.state.phases import Errored
from airflow_provider_pgsync.state.store import StateStore

log = logging.getLogger(__name__)
SAVE_ATTEMPTS = 5
"""How many compare-and-set saves a capture makes of its batch (rebased after each conflict)."""


@dataclass(frozen=True)
class CaptureSettings:
    """What one capture run reads and where it writes; the limits bound its work and memory."""

    pipeline: str
    slot_name: str
    publication_name: str
    changelog_uri: str
    max_changes: int = 1_000_000
    fetch_bytes: int = 4 * 2**20
    """About how many bytes of payloads each fetch from the peek holds."""
    part_bytes: int = 16 * 2**20
    worker_from_bytes: int = 32 * 2**20
    peek_statement_timeout: float = 0.0
    """Seconds each statement of the peek and the slot advance may run; 0: no limit. No limit by
    default: a peek decodes all the WAL up to its bound (writes to unpublished tables too), so
    a large backlog takes as long as it takes, and a peek cut by a limit is redone from the
    start by the next run, which would then never get further while WAL piles up on the
    source. Bound the run as a whole with the task's ``execution_timeout`` instead. Set
    explicitly either way, so a low database or role default never applies unnoticed."""

    def __post_init__(self) -> None:
        validate_slot_name(self.slot_name)
        validate_publication_name(self.publication_name)
        for name in ("max_changes", "fetch_bytes", "part_bytes", "worker_from_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"capture setting {name} must be a positive integer, not {value!r}")
        timeout_ms(self.peek_statement_timeout, what="capture setting peek_statement_timeout")

    @property
    def peek_statement_timeout_ms(self) -> int:
        return timeout_ms(self.peek_statement_timeout, what="capture setting peek_statement_timeout")


@dataclass(frozen=True)
class CaptureResult:
    """What one capture run did."""

    payloads: int
    changes: int
    transactions: int
    segments: tuple[SegmentInfo, ...]
    advanced_to: LSN | None
    idle: bool
    seconds: float
    rows_by_table: dict[str, int] = field(default_factory=dict)
    start_lsn: LSN | None = None
    """The slot's confirmed position when the run began."""
    upto_lsn: LSN | None = None
    """The WAL flush position the peek was bounded by: ``upto_lsn - start_lsn`` is the lag the
    run found (the status page charts it over recent runs)."""


def capture(
    hook: PgReplicationHook, store: StateStore, settings: CaptureSettings, *, holder: str = "pgsync capture"
) -> CaptureResult:
    """Capture one batch of the slot into the changelog, under the slot's capture lock.

    The lock is checked again right before each state write and the slot advance: a run whose
    lock went with its session (another run may hold it now) stops there (LockLostError).

    When another run saved the state between this run's load and its save, the batch is
    recorded on the state saved now, keeping that run's writes (phases, watermarks, ...),
    unless that run changed something capture owns (the slot identity, the captured end LSN,
    the segments, a table's schema version, columns, DDL, relation OID or source name): then
    StateConflictError as before, the slot is not advanced and the next run captures the batch
    again. See ``PipelineState.capture_conflict`` for the exact rule.
    """
    with hook.capture_lock(settings.slot_name, holder) as lock:
        return _capture(hook, store, settings, lock)


def _capture(
    hook: PgReplicationHook, store: StateStore, settings: CaptureSettings, lock: HeldLock
) -> CaptureResult:
    started = time.monotonic()
    slot = settings.slot_name
    loaded = state = store.load(settings.pipeline)
    info = hook.slot_info(slot)
    problem = slot_problem(state, slot, info)
    if problem is not None:
        _mark_errored(store, state, slot, info, problem, lock)
        raise SlotError(f"{problem.reason}; {problem.solution}")
    assert info is not None and info.confirmed_flush_lsn is not None
    adopt = (slot, info.confirmed_flush_lsn) if state.slot_name is None else None
    if adopt is not None:
        state = state.with_slot(*adopt)
    with hook.connect() as conn:  # before the peek's bound: see DecodeWriter.version_of
        catalog = ddl_catalog(conn, [t.source_table for t in state.tables.values()])
        followed = followed_oids(state)  # those gone now were dropped before the bound (capture/dropped.py)
        gone = set(followed) - set(names_by_oid(conn, followed))
    positions = hook.wal_positions()  # the peek's bound and the 64-bit xid reference, read together
    upto = positions.flush
    behind = source_behind(state, upto)
    if behind is not None:
        raise StateError(behind)
    start = info.confirmed_flush_lsn
    in_worker = upto - start >= settings.worker_from_bytes
    log.info(
        "capture of slot %s: peeking up to %s (%s bytes of WAL), at most %s changes%s",
        slot,
        upto,
        f"{upto - start:,}",
        f"{settings.max_changes:,}",
        ", decoding in a worker process" if in_worker else "",
    )
    decoder: Decoder = (ProcessDecodeWriter if in_worker else DecodeWriter)(
        settings.changelog_uri, state, settings.part_bytes, xid_reference=positions.xmax, catalog=catalog
    )
    progress = _Progress()
    try:
        with hook.peek_arrays(
            slot,
            [settings.publication_name],
            upto_lsn=upto,
            upto_nchanges=settings.max_changes,
            batch_bytes=settings.fetch_bytes,
            statement_timeout_ms=settings.peek_statement_timeout_ms,
        ) as fetches:
            for payloads in fetches:
                data, lens = arrow_payloads(payloads)
                decoder.feed(data, lens)
                progress.report(len(lens), len(data))
        fail_point("after_peek")
        decoded = decoder.finish()
        pause_point("capture_before_state_write")  # segments written; state and slot not yet moved

        idle = decoded.payloads < settings.max_changes
        if idle and gone:  # every change up to the bound is read: those tables' are all captured
            decoded = with_catalog_drops(decoded, state, gone, upto)
        target = _advance_target(decoded, idle, upto)
        previous = state.last_end_lsn
        moved = previous is None or (target is not None and target > previous)
        if target is not None and (moved or decoded.segments or decoded.tables):
            fail_point("before_state_write")
            state = _save_capture(store, loaded, decoded, target, lock, adopt=adopt)
            fail_point("after_state_write")
        if target is not None:
            lock.ensure_held()
            hook.advance_slot(slot, target, statement_timeout_ms=settings.peek_statement_timeout_ms)
            fail_point("after_advance")
    finally:
        decoder.close()  # after the advance: a worker process takes a moment to exit
    result = CaptureResult(
        payloads=decoded.payloads,
        changes=decoded.changes,
        transactions=decoded.transactions,
        segments=decoded.segments,
        advanced_to=target,
        idle=idle,
        seconds=time.monotonic() - started,
        rows_by_table=decoded.rows_by_table,
        start_lsn=start,
        upto_lsn=upto,
    )
    _log_result(result, slot, decoded)
    for warning in [skipped_warning(state, n, c, gone) for n, c in sorted(decoded.skipped.items())]:
        log.warning("%s", warning)
    for warning in drop_warnings(state, decoded.tables):
        log.warning("%s", warning)
    return result


def _advance_target(decoded: DecodeResult, idle: bool, upto: LSN) -> LSN | None:
    """Where the slot may go: everything up to ``upto`` when the peek was not cut by its limit
    (rule 3), otherwise the end of the last whole transaction (rule 1)."""
    if idle:
        return upto
    if decoded.last_end_lsn is None:
        log.warning("the peek hit its limit without a whole transaction; raise max_changes")
        return None
    return LSN(decoded.last_end_lsn)


def _save_capture(
    store: StateStore,
    loaded: PipelineState,
    decoded: DecodeResult,
    target: LSN,
    lock: HeldLock,
    *,
    adopt: tuple[str, LSN] | None,
    attempts: int = SAVE_ATTEMPTS,
) -> PipelineState:
    """Record the batch decoded from ``loaded`` (adopting slot ``adopt`` when the state had none):
    a compare-and-set on the version loaded; when another run saved meanwhile, the batch is
    recorded on the state saved now instead, unless something capture owns changed there
    (``PipelineState.capture_conflict``: then StateConflictError, and the batch is redone)."""

    def record(state: PipelineState) -> PipelineState:
        if adopt is not None:
            state = state.with_slot(*adopt)
        return state.with_capture(target, decoded.segments, decoded.tables.values())

    current = loaded
    for attempt in range(1, attempts + 1):
        lock.ensure_held()
        try:
            return store.save(record(current))
        except StateConflictError:
            if attempt == attempts:
                raise
            current = store.load(loaded.pipeline)
            conflict = current.capture_conflict(loaded, decoded.segments, decoded.tables.values())
            if conflict is not None:
                log.warning(
                    "capture's batch was decoded from state version %d, but another run changed what "
                    "capture owns meanwhile (%s, now version %d): the batch is not recorded and the slot "
                    "not advanced; the next run captures it again",
                    loaded.version,
                    conflict,
                    current.version,
                )
                raise
            log.info(
                "another run saved the state meanwhile (phases, watermarks: nothing capture reads): the "
                "batch is recorded on state version %d",
                current.version,
            )
    raise AssertionError("unreachable")


def _mark_errored(
    store: StateStore,
    state: PipelineState,
    slot: str,
    info: SlotInfo | None,
    problem: SlotProblem,
    lock: HeldLock,
    *,
    attempts: int = SAVE_ATTEMPTS,
) -> None:
    """Put every table that is not Errored yet into Errored with the remedy; save. On a conflict
    the state saved meanwhile is decided again (as ``update_state`` does): its tables marked,
    unless the slot suits it now (e.g. a setup adopted the slot meanwhile)."""
    current = state
    for attempt in range(1, attempts + 1):
        found = slot_problem(current, slot, info)
        if found is None:
            log.warning(
                "the state was changed meanwhile and suits slot %s now: no table marked Errored", slot
            )
            break
        changed = current
        for key, ts in current.tables.items():
            if not isinstance(ts.phase, Errored):
                phase = Errored(reason=found.reason, solution=found.solution, retry="manual")
                changed = changed.with_table_phase(key, phase)
        if changed is current:
            break
        lock.ensure_held()
        try:
            store.save(changed)
            break
        except StateConflictError:
            if attempt == attempts:
                raise
            current = store.load(state.pipeline)
    log.error("capture stopped: %s; %s", problem.reason, problem.solution)


@dataclass
class _Progress:
    """Logs what has been fetched every ``every`` seconds."""

    every: float = 10.0
    began: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)
    payloads: int = 0
    size: int = 0

    def report(self, payloads: int, size: int) -> None:
        self.payloads += payloads
        self.size += size
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            rate = self.payloads / max(now - self.began, 1e-9)
            log.info(
                "fetched %s messages (%s MB) from the slot, %s messages/s",
                f"{self.payloads:,}",
                f"{self.size / 2**20:,.0f}",
                f"{rate:,.0f}",
            )


def _log_result(result: CaptureResult, slot: str, decoded: DecodeResult) -> None:
    for segment in decoded.segments:
        log.info("wrote segment %s (%s rows)", segment.path, f"{segment.rows:,}")
    for key, ts in decoded.tables.items():
        log.info(
            "table %s: schema version %d, columns %s",
            key,
            ts.schema_version,
            ", ".join(c.name for c in ts.columns),
        )
    tables = ", ".join(f"{t}: {n:,}" for t, n in sorted(result.rows_by_table.items())) or "none"
    rate = result.changes / max(result.seconds, 1e-9)
    where = f"advanced slot {slot} to {result.advanced_to}" if result.advanced_to else "slot not advanced"
    idle = " (idle advance: the peek was not cut by its limit)" if result.idle else ""
    log.info(
        "capture done in %.1f s: %s changes in %s transactions (%s/s), %d segment(s); "
        "rows per table: %s; %s%s",
        result.seconds,
        f"{result.changes:,}",
        f"{result.transactions:,}",
        f"{rate:,.0f}",
        len(result.segments),
        tables,
        where,
        idle,
    )
