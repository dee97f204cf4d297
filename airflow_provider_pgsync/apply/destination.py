"""The contract between apply and a destination (DESIGN.md §5).

Lifecycle of one table in one destination:

1. ``open_table(table, columns, schema_version)``: create what the table needs (idempotent);
2. the baseline: written by the baseline's Spark job for the lake and PostgreSQL; a custom
   destination takes it through ``load_baseline(table, columns, batches, lineage)``: the
   table's rows in one exported snapshot, as PostgreSQL text, replacing whatever the table
   held, with no watermark (nothing applied yet) and ``lineage`` recorded, all or nothing;
3. ``apply(table, changes, upto)``: a batch of changes in ``(commit_lsn, seq)`` order, in the
   changelog's layout (``changelog/schema.py``: ``_op`` I/U/D/T, old keys, unchanged TOAST
   names, values as PostgreSQL text), applied together with the watermark ``upto``: after
   it returns, ``watermark(table)`` is ``upto``; a failure applies none of the batch;
4. ``change_schema(table, diff)`` when the table's columns change (``state/schema_diff.py``:
   old and new columns matched by attnum, so renames, drops and additions are told apart, and
   what older rows hold in an added column): ``Continue`` (the destination adapted exactly),
   ``Rebaseline`` or ``Error``, as a ``SchemaAnswer`` or, with the destination's reason,
   ``SchemaAnswer.REBASELINE.because(...)`` (apply says what changed in either case). Its
   default asks the older ``schema_changed(table, old, new)`` only about columns added (NULL
   in older rows) or dropped, and answers Rebaseline to anything else, so a destination
   written before never turns a rename into a drop and add;
5. optionally a backfill: rows of the table re-read in an exported snapshot S and staged, then
   ``backfill(table, columns, location, touched, upto)`` writes the staged rows over the
   destination's rows and deletes the staged absent keys (the keys of a key-list backfill that
   S does not hold), except for the ``touched`` keys (changed by transactions S did not see:
   the stream has them), all with watermark ``upto`` (``apply/backfill.py`` says why that is
   exact); ``discard_backfill(location)`` once done. A filter backfill's rows are staged by the
   backfill's Spark job (lake, PostgreSQL); a key-list backfill's by the destination itself through
   ``stage_backfill(table, columns, backfill_id, rows, absent)``, which keeps them until apply
   and returns their ``location``. Destinations written before keep the defaults: they take
   no backfill (the table is rebaselined instead);
6. ``close()``.

``drop_table(table)`` is not part of apply: the teardown of a table taken out of the pipeline
calls it when asked to drop its destination tables too; the default keeps the table and says so.

Before apply hands a baselined table anything, ``verify(table, lineage)`` proves the destination
still holds what its watermark says (DESIGN §2 rule 11): the table made by the baseline
``lineage``, not dropped, replaced or emptied by someone else since; a destination that cannot
tell raises ``DestinationDivergedError`` naming what is gone, and apply puts that table in that
destination in Errored with "rebaseline" as the remedy instead of creating it again empty. The
default compares ``lineage(table)`` with the state's lineage.

A destination is named (``name``); apply keeps no watermark of its own but asks the
destination, so a destination that stores its watermark with its data (PostgreSQL) applies
every change exactly once. ``airflow_provider_pgsync.testing.destination_kit`` drives any
destination through this lifecycle without a source database.

The contract lives with apply, which writes to it; destinations implement it and import
apply, never the reverse. ``airflow_provider_pgsync.destinations.protocol``, the name custom
destinations import, re-exports it.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from airflow_provider_pgsync.apply.backfill import TouchedKeys
from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.errors import DestinationDivergedError, DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo
from airflow_provider_pgsync.state.schema_diff import SchemaDiff


class SchemaAnswer(enum.Enum):
    """A destination's answer to a change of a table's columns."""

    CONTINUE = "Continue"
    REBASELINE = "Rebaseline"
    ERROR = "Error"

    def because(self, reason: str) -> SchemaDecision:
        """This answer with the destination's ``reason`` (e.g. why it cannot follow in place)."""
        return SchemaDecision(self, reason)


@dataclass(frozen=True)
class SchemaDecision:
    """A destination's ``answer`` to a change of a table's columns, with its ``reason`` ("" for none)."""

    answer: SchemaAnswer
    reason: str = ""


def schema_decision(result: SchemaAnswer | SchemaDecision) -> SchemaDecision:
    """What ``schema_changed`` returned as a ``SchemaDecision`` (a bare answer has no reason)."""
    if isinstance(result, SchemaDecision):
        return result
    if isinstance(result, SchemaAnswer):
        return SchemaDecision(result)
    raise TypeError(f"schema_changed must return a SchemaAnswer or a SchemaDecision, not {result!r}")


class Destination(ABC):
    """Where apply writes a table's changes; see the module docstring for the lifecycle."""

    name: str

    @abstractmethod
    def open_table(self, table: TableRef, columns: Sequence[ColumnInfo], schema_version: int) -> None:
        """Make the table ready for ``columns`` (create it when missing); idempotent."""

    @abstractmethod
    def apply(
        self, table: TableRef, columns: Sequence[ColumnInfo], changes: pa.RecordBatch, upto: Key
    ) -> None:
        """Apply ``changes`` (possibly none) and record ``upto`` as the watermark, all or nothing."""

    @abstractmethod
    def watermark(self, table: TableRef) -> Key | None:
        """The key of the last change applied to ``table``; None before the first batch."""

    def verify(self, table: TableRef, lineage: str) -> None:
        """Raise ``DestinationDivergedError`` (what is gone, and "rebaseline" as the remedy) unless
        the destination still holds the baseline ``lineage`` of ``table`` that the state
        expects; called by apply before it reads the watermark. The default compares
        ``lineage(table)`` with ``lineage`` when the destination records one (``lineage``
        returns None: nothing to compare). Destinations that can tell more (the table's
        identity, rows removed by someone else) check that too."""
        held = self.lineage(table)
        if held is not None and held != lineage:
            raise DestinationDivergedError(
                f"destination {self.name} holds baseline {held} of {table}, not {lineage}, the one the "
                "pipeline's state expects: someone replaced its rows or an older baseline finished late"
            )

    def change_schema(self, table: TableRef, diff: SchemaDiff) -> SchemaAnswer | SchemaDecision:
        """Follow ``diff`` exactly if possible, and say how apply goes on. The default: columns
        only added (NULL in older rows) or dropped go to ``schema_changed``; anything else
        (renames, type or key changes, values rewritten, unknown column identities) Rebaseline."""
        if (
            diff.unproven
            or diff.renamed
            or diff.retyped
            or diff.key_changed
            or diff.rows_rewritten
            or any(c.missing is not None for c in diff.added)
        ):
            return SchemaAnswer.REBASELINE
        return self.schema_changed(table, diff.old, diff.new)

    @abstractmethod
    def schema_changed(
        self, table: TableRef, old: Sequence[ColumnInfo], new: Sequence[ColumnInfo]
    ) -> SchemaAnswer | SchemaDecision:
        """Adapt to the table's new columns if possible, and say how apply goes on (a bare
        ``SchemaAnswer``, or one with a reason: ``SchemaAnswer.REBASELINE.because("...")``)."""

    def stage_backfill(
        self,
        table: TableRef,
        columns: Sequence[ColumnInfo],
        backfill_id: str,
        rows: pa.Table,
        absent: pa.Table,
    ) -> str:
        """Keep a key-list backfill's ``rows`` (one string column per ``columns``, values as
        PostgreSQL text, None for NULL, each key once) and ``absent`` keys (string key columns:
        keys the snapshot holds no row of) until ``backfill`` takes them; their location (a name
        this destination understands). Called by ``PgBackfillOperator`` while it holds the
        snapshot open, before any state is written; a failure stages nothing. Destinations
        that take no backfill keep this default."""
        raise DestinationError(
            f"destination {self.name} cannot take a backfill of {table}: its class {type(self).__name__} "
            "has no stage_backfill (docs/writing-a-destination.md); rebaseline the table instead"
        )

    def backfill(
        self, table: TableRef, columns: Sequence[ColumnInfo], location: str, touched: TouchedKeys, upto: Key
    ) -> int:
        """Write the staged rows at ``location`` whose keys are not ``touched`` over the table's
        rows, and delete the table's rows of the staged absent keys that are not ``touched``
        (nothing at all after a TRUNCATE: ``touched.truncated``), with watermark ``upto``, all or
        nothing; the number of rows written or deleted. Destinations that take no backfill keep
        this default."""
        raise DestinationError(f"destination {self.name} cannot take a backfill; rebaseline {table} instead")

    def load_baseline(
        self,
        table: TableRef,
        columns: Sequence[ColumnInfo],
        batches: Iterator[pa.RecordBatch],
        lineage: str,
    ) -> int:
        """Replace the table's rows by the rows of ``batches`` (one string column per
        ``columns``, values as PostgreSQL text, None for NULL: the text apply's changes carry),
        with no watermark (``watermark(table)`` is None after it) and ``lineage`` recorded
        (``lineage(table)``), all or nothing: a failure leaves the old rows and watermark. The
        number of rows written. Called by the baseline while it holds the snapshot open;
        destinations that take no baseline keep this default."""
        raise DestinationError(
            f"destination {self.name} cannot take a baseline of {table}: its class "
            f"{type(self).__name__} has no load_baseline (docs/writing-a-destination.md)"
        )

    def lineage(self, table: TableRef) -> str | None:
        """The lineage of the baseline the destination holds for ``table`` (default None)."""
        return None

    def drop_table(self, table: TableRef) -> None:
        """Drop ``table`` and whatever the destination keeps for it (its watermark), for the
        teardown of a table taken out of the pipeline (param ``drop_tables``); a table that is not
        there is no error. Destinations that cannot keep this default: the teardown keeps their
        table, and its log says so with this error's text."""
        raise DestinationError(
            f"destination {self.name} (class {type(self).__name__}) cannot drop tables: {table} is kept "
            "there; drop it yourself if it is no longer needed"
        )

    def discard_backfill(self, location: str) -> None:
        """Remove the staged rows at ``location`` (default: nothing to remove)."""
        return None

    def close(self) -> None:
        """Release connections and sessions (default: nothing to release)."""
        return None
