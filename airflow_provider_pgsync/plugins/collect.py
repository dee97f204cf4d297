"""Reading the status page's figures: the pipeline config, each pipeline's state, its source
(slot lag and row estimates), its changelog (bytes per table) and Airflow's metadata database
(task end dates, capture XComs, the destination tables' asset events, the last reconciliation).

Nothing here writes: the PostgreSQL state table is read without being created, and a failure
of one part becomes a ``Problem`` naming the object and the remedy, never an exception.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from airflow_provider_pgsync.changelog.paths import table_folder
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.dags.assets import table_asset
from airflow_provider_pgsync.errors import PgSyncError, SourceUnavailableError
from airflow_provider_pgsync.hooks.postgres_state_store import TABLE as STATE_TABLE
from airflow_provider_pgsync.hooks.postgres_state_store import state_from_row, state_query
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.pipeline import PipelineConfig, load_pipelines
from airflow_provider_pgsync.plugins.access import Access
from airflow_provider_pgsync.plugins.history import last_events, last_reconcile, reconcile_dag_id
from airflow_provider_pgsync.plugins.status import (
    DestinationFacts,
    PipelineStatus,
    Problem,
    SlotStatus,
    StatusPage,
    lag_history,
    lag_seconds,
    table_rows,
    watermarks,
)
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.triggers.probes import read_slot_lag

log = logging.getLogger(__name__)

CONFIG_ENV = "PGSYNC_CONFIG"
HISTORY_RUNS = 30
"""How many recent capture runs the lag chart shows."""

T = TypeVar("T")

# reltuples is the planner's estimate (-1: never vacuumed or analyzed); a partitioned table
# has none of its own, so its leaf partitions' estimates are summed
_ESTIMATES = sql.SQL(
    """
    SELECT t.key,
           CASE WHEN c.relkind = 'p' THEN
                (SELECT CASE WHEN bool_and(l.reltuples < 0) THEN -1
                             ELSE coalesce(sum(greatest(l.reltuples, 0)), 0) END
                 FROM pg_partition_tree(c.oid) p JOIN pg_class l ON l.oid = p.relid
                 WHERE p.isleaf)
                ELSE c.reltuples END::float8
    FROM unnest(%s::text[], %s::text[], %s::text[]) AS t(key, nsp, rel)
    JOIN pg_namespace n ON n.nspname = t.nsp
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.rel
    """
)


def cdc_dag_id(pipeline: str) -> str:
    """The id of a pipeline's cdc DAG, whose ``capture`` and ``apply`` tasks the page reads."""
    return f"pgsync_{pipeline}_cdc"


def collect_page(
    config_path: str | None = None, *, access: Access, now: datetime | None = None
) -> StatusPage:
    """The status of every pipeline of the config (``$PGSYNC_CONFIG`` by default) that ``access``
    lets the user see; the others are left out before anything about them is read."""
    now = now or datetime.now(UTC)
    path = config_path if config_path is not None else os.environ.get(CONFIG_ENV, "")
    if not path:
        problem = Problem(
            "pipeline config",
            f"${CONFIG_ENV} is not set in the API server's environment",
            f"set {CONFIG_ENV} to the YAML file the pgsync DAGs read, then restart the API server",
        )
        return StatusPage(now, "(not set)", problems=(problem,))
    details = access.may_read_config()
    shown_path = path if details else ""
    try:
        configs = load_pipelines(path)
    except PgSyncError as exc:
        if details:
            remedy = "fix the file; the pgsync DAGs fail on it too"
            problem = Problem(f"pipeline config {path}", str(exc), remedy)
        else:  # the message may name any pipeline, and the path is the deployment's
            problem = Problem(
                "pipeline config",
                "the pipeline config cannot be loaded",
                "ask an Airflow admin: users who may read Airflow's configuration see the reason here",
            )
        return StatusPage(now, shown_path, problems=(problem,))
    visible = [c for c in configs if access.may_read_pipeline(c)]
    return StatusPage(now, shown_path, tuple(collect_pipeline(c, now=now) for c in visible))


def collect_pipeline(config: PipelineConfig, *, now: datetime) -> PipelineStatus:
    """One pipeline's status; each part that fails adds a Problem and leaves its figures unknown.

    An unreachable source is one problem of its own; the tables' phases are still shown from
    the state when the state store is elsewhere (Airflow Variables or a control database).
    """
    problems: list[Problem] = []
    source = PgReplicationHook(postgres_conn_id=config.source_conn_id)
    facts, reachable = read_source(problems, source, config)
    control = config.state.conn_id
    state_on_source = config.state.backend == "postgres" and control in (None, config.source_conn_id)
    if reachable or not state_on_source:
        state = _guard(
            problems,
            f"state of pipeline {config.name}",
            lambda: load_state(config, source),
            f"check that the {config.state.backend} state store can be read (see the message)",
        )
    else:
        state = None
        problems.append(
            Problem(
                f"state of pipeline {config.name}",
                "the state is kept in the source database, which could not be reached, so the "
                "tables' phases are unknown",
                "make the source reachable (see the problem above); the phases are shown again then",
            )
        )
    if state is not None and state.version == 0:
        setup = f"run the DAG pgsync_{config.name}_setup to set the pipeline up"
        problems.append(
            Problem(
                f"state of pipeline {config.name}",
                f"no state is saved in the {config.state.backend} state store",
                setup if reachable else f"once the source is reachable, {setup}",
            )
        )
    slot, estimates = facts if facts is not None else (None, None)
    if facts is not None and slot is None:
        problems.append(
            Problem(
                f"replication slot {config.slot_name}",
                "does not exist on the source",
                f"run the DAG pgsync_{config.name}_setup; if the slot was dropped after the baseline, "
                "rebaseline the pipeline's tables",
            )
        )
    dag = cdc_dag_id(config.name)
    meta = _guard(
        problems,
        f"Airflow metadata of DAG {dag}",
        lambda: airflow_facts(dag),
        "check the Airflow metadata database (airflow db check)",
    )
    last_capture, last_apply, runs = meta if meta is not None else (None, None, [])
    history, note = lag_history(runs)
    if not runs and meta is not None:
        note = f"no capture run of DAG {dag} returned a value yet"
    shown = state or PipelineState(config.name)
    sizes = _guard(
        problems,
        f"changelog of pipeline {config.name} ({config.changelog_uri})",
        lambda: Changelog(config.changelog_uri).segment_sizes(),
        "check that the changelog's storage can be read from the API server",
    )
    names = [d.name for d in config.destinations]
    keys = list(dict.fromkeys([*config.table_keys, *shown.tables]))
    applied = _guard(
        problems,
        f"asset events of pipeline {config.name}",
        lambda: applied_times(config.name, names, keys),
        "check the Airflow metadata database (airflow db check)",
    )
    reconcile_id = reconcile_dag_id(config.name)
    before = len(problems)
    reconciled = _guard(
        problems,
        f"the last reconciliation of pipeline {config.name} (DAG {reconcile_id})",
        lambda: last_reconcile(reconcile_id),
        "check the Airflow metadata database (airflow db check)",
    )
    known = DestinationFacts(
        applied_at=applied or {},
        reconciled={} if reconciled is None else reconciled.results,
        retained=None if sizes is None else bytes_by_table(sizes, keys),
    )
    return PipelineStatus(
        name=config.name,
        slot_name=config.slot_name,
        state_backend=config.state.backend,
        tables=table_rows(config.table_keys, state, estimates, names, known),
        state_version=shown.version,
        last_end_lsn=shown.last_end_lsn,
        watermarks=watermarks(shown),
        slot=slot,
        last_capture_at=last_capture,
        last_apply_at=last_apply,
        lag_seconds=lag_seconds(None if slot is None else slot.lag_bytes, last_capture, now),
        history=history,
        history_note=note,
        problems=tuple(problems),
        changelog_segments=len(shown.segments),
        changelog_bytes=None if sizes is None else sum(sizes.values()),
        state_known=state is not None,
        reconcile=reconciled,
        reconcile_known=len(problems) == before,
    )


def applied_times(
    pipeline: str, destinations: Sequence[str], tables: Sequence[str]
) -> dict[tuple[str, str], datetime]:
    """When changes were last applied to each ``(table, destination)``: its asset's latest event."""
    assets = {table_asset(pipeline, d, t).uri: (t, d) for d in destinations for t in tables}
    return {assets[uri]: at for uri, at in last_events(assets).items()}


def bytes_by_table(sizes: Mapping[str, int], tables: Sequence[str]) -> dict[str, int]:
    """The bytes of each table's segment files (``sizes`` by path, the table's folder first)."""
    folders = {table_folder(TableRef.parse(t)): t for t in tables}
    found = dict.fromkeys(tables, 0)
    for path, size in sizes.items():
        table = folders.get(path.split("/", 1)[0])
        if table is not None:
            found[table] += size
    return found


def read_source(
    problems: list[Problem], source: PgReplicationHook, config: PipelineConfig
) -> tuple[tuple[SlotStatus | None, dict[str, float | None]] | None, bool]:
    """The source's figures (None when they could not be read) and whether a session was made;
    an unreachable source adds the one problem that says so."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return source_facts(source, config), True
    except SourceUnavailableError as exc:
        problems.append(source_unreachable(config, exc))
        return None, False
    except Exception as exc:
        conn_id = config.source_conn_id
        remedy = f"check that the source server runs and Airflow connection {conn_id!r} points at it"
        problems.append(_problem(f"source connection {conn_id!r}", exc, remedy))
        return None, not isinstance(exc, AirflowNotFoundException)


def source_unreachable(config: PipelineConfig, exc: SourceUnavailableError) -> Problem:
    """The problem of a source the API server cannot connect to: the connection, the driver's error
    (it names host and port) and what to check; nothing about the state or the setup DAG."""
    cause = exc.__cause__ if isinstance(exc.__cause__, psycopg.Error) else exc
    error = "; ".join(" ".join(line.split()) for line in str(cause).splitlines() if line.strip())
    conn_id = config.source_conn_id
    return Problem(
        f"source of pipeline {config.name}",
        f"source unreachable: {conn_id}, {error}",
        f"check that the source server runs and accepts connections from the Airflow API server "
        f"(host, port, firewall, pg_hba.conf), and that Airflow connection {conn_id!r} points at it "
        "with the right database, user, password and TLS settings; capture and baselines cannot "
        "run until it is reachable, and the slot keeps the changes meanwhile",
    )


def _guard(problems: list[Problem], subject: str, read: Callable[[], T], remedy: str) -> T | None:
    """``read()``, or None with a Problem about ``subject`` (and ``remedy``) when it fails."""
    try:
        return read()
    except Exception as exc:  # the page must render
        problems.append(_problem(subject, exc, remedy))
    return None


def _problem(subject: str, exc: Exception, remedy: str) -> Problem:
    """The problem that reading ``subject`` failed with ``exc``."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    if isinstance(exc, AirflowNotFoundException):
        missing = "define the Airflow connection where the API server sees it (UI, CLI or AIRFLOW_CONN_*)"
        return Problem(subject, f"an Airflow connection is not defined: {exc}", missing)
    if isinstance(exc, PgSyncError):
        return Problem(subject, str(exc), remedy)
    if isinstance(exc, psycopg.Error):
        return Problem(subject, f"{type(exc).__name__}: {str(exc).strip()}", remedy)
    # the traceback goes to the API server's log
    log.error("pgsync status: reading %s failed", subject, exc_info=exc)
    logged = f"{remedy}; the API server's log has the traceback"
    return Problem(subject, f"{type(exc).__name__}: {exc}", logged)


# ---- state ----------------------------------------------------------------------------------


def load_state(config: PipelineConfig, source: PgReplicationHook) -> PipelineState:
    """The pipeline's saved state (version 0 when none is saved), read without writing anything."""
    control = PgReplicationHook(postgres_conn_id=config.state.conn_id) if config.state.conn_id else source
    if config.state.backend == "postgres":
        with control.connect() as conn:
            return read_postgres_state(conn, config.name, schema=config.state.schema)
    from airflow_provider_pgsync.hooks.variable_state_store import VariableStateStore

    return VariableStateStore(lock=control).load(config.name)  # load takes no lock


def read_postgres_state(conn: psycopg.Connection[Any], pipeline: str, *, schema: str) -> PipelineState:
    """The state row of ``pipeline`` in ``<schema>.pipeline_state``; a fresh state when there is none."""
    found = conn.execute(
        "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL", (schema, STATE_TABLE)
    ).fetchone()
    if not found or not found[0]:
        return PipelineState(pipeline)
    return state_from_row(pipeline, conn.execute(state_query(schema), (pipeline,)).fetchone(), schema=schema)


# ---- source ---------------------------------------------------------------------------------


def source_facts(
    source: PgReplicationHook, config: PipelineConfig
) -> tuple[SlotStatus | None, dict[str, float | None]]:
    """The slot's lag figures (None: no such slot) and the tables' row estimates, in one session."""
    with source.connect() as conn:
        lag = read_slot_lag(conn, config.slot_name)
        estimates = row_estimates(conn, config.table_keys)
    if lag is None:
        return None, estimates
    slot = SlotStatus(
        slot_name=lag.slot_name,
        active=bool(lag.active),
        wal_status=lag.wal_status,
        current_lsn=_lsn(lag.current_lsn),
        confirmed_flush_lsn=_lsn(lag.confirmed_flush_lsn),
        lag_bytes=None if lag.unconfirmed_bytes is None else int(lag.unconfirmed_bytes),
    )
    return slot, estimates


def row_estimates(conn: psycopg.Connection[Any], keys: Sequence[str]) -> dict[str, float | None]:
    """``pg_class.reltuples`` of each table key (-1: never analyzed); None for a table not found."""
    refs = [TableRef.parse(k) for k in keys]
    rows = conn.execute(
        _ESTIMATES, ([str(r) for r in refs], [r.schema for r in refs], [r.name for r in refs])
    ).fetchall()
    found: dict[str, float | None] = dict.fromkeys(keys)
    found.update((str(key), None if value is None else float(value)) for key, value in rows)
    return found


def _lsn(text: str | None) -> LSN | None:
    return None if text is None else LSN.parse(str(text))


# ---- Airflow's metadata database -------------------------------------------------------------


def airflow_facts(dag_id: str) -> tuple[datetime | None, datetime | None, list[tuple[datetime, str, Any]]]:
    """End dates of the last successful ``capture`` and ``apply`` task of ``dag_id``, and the
    XCom return values of its recent capture runs ``(time, run id, value)``, newest first."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import func, select

    def last_end(session: Any, task_id: str) -> datetime | None:
        query = select(func.max(TaskInstance.end_date)).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.task_id == task_id,
            TaskInstance.state == TaskInstanceState.SUCCESS,
        )
        value = session.scalar(query)
        return None if value is None else _aware(value)

    with create_session() as session:
        capture_end, apply_end = last_end(session, "capture"), last_end(session, "apply")
        rows = session.execute(
            select(XComModel.value, XComModel.run_id, XComModel.timestamp)
            .where(
                XComModel.dag_id == dag_id,
                XComModel.task_id == "capture",
                XComModel.key == "return_value",
                XComModel.map_index == -1,
            )
            .order_by(XComModel.timestamp.desc())
            .limit(HISTORY_RUNS)
        ).all()
        runs = [(_aware(r.timestamp), str(r.run_id), XComModel.deserialize_value(r)) for r in rows]
    return capture_end, apply_end, runs


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
