"""The phase moves a baseline makes for one table, per destination it writes (pure functions of
the state, for ``update_state``).

A baseline runs under a lineage id made for it; it moves only the destinations it writes,
and each later move names that lineage, so a baseline that was overtaken (the destination
was rebaselined again meanwhile) records nothing over the newer one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from airflow_provider_pgsync.state.model import ColumnInfo, PipelineState, TableState
from airflow_provider_pgsync.state.phases import DataSync, Errored, Init, SyncDone


def started(
    state: PipelineState, key: str, destinations: Sequence[str], lineage: str, *, restart: bool
) -> PipelineState:
    """Each destination of ``destinations`` in DataSync{lineage}; through Init first when it is
    not there yet and ``restart`` is asked (a rebaseline, or a retried attempt). A table new to
    the state enters Init first. PhaseTransitionError when a destination cannot start (e.g.
    another baseline runs and no restart was asked)."""
    if key not in state.tables:
        state = state.with_table_phase(key, Init())
    for name in destinations:
        current = state.table(key).destination(name).phase
        if restart and not isinstance(current, Init):
            state = state.with_destination_phase(key, name, Init())
        state = state.with_destination_phase(key, name, DataSync(lineage))
    return state


def copied_version(table: TableState, columns: Sequence[ColumnInfo]) -> int:
    """The schema version of the columns a baseline read: the state's when capture last saw the
    same columns (or none yet), else the next one (the table changed after capture last saw
    it; capture numbers that change so when it sees it)."""
    known = tuple(table.columns)
    if not known or [_shape(c) for c in known] == [_shape(c) for c in columns]:
        return table.schema_version
    return table.schema_version + 1


def _shape(column: ColumnInfo) -> tuple[str, int, int]:
    return column.name, column.type_oid, column.type_modifier


def finished(state: PipelineState, key: str, destinations: Sequence[str], done: SyncDone) -> PipelineState:
    """Each destination of ``destinations`` in SyncDone ``done`` (which names the lineage); a
    destination rebaselined again meanwhile refuses it (StaleDecisionError)."""
    for name in destinations:
        state = state.with_destination_phase(key, name, done, lineage=done.lineage)
    return state


def failed(
    state: PipelineState, key: str, destinations: Sequence[str], lineage: str, errored: Errored
) -> PipelineState:
    """Each destination of ``destinations`` still running baseline ``lineage`` in ``errored``;
    the others (moved on meanwhile) are left as they are."""
    if key not in state.tables:
        return state
    for name in destinations:
        current = state.table(key).destination(name)
        if current.lineage == lineage and isinstance(current.phase, DataSync):
            state = state.with_destination_phase(key, name, errored, lineage=lineage)
    return state


def concluded(
    state: PipelineState,
    key: str,
    succeeded: Sequence[str],
    done: SyncDone,
    errored: Mapping[str, Errored],
) -> PipelineState:
    """The outcome of a baseline that succeeded in some destinations and failed in others, in
    one move: each of ``succeeded`` in SyncDone ``done`` (``finished``), each destination of
    ``errored`` in its own Errored (``failed``: one moved on meanwhile is left as it is)."""
    state = finished(state, key, succeeded, done)
    for name, phase in errored.items():
        state = failed(state, key, [name], done.lineage, phase)
    return state
