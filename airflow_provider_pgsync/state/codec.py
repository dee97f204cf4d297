"""The JSON layout of a pipeline's state (``PipelineState.to_json``/``from_json``); no I/O.

Format 2 keeps each table's state per destination; format 1 (one phase per table) is read
as a table whose destinations all share that phase (its ``fallback``), so an upgraded pgsync
goes on where the older one stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from airflow_provider_pgsync.errors import ConfigError, StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.columns import SchemaChange, column_json, column_of
from airflow_provider_pgsync.state.destination import DestinationState
from airflow_provider_pgsync.state.dropped import SourceDrop
from airflow_provider_pgsync.state.model import (
    FORMAT,
    Backfill,
    PipelineState,
    SegmentInfo,
    TableState,
)
from airflow_provider_pgsync.state.phases import (
    DataSync,
    Errored,
    Init,
    Ready,
    SyncDone,
    TablePhase,
    table_key,
)


def pipeline_json(state: PipelineState) -> dict[str, Any]:
    """``state`` as a dict of JSON-safe values (LSNs as ``X/Y`` text, xids as integers)."""
    return {
        "format": FORMAT,
        "pipeline": state.pipeline,
        "version": state.version,
        "slot_name": state.slot_name,
        "slot_creation_lsn": _lsn_text(state.slot_creation_lsn),
        "last_end_lsn": _lsn_text(state.last_end_lsn),
        "segments": [_segment_json(s) for s in state.segments],
        "watermarks": dict(state.watermarks),
        "tables": {key: _table_json(ts) for key, ts in state.tables.items()},
    }


def read_pipeline_json(data: Mapping[str, Any]) -> PipelineState:
    """Read what ``pipeline_json`` wrote; StateError naming the pipeline and the remedy if malformed."""
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
            "lineage": phase.lineage,
            "schema_version": phase.schema_version,
        }
    if isinstance(phase, DataSync):
        return {"kind": phase.kind, "lineage": phase.lineage}
    if isinstance(phase, Errored):
        return {
            "kind": phase.kind,
            "reason": phase.reason,
            "solution": phase.solution,
            "retry": phase.retry,
            "previous": phase.previous,
        }
    if isinstance(phase, Init) and (phase.reason or phase.request):
        # written only when set, so a state without a pending rebaseline reads as before
        return {"kind": phase.kind, "reason": phase.reason, "request": phase.request}
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
            lineage=_str(data.get("lineage", ""), "lineage"),
            schema_version=_int(data.get("schema_version", 0), "schema_version"),
        )
    if kind == "DataSync":
        return DataSync(lineage=_str(data.get("lineage", ""), "lineage"))
    if kind == "Errored":
        return Errored(
            reason=_str(data["reason"], "reason"),
            solution=_str(data["solution"], "solution"),
            retry=data["retry"],
            previous=_str(data["previous"], "previous"),
        )
    if kind == "Init":  # reason and request absent in states written before they existed
        return Init(
            reason=_str(data.get("reason", ""), "Init reason"),
            request=_str(data.get("request", ""), "Init request"),
        )
    if kind == "Ready":
        return Ready()
    raise StateError(f"unknown table phase {kind!r}")


def _destination_json(d: DestinationState) -> dict[str, Any]:
    return {
        "phase": _phase_json(d.phase),
        "lineage": d.lineage,
        "baseline": None if d.baseline is None else _phase_json(d.baseline),
        "watermark": d.watermark,
    }


def _read_destination(data: Mapping[str, Any]) -> DestinationState:
    baseline = data["baseline"]
    done = None if baseline is None else _read_phase(baseline)
    if done is not None and not isinstance(done, SyncDone):
        raise StateError(f"a destination's baseline must be a SyncDone, not {done.kind}")
    watermark = data["watermark"]
    return DestinationState(
        phase=_read_phase(data["phase"]),
        lineage=_str(data["lineage"], "lineage"),
        baseline=done,
        watermark=None if watermark is None else _str(watermark, "watermark"),
    )


def _table_json(ts: TableState) -> dict[str, Any]:
    data: dict[str, Any] = {
        "phase": _phase_json(ts.fallback),
        "destinations": {name: _destination_json(d) for name, d in ts.destinations.items()},
        "schema_version": ts.schema_version,
        "columns": [column_json(c) for c in ts.columns],
    }
    if ts.ddl is not None:
        data["ddl"] = {
            **ts.ddl.flags_json(),
            "columns": None if ts.ddl.columns is None else [column_json(c) for c in ts.ddl.columns],
        }
    if ts.relation_id is not None:
        data["relation_id"] = ts.relation_id
    if ts.source_name is not None:
        data["source_name"] = str(ts.source_name)
    if ts.dropped is not None:  # written only when set, like the two above
        data["dropped"] = ts.dropped.to_json()
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
    columns = tuple(column_of(c) for c in data["columns"])
    ddl = data.get("ddl")
    change = None
    if ddl is not None:
        change = SchemaChange.from_flags(ddl)
        if ddl.get("columns") is not None:
            change = replace(change, columns=tuple(column_of(c) for c in ddl["columns"]))
    relation_id = data.get("relation_id")  # absent in states written before tables were followed by OID
    source_name = data.get("source_name")
    dropped = data.get("dropped")  # absent in states written before drops were recorded
    return TableState(
        table=TableRef.parse(key),
        fallback=_read_phase(data["phase"]),
        schema_version=_int(data["schema_version"], "schema_version"),
        columns=columns,
        ddl=change,
        backfill=_read_backfill(data.get("backfill")),
        destinations={
            _str(name, "destination"): _read_destination(d)
            for name, d in data.get("destinations", {}).items()
        },
        relation_id=None if relation_id is None else _int(relation_id, "relation_id"),
        source_name=None if source_name is None else TableRef.parse(_str(source_name, "source_name")),
        dropped=None if dropped is None else SourceDrop.from_json(dropped),
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
    if data["format"] not in (1, FORMAT):
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
