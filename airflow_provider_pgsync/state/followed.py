"""Which table of the pipeline's state a config's table is, and its name in the source now.

A table is followed by its relation OID (``TableState.relation_id``), so ``ALTER TABLE ...
RENAME`` in the source does not make it another table. The pipeline keeps the name it was set
up with (its state key, destination tables and changelog paths), and every read of the source
uses the table's current name. A config may name the table by either name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import PipelineState, TableState


@dataclass(frozen=True)
class FollowedTable:
    """A config's table matched to the pipeline: ``key`` is the pipeline's name of it (state key,
    destination tables, changelog), ``source`` its name in the source now, ``relation_id`` its
    relation OID (None when the source has no table of that name)."""

    config: TableRef
    key: TableRef
    source: TableRef
    relation_id: int | None

    @property
    def renamed(self) -> bool:
        return self.source != self.key


def follow(
    state: PipelineState,
    tables: Iterable[TableRef],
    names_by_oid: Mapping[int, TableRef],
    oids_by_name: Mapping[TableRef, int],
) -> list[FollowedTable]:
    """Match each config table to the state's table it is, in order.

    ``names_by_oid`` is the source's current name of each relation OID the state records (a
    dropped table has none), ``oids_by_name`` the OID of each config table that exists in the
    source. A config table is the state's table of its name (followed to its current source
    name by OID), else the state's table with its OID or recorded source name (it names the
    new name of a renamed table), else a new table. ConfigError when two config tables are one.
    """
    found: list[FollowedTable] = []
    by_key: dict[TableRef, TableRef] = {}
    for table in tables:
        followed = _follow_one(state, table, names_by_oid, oids_by_name)
        other = by_key.setdefault(followed.key, table)
        if other != table:
            raise ConfigError(
                f"tables {other} and {table} of pipeline {state.pipeline!r} are one table "
                f"(relation OID {followed.relation_id}, kept by the pipeline as {followed.key}): "
                "list it once"
            )
        found.append(followed)
    return found


def pipeline_name(state: PipelineState, name: TableRef | str) -> str:
    """The pipeline's name (state key) of the table a config names ``name``: itself, or the state's
    table recorded as renamed to it in the source (setup and capture record it)."""
    key = str(TableRef.parse(name) if isinstance(name, str) else name)
    if key in state.tables:
        return key
    match = next((ts for ts in state.tables.values() if str(ts.source_name) == key), None)
    return match.key if match is not None else key


def _follow_one(
    state: PipelineState,
    table: TableRef,
    names_by_oid: Mapping[int, TableRef],
    oids_by_name: Mapping[TableRef, int],
) -> FollowedTable:
    known = state.tables.get(str(table))
    if known is not None:
        current = names_by_oid.get(known.relation_id) if known.relation_id is not None else None
        if current is not None:
            return FollowedTable(table, table, current, known.relation_id)
        # not followed yet, or its relation is gone: the table of that name (if any)
        return FollowedTable(table, table, table, oids_by_name.get(table))
    oid = oids_by_name.get(table)
    match = state.table_by_relation_id(oid) if oid is not None else None
    if match is None:
        match = _by_source_name(state.tables.values(), table)
        if match is not None and oid is not None and match.relation_id not in (None, oid):
            match = None  # another table of that name now: the recorded one was replaced
    if match is not None:
        return FollowedTable(table, match.table, table, oid)
    return FollowedTable(table, table, table, oid)


def _by_source_name(tables: Iterable[TableState], name: TableRef) -> TableState | None:
    return next((ts for ts in tables if ts.source_name == name), None)
