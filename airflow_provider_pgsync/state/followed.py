"""Which table of the pipeline's state a config's table is, and its name in the source now.

A table is followed by its relation OID (``TableState.relation_id``), so ``ALTER TABLE ...
RENAME`` in the source does not make it another table. The pipeline keeps the name it was set
up with (its state key, destination tables and changelog paths), and every read of the source
uses the table's current name. A config may name the table by either name.

A table whose relation is gone from the source (dropped there) is never taken for the table
created later under its name: ``FollowedTable.gone_id`` tells, and only setup follows the new
table, sending the pipeline's table back to baseline (``TableState.followed_anew``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from airflow_provider_pgsync.errors import ConfigError, StateError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import PipelineState, TableState


@dataclass(frozen=True)
class FollowedTable:
    """A config's table matched to the pipeline: ``key`` is the pipeline's name of it (state key,
    destination tables, changelog), ``source`` its name in the source now, ``relation_id`` its
    relation OID (None when the source has no table of that name). ``gone_id`` is the relation
    OID the state follows for ``key`` when that relation is gone from the source (dropped there):
    then ``relation_id``, if any, is another table that has the name now (``replaced``)."""

    config: TableRef
    key: TableRef
    source: TableRef
    relation_id: int | None
    gone_id: int | None = None

    @property
    def renamed(self) -> bool:
        return self.source != self.key

    @property
    def replaced(self) -> bool:
        """The followed table is gone, and another one has its name in the source now."""
        return self.gone_id is not None and self.relation_id is not None

    def check_present(self, pipeline: str) -> None:
        """StateError naming the remedy when the table the pipeline follows is gone from the source
        (a baseline or backfill would read another table, or none)."""
        if self.gone_id is None:
            return
        gone = f"table {self.key} (relation OID {self.gone_id}) was dropped in the source"
        if self.replaced:
            raise StateError(
                f"{gone}, and {self.source} is another table now (relation OID {self.relation_id}); "
                f"nothing was copied: run the setup DAG of pipeline {pipeline!r}, which follows the new "
                "table and baselines it into every destination"
            )
        raise StateError(
            f"{gone}; nothing was copied: its destinations keep its rows as of the drop. Take it out of "
            f"pipeline {pipeline!r}: remove it from the pipeline's tables, run the setup DAG, then the "
            "teardown DAG with param tables naming it"
        )


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
        held = state.tables.get(str(followed.key))
        if held is not None and held.relation_id is not None and held.relation_id not in names_by_oid:
            followed = replace(followed, gone_id=held.relation_id)
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
