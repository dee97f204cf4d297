"""LakeChanges: apply's side of the lake destination, writing each batch as one lake segment.

A batch becomes its net records (``destinations/lake_tables.py``), typed like the table's
base, in one Parquet file named by the batch's watermark and published by a rename: the
file is the batch and its watermark at once, so a batch is applied exactly once (a re-run
finds the watermark and skips it). Once the table's base is laid out by key hash, the records
carry their key's bucket and are written bucket by bucket (``lake_bucketing.py``), so the
compaction merges each bucket with its own records alone. The view merges the segments on read; compaction (a
Spark job) folds them into the next base. Runs where apply runs (pyarrow, no Spark).

Unchanged TOAST values of a row that is neither in the batch nor kept at its own key (a key
change) are read from the table's current rows: the base and the segments, filtered to the
keys concerned.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_pgsync.apply.backfill import TouchedKeys
from airflow_provider_pgsync.apply.destination import Destination, SchemaAnswer
from airflow_provider_pgsync.apply.net import (
    BulkNet,
    KeyValues,
    Present,
    Truncate,
    bulk_net,
    is_keyed,
    net_steps,
    row_changes,
)
from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.changelog.schema import key_columns
from airflow_provider_pgsync.destinations import lake_backfill
from airflow_provider_pgsync.destinations.lake import LakeDestination, lake_name
from airflow_provider_pgsync.destinations.lake_arrow_types import spark_arrow_type
from airflow_provider_pgsync.destinations.lake_bucketing import segment_buckets, with_buckets, write_bucketed
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_tables import (
    KIND,
    LSN_COL,
    POS_COL,
    SEQ_COL,
    LakeTableMeta,
    added_column_type,
    view_name,
)
from airflow_provider_pgsync.destinations.lake_values import text_to_arrow
from airflow_provider_pgsync.errors import (
    DestinationDivergedError,
    DestinationError,
    DestinationUnavailableError,
)
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo
from airflow_provider_pgsync.state.schema_diff import SchemaDiff

log = logging.getLogger(__name__)


@dataclass
class _Table:
    """A table open for apply: its current generation and the Arrow type of each column."""

    meta: LakeTableMeta
    types: dict[str, pa.DataType]
    keys: list[str]
    columns: list[str]

    @property
    def keyed(self) -> bool:
        """Whether rows have a key short of the whole row (else counted records + and -)."""
        return bool(self.keys) and len(self.keys) < len(self.columns)  # as apply.net.is_keyed


@dataclass
class _Records:
    """Net records of a batch as PostgreSQL text, before typing: rows one by one, or a table
    already built in Arrow (the bulk path)."""

    kinds: list[str] = field(default_factory=list)
    rows: list[dict[str, str | None]] = field(default_factory=list)
    # row index -> (columns to carry, the key whose current values hold them)
    carry: dict[int, tuple[frozenset[str], KeyValues]] = field(default_factory=dict)
    built: pa.Table | None = None

    def add(self, kind: str, row: dict[str, str | None]) -> int:
        self.kinds.append(kind)
        self.rows.append(row)
        return len(self.rows) - 1

    def table(self, columns: list[str]) -> pa.Table:
        """The records as a table of ``_kind`` and text columns."""
        if self.built is not None:
            return self.built
        texts = {n: pa.array([row.get(n) for row in self.rows], pa.string()) for n in columns}
        return pa.table({KIND: pa.array(self.kinds, pa.string()), **texts})


def lake_types(table: TableRef, meta: LakeTableMeta, columns: Sequence[ColumnInfo]) -> dict[str, pa.DataType]:
    """The Arrow type of each of ``columns`` as the lake holds it: the base's Spark type, or for
    a column added since, the type it is added with in place."""
    base = {f["name"]: spark_arrow_type(f["type"]) for f in meta.schema["fields"]}
    types = {}
    for column in columns:
        if column.name in base:
            types[column.name] = base[column.name]
            continue
        spark_type = added_column_type(column)
        if spark_type is None:
            raise DestinationError(
                f"column {column.name!r} of lake table {table} is not in its base and its type "
                f"(oid {column.type_oid}) cannot be added in place: rebaseline the table"
            )
        types[column.name] = spark_arrow_type(spark_type)
    return types


class LakeChanges(Destination):
    """The lake destination ``lake`` for apply (see the module docstring)."""

    def __init__(self, lake: LakeDestination, *, name: str | None = None) -> None:
        self.lake = lake
        self.name = name or lake_name(lake)
        self.files = LakeFiles(lake)
        self._fs = self.files.fs
        self._tables: dict[TableRef, _Table] = {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LakeChanges:
        return cls(LakeDestination.from_config(config))

    # ---- the protocol

    def open_table(self, table: TableRef, columns: Sequence[ColumnInfo], schema_version: int) -> None:
        meta = self.files.current(table)
        if meta is None:
            raise DestinationError(
                f"lake table {table} has no base in {self.lake.table_dir(table)}: run its baseline first"
            )
        types = lake_types(table, meta, columns)
        self._tables[table] = _Table(meta, types, key_columns(columns), [c.name for c in columns])

    def watermark(self, table: TableRef) -> Key | None:
        meta = self.files.current(table)
        if meta is None:
            return None
        marks = [key for key, _ in self.files.segments(table, meta)]
        if meta.watermark is not None:
            marks.append(meta.watermark)
        return max(marks) if marks else None

    def apply(
        self, table: TableRef, columns: Sequence[ColumnInfo], changes: pa.RecordBatch, upto: Key
    ) -> None:
        opened = self._tables.get(table)
        if opened is None:
            raise DestinationError(f"lake table {table} was not opened before apply")
        records = self._records(opened, columns, changes)
        typed = self._typed(table, opened, records)
        count = typed.num_rows
        typed = typed.append_column(LSN_COL, pa.array(np.full(count, upto[0], dtype=np.int64)))
        typed = typed.append_column(SEQ_COL, pa.array(np.full(count, upto[1], dtype=np.int64)))
        typed = typed.append_column(POS_COL, pa.array(np.arange(count, dtype=np.int64)))
        buckets = segment_buckets(opened.meta.buckets, opened.keys if opened.keyed else [], opened.types)
        folder = self.files.segments_dir(table, opened.meta)
        self.files.make_dir(folder)
        staging = f"{folder}/_writing-{uuid.uuid4().hex}.parquet"  # readers skip names starting with _
        try:
            self.files.new_file(staging)
            if buckets:  # laid out by the base's buckets: a compaction reads each bucket alone
                write_bucketed(with_buckets(typed, opened.keys, buckets), staging, self._fs, buckets)
            else:
                pq.write_table(typed, staging, filesystem=self._fs)
        except Exception as exc:
            self.files.remove(staging)
            raise DestinationError(
                f"lake table {table}: writing a segment to {folder} failed: {exc}"
            ) from exc
        self.files.publish_segment(table, opened.meta, staging, upto)  # only into the current lineage

    def drop_table(self, table: TableRef) -> None:
        """Not without Spark: the lake's tables are in the Spark catalog (DestinationError saying
        what to drop by hand)."""
        view = view_name(self.lake, table)
        raise DestinationError(
            f"lake destination {self.name}: table {table} is kept (its view {view} and table "
            f"{self.lake.base_table(table)} are in the Spark catalog, which the teardown does not open): "
            f"if it is no longer needed, DROP VIEW {view} and DROP TABLE {self.lake.base_table(table)} "
            f"with spark-sql, then remove {self.lake.table_dir(table)}"
        )

    def verify(self, table: TableRef, lineage: str) -> None:
        """The table's current generation is of baseline ``lineage`` and its base is there
        (complete: Spark's ``_SUCCESS`` marker); DestinationDivergedError otherwise. The
        catalog's view and base table are not checked here (apply runs without Spark): they are
        made from the generation, and the next compaction makes them again."""
        where = f"lake table {table} in {self.lake.table_dir(table)}"
        try:
            meta = self.files.current(table)
            base = None if meta is None else self._fs.get_file_info(f"{self.files.path(meta.base)}/_SUCCESS")
        except OSError as exc:
            raise DestinationUnavailableError(
                f"destination {self.name}: {where} could not be read: {exc}; nothing was applied: check "
                "that the warehouse is reachable; the next run goes on from the watermark"
            ) from exc
        if meta is None:
            raise DestinationDivergedError(
                f"{where} has no generation (meta files) any more, though the pipeline holds its baseline "
                f"{lineage} there: its files were removed outside pgsync"
            )
        if meta.lineage != lineage:
            raise DestinationDivergedError(
                f"{where} holds baseline {meta.lineage}, not {lineage}, the one the pipeline's state expects"
            )
        if base is None or base.type != pafs.FileType.File:
            raise DestinationDivergedError(
                f"{where}: its base {meta.base} (generation {meta.number}) is gone or incomplete: it was "
                "removed outside pgsync"
            )

    def stage_backfill(
        self,
        table: TableRef,
        columns: Sequence[ColumnInfo],
        backfill_id: str,
        rows: pa.Table,
        absent: pa.Table,
    ) -> str:
        """See ``lake_backfill.stage_backfill``."""
        return lake_backfill.stage_backfill(self, table, columns, backfill_id, rows, absent)

    def backfill(
        self, table: TableRef, columns: Sequence[ColumnInfo], location: str, touched: TouchedKeys, upto: Key
    ) -> int:
        """See ``lake_backfill.backfill``."""
        return lake_backfill.backfill(self, table, columns, location, touched, upto)

    def discard_backfill(self, location: str) -> None:
        self.files.remove(self.files.path(location))

    def change_schema(self, table: TableRef, diff: SchemaDiff) -> SchemaAnswer:
        """Continue when columns were only added, NULL in older rows, at the end with a type of
        ``added_column_type``; anything else (a rename, a drop, a type or key change, a
        constant or volatile default for older rows) goes back to baseline: the base files keep
        the old columns, and a new base is the only exact answer."""
        refused = (
            diff.unproven
            or diff.rows_rewritten
            or any(c.missing is not None for c in diff.added)
            or diff.renamed
            or diff.dropped
            or diff.retyped
        )
        if refused:
            log.warning("lake table %s goes back to baseline: %s", table, diff.describe())
            return SchemaAnswer.REBASELINE
        return self.schema_changed(table, diff.old, diff.new)

    def schema_changed(
        self, table: TableRef, old: Sequence[ColumnInfo], new: Sequence[ColumnInfo]
    ) -> SchemaAnswer:
        """Continue when the only change is columns added at the end with a type of
        ``added_column_type`` (they join the view at the next compaction); else Rebaseline."""
        before = [(c.name, c.type_oid, c.type_modifier, c.is_key) for c in old]
        after = [(c.name, c.type_oid, c.type_modifier, c.is_key) for c in new]
        added = list(new)[len(before) :]
        if (
            after[: len(before)] != before
            or any(added_column_type(c) is None for c in added)
            or is_keyed(old) != is_keyed(new)  # the view merges keyed tables and counted rows apart
        ):
            log.warning("lake table %s: columns changed beyond an addition; it goes back to baseline", table)
            return SchemaAnswer.REBASELINE
        opened = self._tables.get(table)
        if opened is not None:
            for column in added:
                spark_type = added_column_type(column)
                assert spark_type is not None
                opened.types[column.name] = spark_arrow_type(spark_type)
            opened.columns = [c.name for c in new]
            opened.keys = key_columns(new)
        return SchemaAnswer.CONTINUE

    # ---- records

    def _records(self, opened: _Table, columns: Sequence[ColumnInfo], changes: pa.RecordBatch) -> _Records:
        records = _Records()
        if not opened.keyed:
            for change in row_changes(columns, changes):
                if isinstance(change, Truncate):
                    records.add("T", {})
                    continue
                if change.old is not None:
                    records.add("-", change.old)
                if change.new is not None:
                    records.add("+", change.new)
            return records
        keys = key_columns(columns)
        bulk = bulk_net(columns, changes)
        if bulk is not None:
            records.built = _bulk_table(opened.columns, bulk)
            return records
        truncated = False
        for step in net_steps(columns, changes):
            if isinstance(step, Truncate):
                records.add("T", {})
                truncated = True
                continue
            for key in step.deletes:
                records.add("D", dict(zip(keys, key, strict=True)))
            for key, present in step.present():
                index = records.add("P", present.values)
                if present.unchanged and not truncated:  # after a TRUNCATE there is nothing to carry
                    records.carry[index] = (present.unchanged, _source(key, present))
        return records

    def _typed(self, table: TableRef, opened: _Table, records: _Records) -> pa.Table:
        texts = records.table(opened.columns)
        arrays: dict[str, pa.Array] = {KIND: texts.column(KIND).combine_chunks()}
        for name in opened.columns:
            arrays[name] = text_to_arrow(
                texts.column(name), opened.types[name], what=f"column {name!r} of table {table}"
            )
        if records.carry:
            arrays = self._carry(table, opened, records, arrays)
        return pa.table(arrays)

    def _carry(
        self, table: TableRef, opened: _Table, records: _Records, arrays: dict[str, pa.Array]
    ) -> dict[str, pa.Array]:
        """Fill the unchanged TOAST values of ``records.carry`` from the table's current rows."""
        keys = opened.keys
        sources = sorted({source for _, source in records.carry.values()}, key=repr)
        typed_keys = {
            k: text_to_arrow(
                pa.array([s[i] for s in sources], pa.string()), opened.types[k], what=f"key {k!r} of {table}"
            )
            for i, k in enumerate(keys)
        }
        typed_of = {source: tuple(typed_keys[k][i].as_py() for k in keys) for i, source in enumerate(sources)}
        current = self._current_rows(table, opened, keys, typed_keys)
        patched = {name: arrays[name].to_pylist() for name in opened.columns}
        for index, (unchanged, source) in records.carry.items():
            row = current.get(typed_of[source])
            if row is None:  # DESIGN rule 6: never NULL for a value the source kept
                raise DestinationError(
                    f"lake table {table} has no row with key {_key_text(keys, source)}, whose unchanged "
                    f"TOAST values ({', '.join(sorted(unchanged))}) a change of the source keeps: the "
                    "destination lost rows; rebaseline the table"
                )
            for name in unchanged:
                patched[name][index] = row.get(name)
        carried = {n for unchanged, _ in records.carry.values() for n in unchanged}
        return {
            name: (pa.array(patched[name], opened.types[name]) if name in carried else array)
            for name, array in arrays.items()
        }

    def _current_rows(
        self, table: TableRef, opened: _Table, keys: list[str], typed_keys: dict[str, pa.Array]
    ) -> dict[tuple[Any, ...], dict[str, Any]]:
        """The current rows of the given keys: the base, then the segments after its watermark."""
        meta = opened.meta
        wanted = None
        for k in keys:
            condition = pc.field(k).isin(typed_keys[k])
            wanted = condition if wanted is None else wanted & condition
        assert wanted is not None
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        base = ds.dataset(self.files.path(meta.base), filesystem=self._fs, format="parquet")
        for row in base.to_table(filter=wanted).to_pylist():
            rows[tuple(row[k] for k in keys)] = row
        truncates = pc.field(KIND) == "T"
        for key, path in self.files.segments(table, meta):
            if meta.watermark is not None and key <= meta.watermark:
                continue
            part = pq.read_table(path, filesystem=self._fs, filters=truncates | wanted)
            for row in part.to_pylist():
                kind = row[KIND]
                if kind == "T":
                    rows.clear()
                elif kind == "D":
                    rows.pop(tuple(row[k] for k in keys), None)
                else:
                    rows[tuple(row[k] for k in keys)] = row
        return rows


def _key_text(keys: list[str], values: KeyValues) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(keys, values, strict=True))


def _source(key: KeyValues, present: Present) -> KeyValues:
    """The key whose current row holds a present row's unchanged values."""
    return present.carry_from if present.carry_from is not None else key


def _bulk_table(columns: list[str], bulk: BulkNet) -> pa.Table:
    """A bulk net effect as records: D for its deletes (key columns set), P for the rest."""
    parts = []
    for kind, part in (("D", bulk.deletes), ("P", bulk.updates), ("P", bulk.inserts)):
        count = part.num_rows
        values = {
            n: part.column(n) if n in part.column_names else pa.nulls(count, pa.string()) for n in columns
        }
        parts.append(pa.table({KIND: pa.array([kind] * count, pa.string()), **values}))
    return pa.concat_tables(parts)
