"""Pipeline and per-table state as frozen values with JSON (de)serialisation; no I/O.

Table phases and their transitions live in ``state.phases`` (re-exported here). Where
a table is a dict key it is the text of its ``TableRef`` (``str(ref)``, e.g.
``public.orders`` or ``"Sales Data"."Odd ""Name"``), which ``TableRef.parse`` reads
back exactly. ``PipelineState.version`` is the compare-and-set version of the store
(0 = never saved); the helpers return new states and never touch it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_provider_pgsync.errors import ConfigError, StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef, validate_slot_name
from airflow_provider_pgsync.state.backfill import Backfill
from airflow_provider_pgsync.state.columns import VALUE_REWRITES, ColumnInfo, SchemaChange, same_shape
from airflow_provider_pgsync.state.destination import DestinationState, check_destination_name
from airflow_provider_pgsync.state.dropped import SourceDrop
from airflow_provider_pgsync.state.phases import (
    XID_MAX,
    DataSync,
    Errored,
    Init,
    Ready,
    Retry,
    SyncDone,
    TablePhase,
    check_transition,
    table_key,
    worst,
)
from airflow_provider_pgsync.state.segment import SegmentInfo

__all__ = [
    "FORMAT",
    "XID_MAX",
    "Backfill",
    "ColumnInfo",
    "DataSync",
    "DestinationState",
    "Errored",
    "Init",
    "PipelineState",
    "Ready",
    "Retry",
    "SchemaChange",
    "SegmentInfo",
    "SourceDrop",
    "SyncDone",
    "TablePhase",
    "TableState",
    "check_transition",
    "table_key",
    "validate_pipeline_name",
]

FORMAT = 2
"""Version of the JSON layout written by ``PipelineState.to_json`` (1: one phase per table)."""

_PIPELINE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")


# ---- tables and segments ------------------------------------------------------------------


@dataclass(frozen=True)
class TableState:
    """A table of the pipeline: its state in each destination, the last known columns
    (schema version), and a backfill waiting for apply (only while the table stays Ready).

    ``destinations`` maps a destination name to its ``DestinationState``; a destination
    without an entry is in ``fallback`` (Init after setup; the one phase of a state written
    before destinations had their own). ``phase`` is what users see: the worst phase of the
    table's destinations.
    """

    table: TableRef
    fallback: TablePhase = field(default_factory=Init)
    schema_version: int = 0
    columns: tuple[ColumnInfo, ...] = ()
    backfill: Backfill | None = None
    destinations: Mapping[str, DestinationState] = field(default_factory=dict)
    ddl: SchemaChange | None = None
    """DDL the source's trigger reported since the last schema version (None: none)."""
    relation_id: int | None = None
    """The source table's relation OID (pg_class.oid): the table is followed by it through a
    ``RENAME``. None in states written before it was recorded (capture records it)."""
    source_name: TableRef | None = None
    """The table's current name in the source when it differs from ``table`` (it was renamed
    there); the pipeline keeps ``table`` as its name (key, destination tables, changelog)."""
    dropped: SourceDrop | None = None
    """Where the table followed (``relation_id``) was dropped in the source (``state/dropped.py``);
    None while it exists. Its destinations keep their phases and the table's last rows."""

    def __post_init__(self) -> None:
        if not isinstance(self.table, TableRef):
            raise StateError(f"TableState.table must be a TableRef, not {self.table!r}")
        if self.relation_id is not None and (
            isinstance(self.relation_id, bool)
            or not isinstance(self.relation_id, int)
            or self.relation_id <= 0
        ):
            raise StateError(f"table {self.table}: relation_id {self.relation_id!r} is not a positive OID")
        if self.source_name == self.table:
            object.__setattr__(self, "source_name", None)
        if self.schema_version < 0:
            raise StateError(f"table {self.table}: schema_version {self.schema_version} is negative")
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "destinations", dict(self.destinations))
        for name in self.destinations:
            check_destination_name(name)
        if self.backfill is not None and not isinstance(self.phase, Ready):
            raise StateError(f"table {self.table}: a backfill needs the table Ready, not {self.phase.kind}")

    @property
    def key(self) -> str:
        return str(self.table)

    @property
    def source_table(self) -> TableRef:
        """The table's current name in the source (``table`` unless renamed there)."""
        return self.source_name or self.table

    def with_source(self, relation_id: int | None, source_name: TableRef) -> TableState:
        """The table followed by relation OID ``relation_id``, named ``source_name`` in the source now."""
        return replace(self, relation_id=relation_id, source_name=source_name)

    def with_dropped(self, drop: SourceDrop) -> TableState:
        """The table dropped in the source as ``drop`` says (the first record of it stays)."""
        return self if self.dropped is not None else replace(self, dropped=drop)

    def followed_anew(self, relation_id: int, source_name: TableRef) -> TableState:
        """The table followed as relation ``relation_id`` from now on, since the one it followed is
        gone from the source: a new table under the pipeline's name, so its columns are not known
        yet (the next schema version starts with them) and every destination, holding the old
        table's rows, goes back to Init for a baseline."""
        fresh = replace(
            self,
            relation_id=relation_id,
            source_name=source_name,
            dropped=None,
            columns=(),
            ddl=None,
            schema_version=self.schema_version + 1,
        )
        return fresh.rebaselined()

    @property
    def phase(self) -> TablePhase:
        """The phase users see: the worst of the destinations' (``fallback`` when none has its own)."""
        found = worst(d.phase for d in self.destinations.values())
        return found if found is not None else self.fallback

    def destination(self, name: str) -> DestinationState:
        """The table in destination ``name`` (in ``fallback`` when it has no state of its own)."""
        found = self.destinations.get(name)
        return found if found is not None else DestinationState(self.fallback)

    def with_phase(self, phase: TablePhase) -> TableState:
        """The table in ``phase`` in every destination it has a state for, or (none yet) its
        ``fallback``; each move checked (PhaseTransitionError when one is illegal). A pending
        backfill is dropped."""
        if self.destinations:
            moved = {name: d.moved(self.key, name, phase) for name, d in self.destinations.items()}
            return replace(self, destinations=moved, backfill=None)
        check_transition(self.table, self.fallback, phase)
        if isinstance(phase, Errored) and not phase.previous:
            phase = replace(phase, previous=self.fallback.kind)
        return replace(self, fallback=phase, backfill=None)

    def with_destination(self, name: str, phase: TablePhase, *, lineage: str | None = None) -> TableState:
        """The table with destination ``name`` moved to ``phase``, decided for baseline
        ``lineage`` (see ``DestinationState.moved``). A pending backfill is dropped when the
        move changes anything."""
        current = self.destination(check_destination_name(name))
        moved = current.moved(self.key, name, phase, lineage=lineage)
        if moved == current and name in self.destinations:
            return self
        return replace(self, destinations={**self.destinations, name: moved}, backfill=None)

    def rebaselined(self) -> TableState:
        """The table back in Init in every destination (and its fallback): each needs a new
        baseline. Destinations already in Init stay as they are."""
        moved = {
            name: d if isinstance(d.phase, Init) else d.moved(self.key, name, Init())
            for name, d in self.destinations.items()
        }
        return replace(self, fallback=Init(), destinations=moved, backfill=None)

    def with_destination_watermark(self, name: str, watermark: str | None) -> TableState:
        """Record the watermark apply saw in destination ``name`` (no phase change)."""
        current = self.destination(check_destination_name(name))
        return replace(self, destinations={**self.destinations, name: current.with_watermark(watermark)})

    def check_backfill(self) -> None:
        """StateError naming the remedy unless a new backfill may start: the table is Ready
        and has none waiting for apply."""
        if not isinstance(self.phase, Ready):
            raise StateError(
                f"table {self.key} is {self.phase.kind}, not Ready: a backfill re-sends rows of a streaming "
                "table; let the cdc DAG bring it to Ready, or rebaseline it"
            )
        if self.backfill is not None:
            raise StateError(
                f"table {self.key} has backfill {self.backfill.id} ({self.backfill.condition or 'all rows'}) "
                f"waiting for apply into {', '.join(self.backfill.pending)}: run the cdc DAG to apply it, "
                "then backfill again"
            )

    def with_backfill(self, backfill: Backfill | None) -> TableState:
        """The table with ``backfill`` pending (None: none); a new one only as ``check_backfill``
        allows, a pending one may be updated (destinations that have it)."""
        if backfill is not None and (self.backfill is None or self.backfill.id != backfill.id):
            self.check_backfill()
        return replace(self, backfill=backfill)

    def with_columns(self, columns: Iterable[ColumnInfo]) -> TableState:
        """Record the columns of a Relation message; a change of known columns is a new schema version.

        The first columns ever seen keep the current version (nothing to compare with).
        """
        return self.with_relation(tuple(columns))[0]

    def with_ddl(self, change: SchemaChange) -> TableState:
        """The table with ``change`` (a DDL message) added to the DDL seen since its last version."""
        return replace(self, ddl=(self.ddl or SchemaChange()).joined(change))

    def with_relation(
        self, columns: tuple[ColumnInfo, ...], catalog: tuple[ColumnInfo, ...] | None = None
    ) -> tuple[TableState, SchemaChange]:
        """Record the columns of a Relation message and the DDL seen since the last version.

        The columns' attnums and missing values come from the DDL trigger's last report, else
        the known columns, else ``catalog`` (read when capture started), whichever has the
        Relation's names and types. A new schema version starts when the columns differ (by
        shape, or by attnum where both sides know it: a column dropped and added again), when a
        DDL may have changed rows without WAL, or when the columns cannot be matched; the
        returned change (empty when no version started) says what the DDL did.
        """
        pending = self.ddl or SchemaChange()
        known = self.columns if self.columns and all(c.attnum for c in self.columns) else None
        facts = pending.columns if pending.columns is not None else known or catalog
        if facts is not None and same_shape(facts, columns):
            columns = facts
        elif pending.columns is not None:
            pending = pending.with_unproven(
                f"the DDL trigger reported columns {[c.name for c in pending.columns]} where the "
                f"Relation message has {[c.name for c in columns]}"
            )
        if not self.columns:
            return replace(self, columns=columns, ddl=None), SchemaChange()
        same = same_shape(self.columns, columns) and all(
            a.attnum == b.attnum or not (a.attnum and b.attnum)
            for a, b in zip(self.columns, columns, strict=True)
        )
        if same and not pending.unproven and not pending.rewrite & VALUE_REWRITES:
            if columns == self.columns and self.ddl is None:
                return self, SchemaChange()
            return replace(self, columns=columns, ddl=None), SchemaChange()
        change = replace(pending, columns=None)
        return replace(self, columns=columns, schema_version=self.schema_version + 1, ddl=None), change


# ---- the pipeline ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PipelineState:
    """Everything one pipeline (one slot + one publication) remembers between task runs.

    ``watermarks`` maps a destination name to its opaque watermark text (e.g.
    ``"commit_lsn/seq"``); ``tables`` maps ``table_key(table)`` to its state. Treat
    both mappings as read-only and use the ``with_*`` helpers.
    """

    pipeline: str
    version: int = 0
    slot_name: str | None = None
    slot_creation_lsn: LSN | None = None
    last_end_lsn: LSN | None = None
    segments: tuple[SegmentInfo, ...] = ()
    watermarks: Mapping[str, str] = field(default_factory=dict)
    tables: Mapping[str, TableState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_pipeline_name(self.pipeline)
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 0:
            raise StateError(f"pipeline {self.pipeline}: version {self.version!r} is not an integer >= 0")
        for key, ts in self.tables.items():
            if key != ts.key:
                raise StateError(f"pipeline {self.pipeline}: table state {ts.key} is filed under key {key!r}")
        object.__setattr__(self, "segments", tuple(self.segments))
        object.__setattr__(self, "watermarks", dict(self.watermarks))
        object.__setattr__(self, "tables", dict(self.tables))

    # ---- reading

    def table(self, table: TableRef | str) -> TableState:
        """The state of one table; StateError naming the pipeline when it is not part of it."""
        key = table_key(table)
        try:
            return self.tables[key]
        except KeyError:
            raise StateError(
                f"table {key} is not part of pipeline {self.pipeline!r}: add it to the pipeline's tables "
                "and run setup (it starts in phase Init)"
            ) from None

    def table_by_relation_id(self, relation_id: int) -> TableState | None:
        """The table followed by relation OID ``relation_id``, if any."""
        return next((ts for ts in self.tables.values() if ts.relation_id == relation_id), None)

    # ---- changing (each returns a new state)

    def with_table_phase(self, table: TableRef | str, phase: TablePhase) -> PipelineState:
        """Move a table to ``phase`` (checked); a table not yet in the pipeline may only enter Init."""
        key = table_key(table)
        current = self.tables.get(key)
        if current is None:
            check_transition(key, None, phase)
            ts = TableState(TableRef.parse(key))
        else:
            ts = current.with_phase(phase)
        return replace(self, tables={**self.tables, key: ts})

    def with_destination_phase(
        self, table: TableRef | str, destination: str, phase: TablePhase, *, lineage: str | None = None
    ) -> PipelineState:
        """Move one table in one destination to ``phase``, decided for baseline ``lineage``
        (None: whatever it is); see ``DestinationState.moved``."""
        ts = self.table(table).with_destination(destination, phase, lineage=lineage)
        return replace(self, tables={**self.tables, ts.key: ts})

    def with_destination_watermark(
        self, table: TableRef | str, destination: str, watermark: str | None
    ) -> PipelineState:
        """Record the watermark apply saw for one table in one destination."""
        ts = self.table(table).with_destination_watermark(destination, watermark)
        return replace(self, tables={**self.tables, ts.key: ts})

    def with_backfill(self, table: TableRef | str, backfill: Backfill | None) -> PipelineState:
        """Set or clear the pending backfill of a table (see ``TableState.with_backfill``)."""
        ts = self.table(table).with_backfill(backfill)
        return replace(self, tables={**self.tables, ts.key: ts})

    def with_first_columns(self, table: TableRef | str, columns: Iterable[ColumnInfo]) -> PipelineState:
        """Record ``columns`` for a table that has none yet (no change of it captured, so apply
        would know no columns: a key backfill read them from the catalog); known columns stay,
        as only capture may start a new schema version."""
        ts = self.table(table)
        if ts.columns:
            return self
        ts = ts.with_columns(columns)
        return replace(self, tables={**self.tables, ts.key: ts})

    def with_table_source(
        self, table: TableRef | str, relation_id: int | None, source_name: TableRef
    ) -> PipelineState:
        """Record the source's relation OID and current name of a table (see ``TableState``)."""
        ts = self.table(table).with_source(relation_id, source_name)
        return replace(self, tables={**self.tables, ts.key: ts})

    def with_table_followed_anew(
        self, table: TableRef | str, relation_id: int, source_name: TableRef
    ) -> PipelineState:
        """Follow another relation under the table's name (``TableState.followed_anew``)."""
        ts = self.table(table).followed_anew(relation_id, source_name)
        return replace(self, tables={**self.tables, ts.key: ts})

    def without_table(self, table: TableRef | str) -> PipelineState:
        """The state without ``table`` (a no-op when it is not there)."""
        key = table_key(table)
        return replace(self, tables={k: v for k, v in self.tables.items() if k != key})

    def with_segments(self, segments: Iterable[SegmentInfo]) -> PipelineState:
        """Replace the list of durable segments (after retention or compaction)."""
        return replace(self, segments=_ordered(segments))

    def with_capture(
        self,
        last_end_lsn: LSN,
        new_segments: Iterable[SegmentInfo] = (),
        tables: Iterable[TableState] = (),
    ) -> PipelineState:
        """Record one capture batch: its segments, the end LSN it reached and changed table schemas.

        A segment with the path of a known one replaces it (a re-run rewrites the same
        segment). ``tables`` update columns, schema versions, the DDL seen since, and the source's
        relation OID, name and drop only, never phases.
        """
        if self.last_end_lsn is not None and last_end_lsn < self.last_end_lsn:
            raise StateError(
                f"pipeline {self.pipeline!r}: capture would move the captured end LSN back from "
                f"{self.last_end_lsn} to {last_end_lsn}: the source's WAL is behind what this pipeline "
                "captured (a server restored from a backup, or the connection points at another server); "
                "nothing was recorded. Check the source connection; if that server is the source now, "
                "run the pipeline's teardown DAG and then its setup DAG (a new state and slot: every "
                "table is baselined again)"
            )
        by_path = {s.path: s for s in self.segments}
        by_path.update((s.path, s) for s in new_segments)
        updated = dict(self.tables)
        for ts in tables:
            old = self.table(ts.table)
            if ts.schema_version < old.schema_version:
                raise StateError(
                    f"table {ts.key}: schema version would go back from {old.schema_version} to "
                    f"{ts.schema_version}; derive it from the stored state with TableState.with_columns"
                )
            updated[ts.key] = replace(
                old,
                schema_version=ts.schema_version,
                columns=ts.columns,
                ddl=ts.ddl,
                relation_id=ts.relation_id,
                source_name=ts.source_name,
                dropped=ts.dropped,
            )
        return replace(self, last_end_lsn=last_end_lsn, segments=_ordered(by_path.values()), tables=updated)

    def capture_conflict(
        self,
        base: PipelineState,
        new_segments: Iterable[SegmentInfo] = (),
        tables: Iterable[TableState] = (),
    ) -> str | None:
        """Why a capture batch decoded from state ``base`` cannot be recorded on this (newer) state
        with ``self.with_capture(end, new_segments, tables)``; None when it can.

        Capture decodes from what it owns in ``base``: the slot identity, the captured end LSN,
        and each table's schema version, columns, DDL seen, relation OID and source name (the
        batch's schema versions are numbered from them, its Relations matched by them). A write
        meanwhile that left all of those as they were (phases, watermarks, backfills, segments
        pruned, tables added) would have given the same batch had capture loaded after it, so
        recording the batch on this state is exactly that order: the other write, then this
        capture. A change of anything capture owns means another capture (or a setup) wrote
        meanwhile: the batch must be decoded again from the new state. One exception: a
        baseline's first columns (``with_first_columns``) of a table the batch holds nothing of
        (neither its columns nor a segment of it) would not have changed the batch either; of a
        table the batch saw they would (its schema versions are numbered from the columns
        known), so recording the batch over them could give the baseline's copy and changes of
        other columns one schema version.
        """
        if (self.slot_name, self.slot_creation_lsn) != (base.slot_name, base.slot_creation_lsn):
            return (
                f"the slot identity changed from {base.slot_name} (created at {base.slot_creation_lsn}) "
                f"to {self.slot_name} (created at {self.slot_creation_lsn})"
            )
        if self.last_end_lsn != base.last_end_lsn:
            return f"the captured end LSN moved from {base.last_end_lsn} to {self.last_end_lsn}"
        known = set(base.segments)
        added = [s.path for s in self.segments if s not in known]
        if added:
            return f"segment(s) {', '.join(added[:3])}{' ...' if len(added) > 3 else ''} were recorded"
        batch = {ts.key: ts for ts in tables}
        seen = set(batch) | {s.table for s in new_segments}
        for key, old in base.tables.items():
            now = self.tables.get(key)
            if now is None:
                return f"table {key} was removed from the pipeline"
            if _captured(now) == _captured(old):
                continue
            first_columns = (
                not old.columns
                and (now.schema_version, now.relation_id, now.source_name)
                == (old.schema_version, old.relation_id, old.source_name)
                and now.ddl in (None, old.ddl)
                and now.dropped == old.dropped
            )
            if first_columns and key not in seen:
                continue
            what = "first columns were recorded" if first_columns else "schema or source identity changed"
            return f"table {key}: its {what} (schema version {old.schema_version} -> {now.schema_version})"
        followed = {
            ts.relation_id
            for ts in (batch.get(key) or base.tables.get(key) for key in seen)
            if ts is not None and ts.relation_id is not None
        }
        for key, now in self.tables.items():
            if key not in base.tables and now.relation_id in followed:
                return f"table {key} was added, following relation OID {now.relation_id} the batch matched"
        return None

    def with_watermark(self, destination: str, value: str) -> PipelineState:
        """Set the watermark text of one destination."""
        if not isinstance(destination, str) or not destination or not isinstance(value, str):
            raise StateError(
                f"watermark needs a destination name and a text value, not {destination!r}={value!r}"
            )
        return replace(self, watermarks={**self.watermarks, destination: value})

    def with_new_slot(self, name: str, creation_lsn: LSN) -> PipelineState:
        """Adopt a slot created anew (the old one was dropped, lost or replaced): capture starts
        from it, and every table goes back to Init in every destination, since the changes
        between the old slot's end and the new one's start are lost."""
        validate_slot_name(name)
        tables = {key: ts.rebaselined() for key, ts in self.tables.items()}
        return replace(self, slot_name=name, slot_creation_lsn=creation_lsn, last_end_lsn=None, tables=tables)

    def with_slot(self, name: str | None, creation_lsn: LSN | None) -> PipelineState:
        """Record the slot the state is built from (its name and creation LSN identify it)."""
        if name is not None:
            validate_slot_name(name)
        return replace(self, slot_name=name, slot_creation_lsn=creation_lsn)

    # ---- JSON (state/codec.py)

    def to_json(self) -> dict[str, Any]:
        """A dict of JSON-safe values (LSNs as ``X/Y`` text, xids as integers)."""
        from airflow_provider_pgsync.state.codec import pipeline_json

        return pipeline_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PipelineState:
        """Read what ``to_json`` wrote (or an older format); StateError naming the pipeline and
        the remedy if malformed."""
        from airflow_provider_pgsync.state.codec import read_pipeline_json

        return read_pipeline_json(data)


def validate_pipeline_name(name: str) -> str:
    """Return ``name`` if it is usable as a pipeline name (it ends up in an Airflow Variable key)."""
    if not isinstance(name, str) or not _PIPELINE_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(
            f"pipeline name {name!r} is not allowed: use 1-200 letters, digits, '_', '-' or '.', "
            "starting with a letter, digit or '_' (e.g. 'orders_to_lake')"
        )
    return name


def _captured(ts: TableState) -> tuple[object, ...]:
    """What capture owns of a table (what ``with_capture`` records)."""
    return (ts.schema_version, ts.columns, ts.ddl, ts.relation_id, ts.source_name, ts.dropped)


def _ordered(segments: Iterable[SegmentInfo]) -> tuple[SegmentInfo, ...]:
    return tuple(sorted(segments, key=lambda s: (s.first_commit_lsn, s.last_commit_lsn, s.path)))
