"""A lake table's files, its generations and the merge-on-read SQL over them; pure logic.

Under ``LakeDestination.table_dir(table)`` a table keeps:

- ``base/<version>/``: Parquet, the table as of a watermark (written by the baseline or by
  compaction). Compaction lays a keyed table's base out by key hash (``buckets`` in its meta):
  file ``b<bucket>-*.parquet`` holds the keys whose ``pmod(hash(keys), buckets)`` is that
  bucket, so the next compaction rewrites only buckets with changes and hard-links (or
  copies) the others into the new version;
- ``changes/<lineage>/<lsn>-<seq>.parquet``: one *lake segment* per applied batch, named
  by the batch's watermark (``upto``), holding the batch's net records (below). The lineage
  is the base version a baseline wrote; a rebaseline starts a new lineage, so changes
  applied to an older base never reach a newer one;
- ``meta/<n>.json``: the table's generations, each file written once and never changed; the
  highest number is current (base location, lineage, the watermark folded into the base,
  the Spark schema and the key columns).

The catalog holds ``<db>.<name>__base`` (the base), ``<db>.<name>__changes_<lineage>`` (the
lineage's segments, with a declared schema) and the view ``<db>.<name>``: base plus the
segments after the base's watermark, merged on read. The view's text names the base version
and the watermark, so replacing the view, one metastore operation, swaps both at once.

Records of a lake segment (``_pgsync_kind``), ordered by ``_pgsync_lsn``, ``_pgsync_seq``
(the segment's watermark) and ``_pgsync_pos`` (the place in it): ``P`` the key's row is
present with these values, ``D`` the key is gone (only key columns set), ``T`` truncate
(every earlier record and the base go); tables whose identity is the whole row (no key short
of it) use ``+`` (one such row more) and ``-`` (one fewer) instead of P and D.
"""

# Spark SQL has no placeholders for identifiers: names go through ``quote``, text through
# ``literal``, and the rest is integers.
# ruff: noqa: S608

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.destinations.lake import LakeDestination, catalog_name
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo
from airflow_provider_pgsync.typemap.pgtypes import numeric_precision_scale

# prefixed, like every name the merge SQL adds, so no column of a source table can clash
KIND, LSN_COL, SEQ_COL, POS_COL = "_pgsync_kind", "_pgsync_lsn", "_pgsync_seq", "_pgsync_pos"
#: a record's or a row's key-hash bucket, in a bucketed lake segment (``lake_bucketing.py``) and
#: while a compaction lays out a base
BUCKET = "_pgsync_bucket"
#: Spark types of the record columns that precede the table's columns in a lake segment.
RECORD_FIELDS: tuple[tuple[str, str], ...] = (
    (KIND, "string"),
    (LSN_COL, "long"),
    (SEQ_COL, "long"),
    (POS_COL, "long"),
)
_BUCKET_FILE = re.compile(r"b([0-9]{5})-.+\.parquet")
_SEGMENT = re.compile(r"([0-9a-f]{16})-([0-9a-f]{10})\.parquet")

# Spark types of columns a table may gain while apply continues (DESIGN §2 rule 9); other
# added columns send the table back to baseline, which maps every type (typemap/spark.py)
_ADDED_COLUMN_TYPES = {
    16: "boolean",
    17: "binary",
    20: "long",
    21: "short",
    23: "integer",
    25: "string",
    114: "string",
    700: "float",
    701: "double",
    1042: "string",
    1043: "string",
    1082: "date",
    1083: "string",
    1114: "timestamp_ntz",
    1184: "timestamp",
    1186: "string",
    2950: "string",
    3802: "string",
}


@dataclass(frozen=True)
class LakeTableMeta:
    """One generation of a lake table: ``base`` holds every change up to ``watermark``
    (None: just baselined, the hand-off is apply's), ``schema`` is the base's Spark schema
    (``StructType.jsonValue()``), ``keys`` its key columns (empty: the whole row is the identity);
    ``buckets``: the base's files are laid out by key hash into that many buckets (0: not laid
    out, e.g. straight from a baseline)."""

    number: int
    base: str
    lineage: str
    watermark: Key | None
    schema: dict[str, Any]
    keys: tuple[str, ...]
    buckets: int = 0

    @property
    def columns(self) -> list[str]:
        return [f["name"] for f in self.schema["fields"]]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LakeTableMeta:
        data = json.loads(text)
        mark = data.get("watermark")
        data["watermark"] = (int(mark[0]), int(mark[1])) if mark is not None else None
        data["keys"] = tuple(data["keys"])
        return cls(**data)


def bucket_file(bucket: int, name: str) -> str:
    """The name of a file of bucket ``bucket`` in a base version (``name``: the writer's)."""
    return f"b{bucket:05d}-{name}"


def file_bucket(name: str) -> int | None:
    """The bucket of a base file named by ``bucket_file``; None for other files."""
    found = _BUCKET_FILE.fullmatch(name)
    return int(found.group(1)) if found else None


def meta_dir(lake: LakeDestination, table: TableRef) -> str:
    return f"{lake.table_dir(table)}/meta"


def meta_name(number: int) -> str:
    return f"{number:010d}.json"


def meta_number(name: str) -> int | None:
    """The generation number of a file in the meta folder; None for anything else."""
    stem, dot, ext = name.partition(".")
    return int(stem) if dot and ext == "json" and stem.isdigit() else None


def changes_dir(lake: LakeDestination, table: TableRef, lineage: str) -> str:
    return f"{lake.table_dir(table)}/changes/{lineage}"


def segment_name(upto: Key) -> str:
    """The file name of the lake segment that brings the table to watermark ``upto``."""
    return f"{upto[0]:016x}-{upto[1]:010x}.parquet"


def segment_key(name: str) -> Key | None:
    """The watermark a lake segment's file name carries; None for other files."""
    found = _SEGMENT.fullmatch(name)
    return (int(found.group(1), 16), int(found.group(2), 16)) if found else None


def view_name(lake: LakeDestination, table: TableRef) -> str:
    return f"{lake.database}.{catalog_name(table)}"


def changes_table(lake: LakeDestination, table: TableRef, lineage: str) -> str:
    suffix = re.sub(r"[^a-z0-9]+", "_", lineage.lower()).strip("_")
    return f"{lake.database}.{catalog_name(table)}__changes_{suffix}"


def added_column_type(column: ColumnInfo) -> str | None:
    """The Spark type of a column added while apply continues; None when the table needs a
    new baseline for it (a type other than the common built-in scalars)."""
    if column.type_oid == 1700:  # numeric(p,s): a decimal when it fits, else its text
        ps = numeric_precision_scale(column.type_modifier)
        if ps is not None and 0 <= ps[1] <= ps[0] <= 38:
            return f"decimal({ps[0]},{ps[1]})"
        return "string"
    return _ADDED_COLUMN_TYPES.get(column.type_oid)


def quote(name: str) -> str:
    """A Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def literal(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def merge_sql(
    *,
    base: str,
    changes: str,
    columns: Sequence[str],
    keys: Sequence[str],
    after: Key | None,
    upto: Key | None = None,
) -> str:
    """The current rows: relation ``base`` plus the records of relation ``changes`` in segments
    after ``after`` (up to ``upto`` when given), merged (the latest record of each key wins;
    counted rows for tables without a key short of the whole row; a TRUNCATE cuts)."""
    cols = ", ".join(quote(c) for c in columns)
    bounds = []
    if after is not None:
        bounds.append(f"({LSN_COL} > {after[0]} OR ({LSN_COL} = {after[0]} AND {SEQ_COL} > {after[1]}))")
    if upto is not None:
        bounds.append(f"({LSN_COL} < {upto[0]} OR ({LSN_COL} = {upto[0]} AND {SEQ_COL} <= {upto[1]}))")
    where = " AND ".join(bounds) or "true"
    order = f"named_struct('l', {LSN_COL}, 's', {SEQ_COL}, 'p', {POS_COL})"
    first = "P" if keys else "+"
    records = (
        f"SELECT {cols}, '{first}' AS {KIND}, -1L AS {LSN_COL}, 0L AS {SEQ_COL}, 0L AS {POS_COL} FROM {base}"
        f" UNION ALL SELECT {cols}, {KIND}, {LSN_COL}, {SEQ_COL}, {POS_COL} FROM {changes} WHERE {where}"
    )
    cut = f"SELECT max({order}) AS _pgsync_cut FROM {changes} WHERE {where} AND {KIND} = 'T'"
    live = (
        f"SELECT * FROM ({records}) records CROSS JOIN ({cut}) cut"
        f" WHERE {KIND} <> 'T' AND (_pgsync_cut IS NULL OR {order} > _pgsync_cut)"
    )
    if keys:
        partition = ", ".join(quote(k) for k in keys)
        return (
            f"SELECT {cols} FROM (SELECT {cols}, {KIND}, row_number() OVER (PARTITION BY {partition}"
            f" ORDER BY {LSN_COL} DESC, {SEQ_COL} DESC, {POS_COL} DESC) AS _pgsync_rank FROM ({live}) live)"
            f" ranked WHERE _pgsync_rank = 1 AND {KIND} = 'P'"
        )
    return (
        f"SELECT {cols} FROM (SELECT {cols}, sum(CASE WHEN {KIND} = '-' THEN -1 ELSE 1 END) AS _pgsync_count"
        f" FROM ({live}) live GROUP BY {cols} HAVING _pgsync_count > 0) counted"
        " LATERAL VIEW explode(array_repeat(0, CAST(_pgsync_count AS INT))) copies AS _pgsync_copy"
    )
