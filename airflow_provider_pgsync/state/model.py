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
from airflow_provider_pgsync.state.phases import (
    PHASES,
    XID_MAX,
    DataSync,
    Errored,
    Init,
    Ready,
    Retry,
    SyncDone,
    TablePhase,
    check_transition,
    check_xid,
    table_key,
)

__all__ = [
    "FORMAT",
    "XID_MAX",
    "Backfill",
    "ColumnInfo",
    "DataSync",
    "Errored",
    "Init",
    "PipelineState",
    "Ready",
    "Retry",
    "SegmentInfo",
    "SyncDone",
    "TablePhase",
    "TableState",
    "check_transition",
    "table_key",
    "validate_pipeline_name",
]

FORMAT = 1
"""Version of the JSON layout written by ``PipelineState.to_json``."""

_PIPELINE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")


# ---- tables and segments ------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnInfo:
    """One column of a table as the last Relation message described it."""

    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(frozen=True)
class Backfill:
    """Rows of a Ready table re-read from exported snapshot ``snapshot`` (those matching
    ``condition``; empty: all) and staged for apply, which merges them into each destination
    of ``staged`` (destination name -> staged location) once capture has passed
    ``baseline_lsn``; ``applied`` names the destinations that have them.

    ``xmin``, ``xmax`` and ``xip`` are the snapshot's parts, as for ``SyncDone``: a change of a
    transaction the snapshot saw is in the staged rows, one it did not see is newer than them.
    """

    id: str
    condition: str
    snapshot: str
    baseline_lsn: LSN
    xmin: int
    xmax: int
    xip: tuple[int, ...]
    staged: Mapping[str, str]
    rows: int = 0
    applied: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # the same checks as a baseline's snapshot
        SyncDone(self.snapshot, self.baseline_lsn, self.xmin, self.xmax, self.xip)
        if not self.id or not self.staged:
            raise StateError(f"backfill {self.id!r} needs an id and at least one staged destination")
        object.__setattr__(self, "xip", tuple(sorted(set(self.xip))))
        object.__setattr__(self, "staged", dict(self.staged))
        object.__setattr__(self, "applied", tuple(sorted(set(self.applied))))

    @property
    def pending(self) -> tuple[str, ...]:
        """The destinations that do not have the rows yet."""
        return tuple(name for name in self.staged if name not in self.applied)


@dataclass(frozen=True)
class TableState:
    """A table of the pipeline: its phase, the last known columns (schema version), and a
    backfill waiting for apply (only while the table stays Ready)."""

    table: TableRef
    phase: TablePhase = field(default_factory=Init)
    schema_version: int = 0
    columns: tuple[ColumnInfo, ...] = ()
    backfill: Backfill | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.table, TableRef):
            raise StateError(f"TableState.table must be a TableRef, not {self.table!r}")
        if self.schema_version < 0:
            raise StateError(f"table {self.table}: schema_version {self.schema_version} is negative")
        if self.backfill is not None and not isinstance(self.phase, Ready):
            raise StateError(f"table {self.table}: a backfill needs the table Ready, not {self.phase.kind}")
        object.__setattr__(self, "columns", tuple(self.columns))

    @property
    def key(self) -> str:
        return str(self.table)

    def with_phase(self, phase: TablePhase) -> TableState:
        """The same table in ``phase``; raises PhaseTransitionError when that move is illegal.
        A pending backfill is dropped (a rebaselined or stopped table gets no backfill)."""
        check_transition(self.table, self.phase, phase)
        if isinstance(phase, Errored) and not phase.previous:
            phase = replace(phase, previous=self.phase.kind)
        return replace(self, phase=phase, backfill=None)

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
        new = tuple(columns)
        if new == self.columns:
            return self
        bump = 1 if self.columns else 0
        return replace(self, columns=new, schema_version=self.schema_version + bump)


@dataclass(frozen=True)
class SegmentInfo:
    """A durable changelog segment: one table and schema version, with its LSN and xid ranges.

    ``xid_bits`` is 64 for segments whose xids capture widened to 64 bits, 32 for segments
    written before (pgoutput's xids, compared modulo 2^32).
    """

    path: str
    table: str
    schema_version: int
    first_commit_lsn: LSN
    last_commit_lsn: LSN
    min_xid: int
    max_xid: int
    rows: int
    xid_bits: int = 32

    def __post_init__(self) -> None:
        object.__setattr__(self, "table", table_key(self.table))
        check_xid(self.min_xid, f"segment {self.path} min_xid")
        check_xid(self.max_xid, f"segment {self.path} max_xid")
        if not self.path or self.rows < 0 or self.schema_version < 0:
            raise StateError(f"segment {self.path!r} needs a path, rows >= 0 and schema_version >= 0")
        if self.xid_bits not in (32, 64):
            raise StateError(f"segment {self.path}: xid_bits {self.xid_bits!r} must be 32 or 64")
        if self.first_commit_lsn > self.last_commit_lsn or self.min_xid > self.max_xid:
            raise StateError(
                f"segment {self.path}: ranges are reversed (LSN {self.first_commit_lsn}.."
                f"{self.last_commit_lsn}, xid {self.min_xid}..{self.max_xid})"
            )


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

    def with_backfill(self, table: TableRef | str, backfill: Backfill | None) -> PipelineState:
        """Set or clear the pending backfill of a table (see ``TableState.with_backfill``)."""
        ts = self.table(table).with_backfill(backfill)
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
        segment). ``tables`` update columns and schema versions only, never phases.
        """
        if self.last_end_lsn is not None and last_end_lsn < self.last_end_lsn:
            raise StateError(
                f"pipeline {self.pipeline!r}: capture would move the captured end LSN back from "
                f"{self.last_end_lsn} to {last_end_lsn}; the slot was probably dropped and recreated: "
                "rebaseline the pipeline's tables"
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
            updated[ts.key] = replace(old, schema_version=ts.schema_version, columns=ts.columns)
        return replace(self, last_end_lsn=last_end_lsn, segments=_ordered(by_path.values()), tables=updated)

    def with_watermark(self, destination: str, value: str) -> PipelineState:
        """Set the watermark text of one destination."""
        if not isinstance(destination, str) or not destination or not isinstance(value, str):
            raise StateError(
                f"watermark needs a destination name and a text value, not {destination!r}={value!r}"
            )
        return replace(self, watermarks={**self.watermarks, destination: value})

    def with_slot(self, name: str | None, creation_lsn: LSN | None) -> PipelineState:
        """Record the slot the state is built from (its name and creation LSN identify it)."""
        if name is not None:
            validate_slot_name(name)
        return replace(self, slot_name=name, slot_creation_lsn=creation_lsn)

    # ---- JSON

    def to_json(self) -> dict[str, Any]:
        """A dict of JSON-safe values (LSNs as ``X/Y`` text, xids as integers)."""
        return {
            "format": FORMAT,
            "pipeline": self.pipeline,
            "version": self.version,
            "slot_name": self.slot_name,
            "slot_creation_lsn": _lsn_text(self.slot_creation_lsn),
            "last_end_lsn": _lsn_text(self.last_end_lsn),
            "segments": [_segment_json(s) for s in self.segments],
            "watermarks": dict(self.watermarks),
            "tables": {key: _table_json(ts) for key, ts in self.tables.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PipelineState:
        """Read what ``to_json`` wrote; StateError naming the pipeline and the remedy if malformed."""
        if not isinstance(data, Mapping):
            raise StateError(f"stored pipeline state must be a JSON object, not {type(data).__name__}")
        name = data.get("pipeline")
        fmt = data.get("format")
        if isinstance(fmt, int) and fmt > FORMAT:
            raise StateError(
                f"state of pipeline {name!r} was written by a newer pgsync (format {fmt}; this one "
                f"reads up to {FORMAT}): upgrade airflow-provider-pgsync on every worker"
            )
        try:
            return _read_pipeline(data)
        except (StateError, ConfigError, KeyError, TypeError, ValueError, AttributeError) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise StateError(
                f"stored state of pipeline {name!r} is malformed ({detail}); it was edited by hand or "
                "written by an incompatible pgsync: restore it, or delete it and set the pipeline up again"
            ) from exc


def validate_pipeline_name(name: str) -> str:
    """Return ``name`` if it is usable as a pipeline name (it ends up in an Airflow Variable key)."""
    if not isinstance(name, str) or not _PIPELINE_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(
            f"pipeline name {name!r} is not allowed: use 1-200 letters, digits, '_', '-' or '.', "
            "starting with a letter, digit or '_' (e.g. 'orders_to_lake')"
        )
    return name


def _ordered(segments: Iterable[SegmentInfo]) -> tuple[SegmentInfo, ...]:
    return tuple(sorted(segments, key=lambda s: (s.first_commit_lsn, s.last_commit_lsn, s.path)))


# ---- JSON helpers ---------------------------------------------------------------------------


def _lsn_text(lsn: LSN | None) -> str | None:
    return None if lsn is None else str(lsn)


def _lsn(value: Any) -> LSN:
    if not isinstance(value, str):
        raise StateError(f"LSN must be 'X/Y' text, not {value!r}")
    return LSN.parse(value)


def _opt_lsn(value: Any) -> LSN | None:
    return None if value is None else _lsn(value)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StateError(f"{what} must be an integer, not {value!r}")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise StateError(f"{what} must be true or false, not {value!r}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise StateError(f"{what} must be text, not {value!r}")
    return value


def _phase_json(phase: TablePhase) -> dict[str, Any]:
    if isinstance(phase, SyncDone):
        return {
            "kind": phase.kind,
            "snapshot": phase.snapshot,
            "baseline_lsn": str(phase.baseline_lsn),
            "xmin": phase.xmin,
            "xmax": phase.xmax,
            "xip": list(phase.xip),
        }
    if isinstance(phase, Errored):
        return {
            "kind": phase.kind,
            "reason": phase.reason,
            "solution": phase.solution,
            "retry": phase.retry,
            "previous": phase.previous,
        }
    return {"kind": phase.kind}


def _read_phase(data: Mapping[str, Any]) -> TablePhase:
    kind = data["kind"]
    if kind == "SyncDone":
        return SyncDone(
            snapshot=_str(data["snapshot"], "snapshot"),
            baseline_lsn=_lsn(data["baseline_lsn"]),
            xmin=_int(data["xmin"], "xmin"),
            xmax=_int(data["xmax"], "xmax"),
            xip=tuple(_int(x, "xip entry") for x in data["xip"]),
        )
    if kind == "Errored":
        return Errored(
            reason=_str(data["reason"], "reason"),
            solution=_str(data["solution"], "solution"),
            retry=data["retry"],
            previous=_str(data["previous"], "previous"),
        )
    if kind in ("Init", "DataSync", "Ready"):
        return PHASES[kind]()  # type: ignore[call-arg]
    raise StateError(f"unknown table phase {kind!r}")


def _table_json(ts: TableState) -> dict[str, Any]:
    data: dict[str, Any] = {
        "phase": _phase_json(ts.phase),
        "schema_version": ts.schema_version,
        "columns": [[c.name, c.type_oid, c.type_modifier, c.is_key] for c in ts.columns],
    }
    if ts.backfill is not None:
        b = ts.backfill
        data["backfill"] = {
            "id": b.id,
            "condition": b.condition,
            "snapshot": b.snapshot,
            "baseline_lsn": str(b.baseline_lsn),
            "xmin": b.xmin,
            "xmax": b.xmax,
            "xip": list(b.xip),
            "staged": dict(b.staged),
            "rows": b.rows,
            "applied": list(b.applied),
        }
    return data


def _read_backfill(data: Mapping[str, Any] | None) -> Backfill | None:
    if data is None:
        return None
    return Backfill(
        id=_str(data["id"], "backfill id"),
        condition=_str(data["condition"], "backfill condition"),
        snapshot=_str(data["snapshot"], "backfill snapshot"),
        baseline_lsn=_lsn(data["baseline_lsn"]),
        xmin=_int(data["xmin"], "backfill xmin"),
        xmax=_int(data["xmax"], "backfill xmax"),
        xip=tuple(_int(x, "backfill xip entry") for x in data["xip"]),
        staged={_str(k, "backfill destination"): _str(v, "staged rows") for k, v in data["staged"].items()},
        rows=_int(data["rows"], "backfill rows"),
        applied=tuple(_str(a, "backfill destination") for a in data["applied"]),
    )


def _read_table(key: str, data: Mapping[str, Any]) -> TableState:
    columns = tuple(
        ColumnInfo(_str(n, "column name"), _int(o, "type_oid"), _int(m, "type_modifier"), _bool(k, "is_key"))
        for n, o, m, k in data["columns"]
    )
    return TableState(
        table=TableRef.parse(key),
        phase=_read_phase(data["phase"]),
        schema_version=_int(data["schema_version"], "schema_version"),
        columns=columns,
        backfill=_read_backfill(data.get("backfill")),
    )


def _segment_json(s: SegmentInfo) -> dict[str, Any]:
    return {
        "path": s.path,
        "table": s.table,
        "schema_version": s.schema_version,
        "first_commit_lsn": str(s.first_commit_lsn),
        "last_commit_lsn": str(s.last_commit_lsn),
        "min_xid": s.min_xid,
        "max_xid": s.max_xid,
        "rows": s.rows,
        "xid_bits": s.xid_bits,
    }


def _read_segment(data: Mapping[str, Any]) -> SegmentInfo:
    return SegmentInfo(
        path=_str(data["path"], "segment path"),
        table=_str(data["table"], "segment table"),
        schema_version=_int(data["schema_version"], "segment schema_version"),
        first_commit_lsn=_lsn(data["first_commit_lsn"]),
        last_commit_lsn=_lsn(data["last_commit_lsn"]),
        min_xid=_int(data["min_xid"], "segment min_xid"),
        max_xid=_int(data["max_xid"], "segment max_xid"),
        rows=_int(data["rows"], "segment rows"),
        xid_bits=_int(data.get("xid_bits", 32), "segment xid_bits"),
    )


def _read_pipeline(data: Mapping[str, Any]) -> PipelineState:
    if data["format"] != FORMAT:
        raise StateError(f"unknown format {data['format']!r}")
    tables = {table_key(k): _read_table(k, v) for k, v in data["tables"].items()}
    watermarks = {_str(k, "destination"): _str(v, "watermark") for k, v in data["watermarks"].items()}
    return PipelineState(
        pipeline=_str(data["pipeline"], "pipeline"),
        version=_int(data["version"], "version"),
        slot_name=None if data["slot_name"] is None else _str(data["slot_name"], "slot_name"),
        slot_creation_lsn=_opt_lsn(data["slot_creation_lsn"]),
        last_end_lsn=_opt_lsn(data["last_end_lsn"]),
        segments=tuple(_read_segment(s) for s in data["segments"]),
        watermarks=watermarks,
        tables=tables,
    )
