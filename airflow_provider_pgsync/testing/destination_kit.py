"""A test kit for destinations: drives one through its whole lifecycle from changes held in
memory, without a source database, and checks it against a reference model.

Use it from your destination's tests (pytest or any runner)::

    from airflow_provider_pgsync.testing.destination_kit import Change, column, run_lifecycle

    columns = [column("id", 23, key=True), column("note", 25)]
    changes = [Change("I", {"id": "1", "note": "a"}), Change("U", {"id": "1", "note": "b"})]
    run_lifecycle(my_destination, TableRef("public", "t"), columns, changes, read_rows=my_reader)

A destination that takes a baseline (``Destination.load_baseline``) goes through
``run_baseline_lifecycle``: a baseline of given rows, changes on top, a failed baseline that
must change nothing, and a second baseline that replaces everything. One that takes a
backfill (``stage_backfill`` and ``backfill``) goes through ``run_backfill_lifecycle``: staged
rows written and absent keys deleted, except touched keys, with the watermark; nothing after a
TRUNCATE.

``read_rows(table)`` returns the destination's rows as dicts of PostgreSQL text (None for
NULL). Each change is one transaction: ``commit_lsn`` grows by 16 per change, ``seq`` is 1.
Values are PostgreSQL text, as the changelog holds them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa

from airflow_provider_pgsync.apply.backfill import TouchedKeys
from airflow_provider_pgsync.apply.destination import Destination, SchemaAnswer, schema_decision
from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.changelog.schema import (
    COMMIT_LSN,
    COMMIT_TS,
    OP,
    SEQ,
    UNCHANGED,
    XID,
    key_columns,
    old_key_column,
    segment_schema,
)
from airflow_provider_pgsync.errors import DestinationDivergedError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

Row = dict[str, str | None]


def column(name: str, type_oid: int, *, key: bool = False, type_modifier: int = -1) -> ColumnInfo:
    """A column as a Relation message describes it (``type_oid``: e.g. 23 int4, 25 text)."""
    return ColumnInfo(name, type_oid, type_modifier, key)


@dataclass(frozen=True)
class Change:
    """One change: ``op`` I, U, D or T; ``values`` the new row (I, U) or the key (D);
    ``old_key`` the old key of an UPDATE that changed it (or the whole old row of a
    row-identity table); ``unchanged`` the columns sent as unchanged TOAST."""

    op: str
    values: Mapping[str, str | None] = field(default_factory=dict)
    old_key: Mapping[str, str | None] | None = None
    unchanged: Sequence[str] = ()
    xid: int = 1000


def change_batch(
    columns: Sequence[ColumnInfo], changes: Sequence[Change], *, first_lsn: int
) -> pa.RecordBatch:
    """``changes`` in the changelog's layout, one transaction each from ``first_lsn`` on."""
    schema = segment_schema(columns)
    keys = key_columns(columns)
    data: dict[str, list[object]] = {name: [] for name in schema.names}
    for i, change in enumerate(changes):
        data[OP].append(change.op)
        data[COMMIT_LSN].append(first_lsn + 16 * i)
        data[SEQ].append(1)
        data[XID].append(change.xid)
        data[COMMIT_TS].append(datetime(2026, 1, 1, tzinfo=UTC))
        data[UNCHANGED].append(list(change.unchanged) or None)
        for key in keys:
            data[old_key_column(key)].append(
                (change.old_key or {}).get(key) if change.op != "D" else change.values.get(key)
            )
        for c in columns:
            value = (
                None if c.name in change.unchanged or change.op in ("D", "T") else change.values.get(c.name)
            )
            data[c.name].append(value)
    return pa.RecordBatch.from_pydict(data, schema=schema)


class Model:
    """The reference semantics (DESIGN §2 rules 6-8), change by change, in memory."""

    def __init__(self, columns: Sequence[ColumnInfo]) -> None:
        self.columns = list(columns)
        self.rows: list[Row] = []

    def apply(self, change: Change) -> None:
        keys = key_columns(self.columns)
        if change.op == "T":
            self.rows.clear()
            return
        if change.op == "I":
            self.rows.append({c.name: change.values.get(c.name) for c in self.columns})
            return
        old = dict(change.old_key) if change.old_key else {k: change.values.get(k) for k in keys}
        index = next(
            (i for i, row in enumerate(self.rows) if all(row[k] == old.get(k) for k in old)),
            None,
        )
        if index is None:
            raise AssertionError(f"the changes {change.op} a row that does not exist: {old}")
        previous = self.rows.pop(index)
        if change.op == "U":
            self.rows.append(
                {
                    c.name: previous[c.name] if c.name in change.unchanged else change.values.get(c.name)
                    for c in self.columns
                }
            )

    def sorted_rows(self) -> list[Row]:
        return sorted(self.rows, key=_order)


def _order(row: Row) -> tuple[tuple[bool, str], ...]:
    return tuple((v is None, v or "") for v in row.values())


def run_lifecycle(
    destination: Destination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    changes: Sequence[Change],
    *,
    read_rows: Callable[[TableRef], list[Row]],
    batch_size: int = 4,
    new_columns: Sequence[ColumnInfo] | None = None,
    changes_after: Sequence[Change] = (),
    first_lsn: int = 0x1000000,
) -> list[Row]:
    """Open the table, apply ``changes`` in batches of ``batch_size`` (checking the watermark
    after each and that a re-run skips what is applied), compare with the model; then, with
    ``new_columns``, announce the schema change and, on Continue, apply ``changes_after``.
    Closes the destination; returns the final rows. Raises AssertionError on a difference."""
    model = Model(columns)
    destination.open_table(table, columns, 0)
    lsn = _apply_all(destination, table, columns, changes, model, batch_size, first_lsn)
    _compare(read_rows(table), model, "after the changes")
    if new_columns is not None:
        answer = schema_decision(destination.schema_changed(table, columns, new_columns)).answer
        if answer is SchemaAnswer.CONTINUE:
            model = _reshaped(model, new_columns)
            _apply_all(destination, table, new_columns, changes_after, model, batch_size, lsn)
            _compare(read_rows(table), model, "after the schema change")
    destination.close()
    return model.sorted_rows()


def _apply_all(
    destination: Destination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    changes: Sequence[Change],
    model: Model,
    batch_size: int,
    first_lsn: int,
) -> int:
    lsn = first_lsn
    for start in range(0, len(changes), batch_size):
        part = changes[start : start + batch_size]
        batch = change_batch(columns, part, first_lsn=lsn)
        upto: Key = (lsn + 16 * (len(part) - 1), 1)
        watermark = destination.watermark(table)
        if watermark is not None and watermark >= upto:
            raise AssertionError(f"watermark {watermark} is already past a batch not applied yet ({upto})")
        destination.apply(table, columns, batch, upto)
        if destination.watermark(table) != upto:
            raise AssertionError(
                f"after a batch up to {upto} the watermark is {destination.watermark(table)}"
            )
        for change in part:
            model.apply(change)
        lsn += 16 * len(part)
    return lsn


def _reshaped(model: Model, columns: Sequence[ColumnInfo]) -> Model:
    out = Model(columns)
    out.rows = [{c.name: row.get(c.name) for c in columns} for row in model.rows]
    return out


def _compare(actual: list[Row], model: Model, when: str) -> None:
    got = sorted(actual, key=_order)
    want = model.sorted_rows()
    if got != want:
        missing = [r for r in want if r not in got]
        extra = [r for r in got if r not in want]
        raise AssertionError(
            f"the destination differs from the model {when}: missing {missing}, extra {extra}"
        )


class KitBaselineFailure(Exception):
    """Raised by the kit inside a baseline's rows to check that a failed baseline changes nothing."""


def rows_batches(
    columns: Sequence[ColumnInfo], rows: Sequence[Mapping[str, str | None]], batch_size: int
) -> Iterator[pa.RecordBatch]:
    """``rows`` as the baseline hands them over: batches of string columns named after ``columns``."""
    schema = pa.schema([pa.field(c.name, pa.string()) for c in columns])
    for start in range(0, len(rows), batch_size):
        part = rows[start : start + batch_size]
        yield pa.RecordBatch.from_pydict(
            {c.name: [r.get(c.name) for r in part] for c in columns}, schema=schema
        )


def run_baseline_lifecycle(
    destination: Destination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    rows: Sequence[Mapping[str, str | None]],
    changes: Sequence[Change],
    *,
    read_rows: Callable[[TableRef], list[Row]],
    second_rows: Sequence[Mapping[str, str | None]] = (),
    batch_size: int = 4,
    first_lsn: int = 0x1000000,
) -> list[Row]:
    """Open the table, load a baseline of ``rows`` (lineage ``kit-1``, in batches of
    ``batch_size``) and check the rows, a None watermark and the lineage; apply ``changes``
    on top and compare with the model; then a baseline that fails part way must leave rows,
    watermark and lineage as they were; a second baseline of ``second_rows`` (lineage
    ``kit-2``) replaces everything and resets the watermark. After each baseline ``verify``
    must accept its lineage and refuse another (``DestinationDivergedError``). Closes the
    destination; returns the final rows. Raises AssertionError on a difference."""
    model = Model(columns)
    destination.open_table(table, columns, 0)
    _load(destination, table, columns, rows, "kit-1", batch_size)
    model.rows = [{c.name: r.get(c.name) for c in columns} for r in rows]
    _compare(read_rows(table), model, "after the baseline")
    _apply_all(destination, table, columns, changes, model, batch_size, first_lsn)
    _compare(read_rows(table), model, "after the changes on top of the baseline")

    watermark = destination.watermark(table)

    def failing() -> Iterator[pa.RecordBatch]:
        yield from rows_batches(columns, second_rows or rows, max(1, batch_size))
        raise KitBaselineFailure("the kit stops this baseline part way")

    try:
        destination.load_baseline(table, columns, failing(), "kit-failed")
    except KitBaselineFailure:
        pass
    else:
        raise AssertionError("load_baseline returned although its rows raised an error")
    _compare(read_rows(table), model, "after a failed baseline (it must change nothing)")
    if destination.watermark(table) != watermark or destination.lineage(table) != "kit-1":
        raise AssertionError(
            f"a failed baseline changed the watermark ({destination.watermark(table)}, was {watermark}) "
            f"or the lineage ({destination.lineage(table)!r}, was 'kit-1')"
        )

    _load(destination, table, columns, second_rows, "kit-2", batch_size)
    model.rows = [{c.name: r.get(c.name) for c in columns} for r in second_rows]
    _compare(read_rows(table), model, "after the second baseline")
    destination.close()
    return model.sorted_rows()


def _load(
    destination: Destination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    rows: Sequence[Mapping[str, str | None]],
    lineage: str,
    batch_size: int,
) -> None:
    written = destination.load_baseline(table, columns, rows_batches(columns, rows, batch_size), lineage)
    if written != len(rows):
        raise AssertionError(f"load_baseline wrote {written} rows of {len(rows)}")
    if destination.watermark(table) is not None:
        raise AssertionError(f"after a baseline the watermark is {destination.watermark(table)}, not None")
    if destination.lineage(table) != lineage:
        raise AssertionError(f"after the baseline {lineage!r} the lineage is {destination.lineage(table)!r}")
    destination.verify(table, lineage)  # it holds the baseline it just took
    try:
        destination.verify(table, f"{lineage}-not")
    except DestinationDivergedError:
        pass
    else:
        raise AssertionError(f"verify accepted baseline {lineage!r}-not for a table holding {lineage!r}")


def run_backfill_lifecycle(
    destination: Destination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    changes: Sequence[Change],
    *,
    read_rows: Callable[[TableRef], list[Row]],
    staged: Sequence[Mapping[str, str | None]],
    absent: Sequence[Mapping[str, str | None]],
    touched: Sequence[Mapping[str, str | None]] = (),
    batch_size: int = 4,
    first_lsn: int = 0x1000000,
) -> list[Row]:
    """Open the table and apply ``changes``; then a key-list backfill: ``stage_backfill`` of the
    rows ``staged`` (whole rows, as the source's snapshot holds them) and the keys ``absent``
    (keys the snapshot has no row of), and ``backfill`` with the keys ``touched`` since the
    snapshot, at the watermark's next key. The destination must then hold each staged row and
    no row of an absent key, except for touched keys (left as they were), with that watermark;
    ``discard_backfill`` follows. A second backfill after a TRUNCATE (``touched.truncated``)
    must change no row. Closes the destination; returns the final rows. AssertionError on a
    difference."""
    model = Model(columns)
    destination.open_table(table, columns, 0)
    _apply_all(destination, table, columns, changes, model, batch_size, first_lsn)
    _compare(read_rows(table), model, "after the changes")
    keys = key_columns(columns)

    def key_of(row: Mapping[str, str | None]) -> tuple[str | None, ...]:
        return tuple(row.get(k) for k in keys)

    newer = {key_of(r) for r in touched}
    as_text = pa.table({k: pa.array([r.get(k) for r in touched], pa.string()) for k in keys})
    rows_table = pa.table({c.name: pa.array([r.get(c.name) for r in staged], pa.string()) for c in columns})
    absent_table = pa.table({k: pa.array([r.get(k) for r in absent], pa.string()) for k in keys})
    for number, truncated in ((1, False), (2, True)):
        location = destination.stage_backfill(table, columns, f"kit-{number}", rows_table, absent_table)
        watermark = destination.watermark(table)
        upto: Key = (watermark[0], watermark[1] + 1) if watermark is not None else (first_lsn, 1)
        destination.backfill(table, columns, location, TouchedKeys(as_text, truncated=truncated), upto)
        if not truncated:
            gone = {key_of(r) for r in absent} | {key_of(r) for r in staged}
            model.rows = [r for r in model.rows if key_of(r) not in gone or key_of(r) in newer]
            model.rows += [{c.name: r.get(c.name) for c in columns} for r in staged if key_of(r) not in newer]
        when = "after a backfill" + (" after a TRUNCATE (it must change no row)" if truncated else "")
        _compare(read_rows(table), model, when)
        if destination.watermark(table) != upto:
            raise AssertionError(f"{when} up to {upto} the watermark is {destination.watermark(table)}")
        destination.discard_backfill(location)
    destination.close()
    return model.sorted_rows()
