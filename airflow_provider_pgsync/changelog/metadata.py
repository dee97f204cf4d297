"""Checking the rows of a new segment and its ``pgsync`` Parquet key-value metadata."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_pgsync.changelog.schema import COMMIT_LSN, OP, OPS, SEQ, XID
from airflow_provider_pgsync.errors import ChangelogError, ConfigError, StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import ColumnInfo, SchemaChange, SegmentInfo

FORMAT_VERSION = 1
METADATA_KEY = b"pgsync"
#: The ``xid_bits`` of the segments this version writes: their ``_xid`` values are 64-bit
#: (epoch << 32 | xid). Segments without the key were written before, with pgoutput's 32-bit xids.
XID_BITS = 64
LEGACY_XID_BITS = 32


def conform(data: pa.Table | pa.RecordBatch, schema: pa.Schema, what: str) -> pa.Table:
    """``data`` with exactly ``schema``, or ChangelogError naming ``what`` and the mismatch.

    Field metadata and nullable flags of ``data`` may differ as long as the not-null
    columns hold no nulls. Rows must be non-empty, strictly ordered by
    (``_commit_lsn``, ``_seq``), with known ``_op`` letters and ``_xid`` values >= 0 (64-bit transaction ids).
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if not isinstance(data, pa.Table):
        raise ChangelogError(f"{what}: data must be a pyarrow Table, not {type(data).__name__}")
    got = [(f.name, f.type) for f in data.schema]
    want = [(f.name, f.type) for f in schema]
    if got != want:
        raise ChangelogError(f"{what}: data does not have the segment schema: {_diff(got, want)}")
    for fld in schema:
        if not fld.nullable and data.column(fld.name).null_count:
            raise ChangelogError(f"{what}: column {fld.name} must not hold nulls")
    if data.num_rows == 0:
        raise ChangelogError(f"{what}: a segment needs at least one change; do not write empty segments")
    data = data.cast(schema)
    bad_ops = pc.unique(
        pc.filter(data.column(OP), pc.invert(pc.is_in(data.column(OP), pa.array(sorted(OPS)))))
    )
    if len(bad_ops):
        raise ChangelogError(f"{what}: _op holds {bad_ops.to_pylist()[:5]}; allowed are I, U, D and T")
    xids = pc.min_max(data.column(XID))
    if xids["min"].as_py() < 0:
        raise ChangelogError(f"{what}: _xid values must be 64-bit transaction ids (0..2^63-1), not negative")
    lsn = data.column(COMMIT_LSN).to_numpy()
    seq = data.column(SEQ).to_numpy()
    ordered = (lsn[1:] > lsn[:-1]) | ((lsn[1:] == lsn[:-1]) & (seq[1:] > seq[:-1]))
    if not ordered.all():
        row = int(np.argmin(ordered)) + 1
        raise ChangelogError(
            f"{what}: rows must be sorted by (_commit_lsn, _seq) without repeats; row {row} "
            f"({int(lsn[row])}, {int(seq[row])}) follows ({int(lsn[row - 1])}, {int(seq[row - 1])})"
        )
    return data


def _diff(got: list[tuple[str, pa.DataType]], want: list[tuple[str, pa.DataType]]) -> str:
    missing = [n for n, _ in want if n not in dict(got)]
    extra = [n for n, _ in got if n not in dict(want)]
    if missing or extra:
        return f"missing columns {missing}, unexpected columns {extra}"
    wrong = [f"{n} is {t} (expected {dict(want)[n]})" for n, t in got if dict(want)[n] != t]
    if wrong:
        return "; ".join(wrong)
    return f"columns are in the order {[n for n, _ in got]}, expected {[n for n, _ in want]}"


def build_metadata(
    table: str, schema_version: int, columns: Sequence[ColumnInfo], data: pa.Table, part: int
) -> dict[str, Any]:
    """The ``pgsync`` metadata of a segment holding ``data`` (already conformed)."""
    lsn = data.column(COMMIT_LSN)
    seq = data.column(SEQ)
    xids = pc.min_max(data.column(XID))
    last = data.num_rows - 1
    return {
        "format_version": FORMAT_VERSION,
        "table": table,
        "schema_version": schema_version,
        "columns": [_column_json(c) for c in columns],
        "first_commit_lsn": str(LSN(lsn[0].as_py())),
        "last_commit_lsn": str(LSN(lsn[last].as_py())),
        "first_seq": seq[0].as_py(),
        "last_seq": seq[last].as_py(),
        "min_xid": xids["min"].as_py(),
        "max_xid": xids["max"].as_py(),
        "rows": data.num_rows,
        "part": part,
        "xid_bits": XID_BITS,
    }


def _column_json(c: ColumnInfo) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": c.name,
        "type_oid": c.type_oid,
        "type_modifier": c.type_modifier,
        "is_key": c.is_key,
    }
    if c.attnum:
        out["attnum"] = c.attnum
    if c.missing is not None:
        out["missing"] = c.missing
    return out


def encode(meta: Mapping[str, Any]) -> dict[bytes, bytes]:
    """The Parquet key-value metadata holding ``meta``."""
    return {METADATA_KEY: json.dumps(meta, separators=(",", ":")).encode()}


def decode(kv: Mapping[bytes, bytes] | None, path: str) -> dict[str, Any]:
    """The ``pgsync`` metadata of the file at ``path``; ChangelogError if missing or unreadable."""
    raw = (kv or {}).get(METADATA_KEY)
    if raw is None:
        raise ChangelogError(f"{path} is not a pgsync changelog segment: it has no 'pgsync' metadata")
    try:
        meta = json.loads(raw)
    except ValueError as exc:
        raise ChangelogError(f"segment {path}: its 'pgsync' metadata is not JSON ({exc})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("format_version"), int):
        raise ChangelogError(f"segment {path}: its 'pgsync' metadata has no format_version")
    if meta["format_version"] > FORMAT_VERSION:
        raise ChangelogError(
            f"segment {path} was written by a newer pgsync (format {meta['format_version']}; this one reads "
            f"up to {FORMAT_VERSION}): upgrade airflow-provider-pgsync on every worker"
        )
    return meta


def columns_of(meta: Mapping[str, Any], path: str) -> list[ColumnInfo]:
    """The columns recorded in a segment's metadata."""
    try:
        return [
            ColumnInfo(
                str(c["name"]),
                int(c["type_oid"]),
                int(c["type_modifier"]),
                bool(c["is_key"]),
                attnum=int(c.get("attnum", 0)),
                missing=None if c.get("missing") is None else str(c["missing"]),
            )
            for c in meta["columns"]
        ]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ChangelogError(f"segment {path}: malformed columns in its 'pgsync' metadata ({exc})") from None


def change_of(meta: Mapping[str, Any], path: str) -> SchemaChange:
    """The DDL a segment's schema version started with (empty when the segment does not say)."""
    try:
        return SchemaChange.from_flags(meta.get("change"))
    except (TypeError, ValueError, AttributeError, StateError) as exc:
        raise ChangelogError(f"segment {path}: malformed change in its 'pgsync' metadata ({exc})") from None


def xid_bits_of(meta: Mapping[str, Any], path: str) -> int:
    """64 when the segment's ``_xid`` values are 64-bit, 32 for a segment written before
    (no ``xid_bits`` key: pgoutput's 32-bit xids)."""
    bits = meta.get("xid_bits", LEGACY_XID_BITS)
    if bits not in (LEGACY_XID_BITS, XID_BITS) or isinstance(bits, bool):
        raise ChangelogError(f"segment {path}: 'xid_bits' {bits!r} in its 'pgsync' metadata must be 32 or 64")
    return int(bits)


def info_of(meta: Mapping[str, Any], path: str) -> SegmentInfo:
    """The SegmentInfo of the segment at ``path`` (relative to the changelog root)."""
    try:
        return SegmentInfo(
            path=path,
            table=meta["table"],
            schema_version=meta["schema_version"],
            first_commit_lsn=LSN.parse(meta["first_commit_lsn"]),
            last_commit_lsn=LSN.parse(meta["last_commit_lsn"]),
            min_xid=meta["min_xid"],
            max_xid=meta["max_xid"],
            rows=meta["rows"],
            xid_bits=xid_bits_of(meta, path),
        )
    except (KeyError, TypeError, AttributeError, ConfigError, StateError) as exc:
        raise ChangelogError(f"segment {path}: incomplete 'pgsync' metadata ({exc})") from None
