"""PgApplyOperator: the changelog into each destination, table by table."""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_pgsync.apply.run import TableApplied, apply_table
from airflow_provider_pgsync.apply.schema_change import check_on_schema_change, rebaseline_remedy
from airflow_provider_pgsync.changelog.retention import expired_files, unneeded_segments
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.destinations.configs import destination_name, open_destination
from airflow_provider_pgsync.destinations.pg_typedefs import SourceCatalog
from airflow_provider_pgsync.errors import (
    ApplyFailedError,
    ConfigError,
    DestinationUnavailableError,
    StaleDecisionError,
)
from airflow_provider_pgsync.failpoints import pause_point
from airflow_provider_pgsync.hooks.connections import (
    check_connections,
    destination_connections,
    source_and_state,
)
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.operators.retry import with_retry_policy
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import DataSync, Errored, Init, TablePhase
from airflow_provider_pgsync.state.store import StateStore, check_state_backend, update_state

log = logging.getLogger(__name__)

REBASELINES_XCOM = "schema_rebaselines"
"""The XCom key under which apply lists every (table, destination) whose rebaseline is pending
in the state (a schema change sent it back to Init, in this try or an earlier one, and no
baseline has started since): ``[{"table", "destination", "reason", "request"}]``. Pushed as
soon as the state is loaded and again once this try's decisions are saved, so a downstream task
triggers their rebaseline also when the task fails later, or a retry finds them decided."""


class PgApplyOperator(BaseOperator):
    """Apply the changelog to each destination: changes after the destination's watermark, the
    baseline hand-off by the visibility rule, SyncDone tables to Ready once in sync.

    Each destination has its own phase per table: one that refuses a table's changes leaves
    that table Errored in it alone, the other destinations and tables go on; one that cannot
    be reached changes nothing. Two applies of a pipeline never overlap (the second fails at
    once naming the first). The task fails at its end, after applying everything it could,
    when a table is Errored in any destination or a destination could not be reached,
    naming each with its reason and remedy, so Airflow's alerting fires.

    :param pipeline: the pipeline name; :param changelog_uri: folder or URI of the changelog.
    :param destinations: destination configs, e.g. ``{"kind": "postgres", "conn_id": "replica"}``.
    :param postgres_conn_id: the source (where the state is locked or kept).
    :param state_backend: ``variables`` (default) or ``postgres``; :param state_conn_id: the
        control database (the source by default); :param state_schema: its schema.
    :param batch_rows: the most changes handed to a destination at once; :param batch_bytes:
        about the most bytes of changes held for one batch.
    :param retention: how long a changelog segment's file is kept after every destination of
        its table is done with it (``changelog/retention.py`` says what each phase still
        needs; the state stops listing it at once); a ``timedelta`` or seconds, default 7
        days; None keeps every segment, listed.
    :param on_schema_change: what a destination that can follow a change of a table's columns
        only by a rebaseline does: ``rebaseline`` (default: back to Init for that table alone,
        the request kept in the state and listed in XCom ``schema_rebaselines`` by every run
        until a baseline starts, for a downstream task to trigger the rebaseline) or ``fail``
        (Errored, no retry, until rebaselined).
    :param baseline_dag_id: the DAG that rebaselines a table (named in the remedies).
    :param fail_on_rebaseline: fail at the end while a destination waits for the rebaseline a
        schema change requested (default); False when a downstream task triggers the rebaseline
        and fails the run (the cdc DAG).
    """

    template_fields: Sequence[str] = ("pipeline", "changelog_uri", "destinations")

    def __init__(
        self,
        *,
        pipeline: str,
        changelog_uri: str,
        destinations: Sequence[Mapping[str, Any]],
        postgres_conn_id: str = "postgres_default",
        state_backend: str = "variables",
        state_conn_id: str | None = None,
        state_schema: str = "pgsync",
        batch_rows: int = 1_000_000,
        batch_bytes: int = 256 * 2**20,
        retention: timedelta | float | None = timedelta(days=7),
        on_schema_change: str = "rebaseline",
        baseline_dag_id: str | None = None,
        fail_on_rebaseline: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**with_retry_policy(kwargs))
        check_state_backend(state_backend)
        if not destinations:
            raise ConfigError("PgApplyOperator needs at least one destination")
        self.pipeline = pipeline
        self.changelog_uri = changelog_uri
        self.destinations = [dict(d) for d in destinations]
        self.postgres_conn_id = postgres_conn_id
        self.state_backend = state_backend
        self.state_conn_id = state_conn_id
        self.state_schema = state_schema
        self.batch_rows = batch_rows
        self.batch_bytes = batch_bytes
        if isinstance(retention, int | float) and not isinstance(retention, bool):
            retention = timedelta(seconds=retention)
        if retention is not None and (not isinstance(retention, timedelta) or retention < timedelta(0)):
            raise ConfigError(
                f"retention must be a duration of zero or more (or None: keep), not {retention!r}"
            )
        self.retention = retention
        self.on_schema_change = check_on_schema_change(on_schema_change, "PgApplyOperator on_schema_change")
        self.baseline_dag_id = baseline_dag_id
        self.fail_on_rebaseline = fail_on_rebaseline

    def execute(self, context: Context) -> dict[str, Any]:
        needed = source_and_state(self.postgres_conn_id, self.state_conn_id)
        needed += destination_connections(self.destinations)
        check_connections("PgApplyOperator", self.task_id, needed)
        hook = PgReplicationHook(postgres_conn_id=self.postgres_conn_id)
        store = open_state_store(
            self.state_backend, hook, state_conn_id=self.state_conn_id, schema=self.state_schema
        )
        ti = context.get("ti")
        holder = f"pgsync apply {self.pipeline} ({getattr(ti, 'dag_id', '?')}.{getattr(ti, 'task_id', '?')})"
        names = [destination_name(c) for c in self.destinations]
        with hook.apply_lock(self.pipeline, holder) as lock:
            state = store.load(self.pipeline)
            _push_rebaselines(ti, state, names)  # pending from an earlier try or run
            run = _Run(Changelog(self.changelog_uri), request=uuid.uuid4().hex[:16])
            self._find_dead_baselines(hook, run, state)
            for config in self.destinations:
                self._apply_destination(run, state, config, hook)
            run.stamp_requests()
            pause_point("apply_before_state_write")
            lock.ensure_held()  # a run that lost its lock records nothing (another may run now)
            saved = update_state(store, self.pipeline, run.record)
            # before anything else can fail: the requests are durable now, and listed
            rebaselines = _push_rebaselines(ti, saved, names)
            self._discard_backfills(run, state)
            if self.retention is not None:
                lock.ensure_held()
                saved = self._prune(store, saved, run.changelog, self.retention)
        summary = run.summary(saved)
        failures = run.unavailable + run.unopened + _errored(saved, names)
        others = bool(failures)
        for sent in rebaselines:
            table, name, reason = sent["table"], sent["destination"], sent["reason"]
            self.log.warning("apply %s -> %s: back to baseline: %s", table, name, reason)
            if self.fail_on_rebaseline:
                then = rebaseline_remedy(table, name, self.baseline_dag_id)
            elif others:  # named in this task's error too, so it tells the whole story
                then = "a task after this one triggers its rebaseline"
            else:
                continue
            failures.append(f"table {table} in destination {name} went back to Init: {reason}; {then}")
        if failures:
            # a retry can help only a destination that could not be reached; the rest needs a human
            raise ApplyFailedError(
                f"apply of pipeline {self.pipeline!r} left {len(failures)} table(s) not applied "
                "(everything else was applied):\n" + "\n".join(f"  - {f}" for f in failures),
                retryable=bool(run.unavailable),
            )
        return summary

    def _find_dead_baselines(self, hook: PgReplicationHook, run: _Run, state: PipelineState) -> None:
        """A destination in DataSync whose baseline no longer runs (its task was killed, or the
        source or the state store was down when it failed) goes Errored with the remedy."""
        names = [destination_name(c) for c in self.destinations]
        for key, table_state in state.tables.items():
            for name in names:
                held = table_state.destination(name)
                if not isinstance(held.phase, DataSync) or not held.lineage:
                    continue
                if hook.baseline_running(self.pipeline, key, held.lineage):
                    continue
                errored = Errored(
                    reason=(
                        f"the baseline {held.lineage} of {key} into {name} ended without recording its "
                        "result (its task was killed, or the source or the state store could not be reached)"
                    ),
                    solution=f"rebaseline {key} in {name} (the baseline DAG's trigger form)",
                    retry="manual",
                    previous="DataSync",
                )
                self.log.error("apply: table %s in destination %s: %s", key, name, errored.reason)
                decision = TableApplied(key, 0, 0, None, errored)
                run.decisions.append((key, name, held.lineage, held.phase, decision))

    def _apply_destination(
        self, run: _Run, state: PipelineState, config: Mapping[str, Any], hook: PgReplicationHook
    ) -> None:
        """Every table into one destination; a destination that cannot be reached is noted and
        skipped (its phases stay), one that refuses a table leaves that table Errored in it."""
        name = destination_name(config)
        try:
            # a replica reads the source's catalog (through a connection opened when first needed)
            # for the types and generated columns of the tables and columns it creates
            destination = open_destination(config, source=SourceCatalog(connect=hook.connect))
        except DestinationUnavailableError as exc:
            run.unavailable.append(f"every table in destination {name}: {exc} (the task will be retried)")
            self.log.error("apply -> %s: %s", name, exc)
            return
        except Exception as exc:  # e.g. no right to its control schema: the other destinations go on
            self.log.exception("apply -> %s: the destination could not be opened", name)
            run.unopened.append(f"every table in destination {name}: {type(exc).__name__}: {exc}")
            return
        try:
            for key, table_state in state.tables.items():
                held = table_state.destination(destination.name)
                try:
                    result = apply_table(
                        run.changelog,
                        state,
                        table_state,
                        destination,
                        batch_rows=self.batch_rows,
                        batch_bytes=self.batch_bytes,
                        on_schema_change=self.on_schema_change,
                        baseline_dag_id=self.baseline_dag_id,
                    )
                except DestinationUnavailableError as exc:
                    run.unavailable.append(
                        f"table {key} in destination {destination.name}: {exc} (the task will be retried)"
                    )
                    self.log.error("apply %s -> %s: %s", key, destination.name, exc)
                    return  # the destination is gone for now: its other tables wait for the retry
                run.results.setdefault(key, []).append((destination.name, result))
                run.decisions.append((key, destination.name, held.lineage, held.phase, result))
                self.log.info(
                    "apply %s -> %s: %s changes applied, %s already in the base, watermark %s, %s",
                    key,
                    destination.name,
                    f"{result.applied:,}",
                    f"{result.in_base:,}",
                    _key_text(result.watermark),
                    result.phase.kind,
                )
                if isinstance(result.phase, Errored):
                    self.log.error("apply %s -> %s: %s", key, destination.name, result.phase.reason)
                elif result.backfilled is not None and table_state.backfill is not None:
                    run.backfilled.setdefault(key, []).append(destination.name)
                    run.backfill_ids[key] = table_state.backfill.id
            marks = [r.watermark for rs in run.results.values() for n, r in rs if n == destination.name]
            known = [m for m in marks if m is not None]
            if known:
                run.watermarks[destination.name] = _key_text(min(known))
        finally:
            destination.close()

    def _prune(
        self, store: StateStore, state: PipelineState, changelog: Changelog, retention: timedelta
    ) -> PipelineState:
        """Take the segments no destination needs any more out of the state, then delete the
        segment files the state does not list that are older than ``retention`` (a crash in
        between leaves files for the next run, never a listed segment without its file)."""
        names = [destination_name(c) for c in self.destinations]
        if unneeded_segments(state, names):

            def drop(current: PipelineState) -> PipelineState:  # decided again on the state saved
                gone = {s.path for s in unneeded_segments(current, names)}
                return current.with_segments(s for s in current.segments if s.path not in gone)

            state = update_state(store, self.pipeline, drop)
        now = datetime.now(UTC)
        expired = expired_files(changelog.segment_files(), state, now=now, retention=retention)
        changelog.delete_segments(expired)
        self.log.info(
            "retention: the state lists %d changelog segment(s) a destination still needs; %d file(s) "
            "every destination is done with and older than %s deleted",
            len(state.segments),
            len(expired),
            retention,
        )
        return state

    def _discard_backfills(self, run: _Run, state: PipelineState) -> None:
        """Staged rows a destination has taken are not needed again."""
        for config in self.destinations:
            if not any(destination_name(config) in names for names in run.backfilled.values()):
                continue
            destination = open_destination(config)
            try:
                for key, names in run.backfilled.items():
                    pending = state.tables[key].backfill
                    if destination.name in names and pending is not None:
                        destination.discard_backfill(pending.staged[destination.name])
            finally:
                destination.close()


@dataclass
class _Run:
    """What one apply run found: per table the result in each destination, the decisions to
    record (table, destination, the lineage and phase each was decided from, result), watermarks,
    backfills taken, and the destinations it could not reach or open."""

    changelog: Changelog
    results: dict[str, list[tuple[str, TableApplied]]] = field(default_factory=dict)
    decisions: list[tuple[str, str, str, TablePhase, TableApplied]] = field(default_factory=list)
    watermarks: dict[str, str] = field(default_factory=dict)
    backfilled: dict[str, list[str]] = field(default_factory=dict)
    backfill_ids: dict[str, str] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)
    unopened: list[str] = field(default_factory=list)
    """Destinations that could not be opened for a lasting reason (their phases stay)."""
    request: str = ""
    """The id of this run's rebaseline requests (a request id adds its destinations' digest)."""

    def summary(self, saved: PipelineState) -> dict[str, Any]:
        """Per table: the changes applied (a backfill's rows count too: they may change the
        destination's table), in all and per destination, and the phase it shows now."""
        found: dict[str, Any] = {}
        for key, rs in self.results.items():
            per = {name: r.applied + (r.backfilled or 0) for name, r in rs}
            phase = saved.tables[key].phase.kind if key in saved.tables else rs[0][1].phase.kind
            found[key] = {"applied": sum(per.values()), "phase": phase, "destinations": per}
        return found

    def stamp_requests(self) -> None:
        """Give each rebaseline a schema change decided in this run its request id: one per set of
        destinations a table went back in, so the baseline runs triggered group tables as before
        and a request sent again maps to the same run (``dags/schema_changes.py``)."""
        sent: dict[str, list[str]] = {}
        for key, name, _lineage, _before, result in self.decisions:
            if result.schema_change is not None and isinstance(result.phase, Init):
                sent.setdefault(key, []).append(name)
        stamped = []
        for key, name, lineage, before, result in self.decisions:
            if key in sent and name in sent[key] and result.schema_change is not None:
                digest = hashlib.sha256("\0".join(sorted(sent[key])).encode()).hexdigest()[:8]
                phase = Init(reason=result.schema_change, request=f"{self.request}-{digest}")
                result = replace(result, phase=phase)
            stamped.append((key, name, lineage, before, result))
        self.decisions = stamped

    def record(self, current: PipelineState) -> PipelineState:
        """The decisions on ``current``: each phase move a compare-and-set on the lineage it was
        decided for (a rebaseline that started meanwhile wins; the decision is dropped)."""
        for key, name, lineage, before, result in self.decisions:
            if key not in current.tables:
                continue
            current = current.with_destination_watermark(key, name, _mark_text(result.watermark))
            have = current.tables[key].destination(name)
            if (
                result.phase == before
                or have.phase == result.phase
                or (isinstance(have.phase, Errored) and isinstance(result.phase, Errored))
                or (isinstance(have.phase, Init) and isinstance(result.phase, Init))
            ):
                # unchanged: an Errored destination that failed again stays as it was; one in Init
                # meanwhile keeps its reason (Init -> Init is no move)
                continue
            try:
                current = current.with_destination_phase(key, name, result.phase, lineage=lineage)
            except StaleDecisionError as exc:
                log.warning("apply: %s", exc)
        for name, value in self.watermarks.items():
            current = current.with_watermark(name, value)
        for key, names in self.backfilled.items():
            current = _backfill_applied(current, key, self.backfill_ids.get(key, ""), names)
        return current


def pending_rebaselines(state: PipelineState, names: Sequence[str]) -> list[dict[str, str]]:
    """Each (table, destination of ``names``) whose rebaseline a schema change requested and
    that no baseline has started since (Init with a reason), as XCom ``schema_rebaselines`` lists it."""
    found = []
    for key, ts in state.tables.items():
        for name in names:
            phase = ts.destination(name).phase
            if isinstance(phase, Init) and phase.pending:
                item = {"table": key, "destination": name, "reason": phase.reason, "request": phase.request}
                found.append(item)
    return found


def _push_rebaselines(ti: Any, state: PipelineState, names: Sequence[str]) -> list[dict[str, str]]:
    """List the rebaselines pending in ``state`` in XCom ``schema_rebaselines`` (replacing what
    this try pushed before); returns them."""
    pending = pending_rebaselines(state, names)
    if ti is not None:
        ti.xcom_push(key=REBASELINES_XCOM, value=pending)
    return pending


def _errored(state: PipelineState, names: list[str]) -> list[str]:
    """Each table Errored in one of the destinations ``names``, with reason and remedy."""
    found = []
    for key, ts in state.tables.items():
        for name in names:
            phase = ts.destination(name).phase
            if isinstance(phase, Errored):
                found.append(
                    f"table {key} in destination {name} is Errored: {phase.reason}; remedy: {phase.solution}"
                    f" (retry: {phase.retry})"
                )
    return found


def _mark_text(key: tuple[int, int] | None) -> str | None:
    return None if key is None else _key_text(key)


def _backfill_applied(state: PipelineState, key: str, backfill_id: str, names: list[str]) -> PipelineState:
    """Record that destinations ``names`` took backfill ``backfill_id`` of the table; once all
    have it, it is done. A table whose backfill went meanwhile (rebaselined, or a phase change
    above) is left alone."""
    current = state.tables.get(key)
    if current is None or current.backfill is None or current.backfill.id != backfill_id:
        return state
    done = replace(current.backfill, applied=(*current.backfill.applied, *names))
    return state.with_backfill(key, done if done.pending else None)


def _key_text(key: tuple[int, int] | None) -> str:
    return "none" if key is None else f"{LSN(key[0])}/{key[1]}"
