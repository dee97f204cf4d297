"""What a schema change did to a table's columns, told apart by attnum (``source/ddl.py``).

Pure: the destinations decide from a ``SchemaDiff`` whether they can follow exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from airflow_provider_pgsync.state.columns import REWRITE_COLUMN, REWRITE_DEFAULT, ColumnInfo, SchemaChange

# Type changes whose cast keeps every value's text (no rewrite of values): by type OID
# int2 -> int4 -> int8, varchar/bpchar -> text; a wider varchar(n) and numeric without a
# narrower scale are checked by typmod in ``SchemaDiff.widenings``.
_INT2, _INT4, _INT8, _TEXT, _VARCHAR, _NUMERIC = 21, 23, 20, 25, 1043, 1700
_WIDER = {(_INT2, _INT4), (_INT2, _INT8), (_INT4, _INT8), (_VARCHAR, _TEXT)}


@dataclass(frozen=True)
class SchemaDiff:
    """Old and new columns of a table, and what happened between them."""

    old: tuple[ColumnInfo, ...]
    new: tuple[ColumnInfo, ...]
    change: SchemaChange

    @property
    def unproven(self) -> str:
        """Why the columns cannot be matched by identity (empty: they can)."""
        if self.change.unproven:
            return self.change.unproven
        if any(not c.attnum for c in (*self.old, *self.new)):
            return "the columns' identities are unknown (no active DDL trigger when they changed)"
        return ""

    def _by_attnum(self) -> tuple[dict[int, ColumnInfo], dict[int, ColumnInfo]]:
        return {c.attnum: c for c in self.old}, {c.attnum: c for c in self.new}

    @property
    def renamed(self) -> list[tuple[ColumnInfo, ColumnInfo]]:
        old, new = self._by_attnum()
        return [(old[a], new[a]) for a in old.keys() & new.keys() if old[a].name != new[a].name]

    @property
    def added(self) -> list[ColumnInfo]:
        old, _ = self._by_attnum()
        return [c for c in self.new if c.attnum not in old]

    @property
    def dropped(self) -> list[ColumnInfo]:
        _, new = self._by_attnum()
        return [c for c in self.old if c.attnum not in new]

    @property
    def retyped(self) -> list[tuple[ColumnInfo, ColumnInfo]]:
        old, new = self._by_attnum()
        return [
            (old[a], new[a])
            for a in sorted(old.keys() & new.keys())
            if (old[a].type_oid, old[a].type_modifier) != (new[a].type_oid, new[a].type_modifier)
        ]

    @property
    def key_changed(self) -> bool:
        """Whether rows are identified by other key columns (by attnum), unless every column is in
        the key before and after: under REPLICA IDENTITY FULL the whole row identifies a row,
        whatever columns are added or dropped."""
        if _whole_row(self.old) and _whole_row(self.new):
            return False
        old, new = self._by_attnum()
        return {a for a, c in old.items() if c.is_key} != {a for a, c in new.items() if c.is_key}

    @property
    def widenings_only(self) -> bool:
        """Every type change widens the type with the same values (no USING clause)."""
        if self.change.using:
            return False
        return all(_widens(a, b) for a, b in self.retyped)

    @property
    def rows_rewritten(self) -> str:
        """Why rows may hold values no change carries (empty: they do not)."""
        if self.change.outside:  # rows came or went without changes (partitions)
            return self.change.outside
        # (a stored generated column added rewrites the table too, but only computes itself)
        if self.change.rewrite & REWRITE_DEFAULT and self.added:
            return "a column was added with a volatile default, computed for every row without WAL"
        if self.change.rewrite & REWRITE_COLUMN and not (self.retyped and self.widenings_only):
            return "the table was rewritten with new column values (ALTER COLUMN ... TYPE ... USING)"
        return ""

    def describe(self, type_name: Callable[[int, int], str] = lambda oid, mod: f"type OID {oid}") -> str:
        """What changed, in words, for logs and errors (types named by ``type_name(oid, typmod)``)."""
        def typed(c: ColumnInfo) -> str:
            return type_name(c.type_oid, c.type_modifier)

        if self.unproven:  # by name only: a rename looks like a drop and an add
            before, after = {c.name: c for c in self.old}, {c.name: c for c in self.new}
            named = [f"column {c.name} ({typed(c)}) added" for c in self.new if c.name not in before]
            named += [f"column {c.name} ({typed(c)}) dropped" for c in self.old if c.name not in after]
            both = [(before[n], after[n]) for n in before.keys() & after.keys()]
            named += [
                f"column {b.name} changed type from {typed(a)} to {typed(b)}"
                for a, b in both
                if (a.type_oid, a.type_modifier) != (b.type_oid, b.type_modifier)
            ]
            return "; ".join([*named, f"columns not matched by identity: {self.unproven}"])

        parts = [f"column {a.name} renamed to {b.name}" for a, b in self.renamed]
        parts += [f"column {c.name} ({typed(c)}) added" + _fill_text(c) for c in self.added]
        parts += [f"column {c.name} ({typed(c)}) dropped" for c in self.dropped]
        parts += [f"column {b.name} changed type from {typed(a)} to {typed(b)}" for a, b in self.retyped]
        if self.key_changed:
            parts.append(f"key changed from {_key_text(self.old)} to {_key_text(self.new)}")
        if self.rows_rewritten and not (self.retyped and self.change.rewrite == REWRITE_COLUMN):
            parts.append(self.rows_rewritten)  # (a type change's rewrite goes without saying)
        return "; ".join(parts) or "the table's DDL changed no column"


def diff_columns(old: Sequence[ColumnInfo], new: Sequence[ColumnInfo], change: SchemaChange) -> SchemaDiff:
    return SchemaDiff(tuple(old), tuple(new), change)


def _whole_row(columns: Sequence[ColumnInfo]) -> bool:
    """Whether every column is in the key (REPLICA IDENTITY FULL: a row is known by all its values)."""
    return bool(columns) and all(c.is_key for c in columns)


def _key_text(columns: Sequence[ColumnInfo]) -> str:
    names = ", ".join(c.name for c in columns if c.is_key)
    if not names:
        return "none (no replica identity)"
    return f"the whole row ({names})" if _whole_row(columns) and len(columns) > 1 else f"({names})"


def _widens(a: ColumnInfo, b: ColumnInfo) -> bool:
    if (a.type_oid, b.type_oid) in _WIDER:
        return True
    if a.type_oid == b.type_oid == _VARCHAR:
        return b.type_modifier == -1 or (a.type_modifier != -1 and b.type_modifier >= a.type_modifier)
    if a.type_oid == b.type_oid == _NUMERIC:
        # typmod = (precision << 16 | scale) + 4: the same scale and no smaller precision
        if b.type_modifier == -1:
            return True
        if a.type_modifier == -1:
            return False
        same_scale = (a.type_modifier - 4) & 0xFFFF == (b.type_modifier - 4) & 0xFFFF
        return same_scale and (b.type_modifier - 4) >> 16 >= (a.type_modifier - 4) >> 16
    return False


def _fill_text(c: ColumnInfo) -> str:
    if c.missing is None:
        return ""
    shown = c.missing if len(c.missing) <= 40 else c.missing[:40] + "..."
    return f" (rows before it hold {shown!r})"
