"""A table's columns, and what the source's DDL trigger reported between two of its schema versions."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from airflow_provider_pgsync.errors import StateError


@dataclass(frozen=True)
class ColumnInfo:
    """One column of a table as the last Relation message described it, with what the
    source's DDL trigger reported of it (``source/ddl.py``)."""

    name: str
    type_oid: int
    type_modifier: int
    is_key: bool
    attnum: int = 0
    """The column's number in the source's catalog (``pg_attribute.attnum``, never reused by
    another column of the table, kept by a rename); 0: unknown (no DDL trigger, older state)."""
    missing: str | None = None
    """The text of the value that rows older than the column hold (``attmissingval``: the
    constant default the column was added with); None: NULL."""


REWRITE_DEFAULT = 2
"""``pg_event_trigger_table_rewrite_reason()`` bit: a column added with a volatile default."""
REWRITE_COLUMN = 4
"""``pg_event_trigger_table_rewrite_reason()`` bit: ALTER COLUMN TYPE (with or without USING)."""
VALUE_REWRITES = REWRITE_DEFAULT | REWRITE_COLUMN
"""Rewrites that may give rows values no WAL record carries."""


def same_shape(a: tuple[ColumnInfo, ...], b: tuple[ColumnInfo, ...]) -> bool:
    """Whether two column lists agree in what a Relation message shows (name, type, key), in order."""
    return len(a) == len(b) and all(
        (x.name, x.type_oid, x.type_modifier, x.is_key) == (y.name, y.type_oid, y.type_modifier, y.is_key)
        for x, y in zip(a, b, strict=True)
    )


@dataclass(frozen=True)
class SchemaChange:
    """DDL seen for a table since its last schema version (``source/ddl.py``).

    ``columns``: the catalog's columns after the last DDL (None: no DDL message seen);
    ``rewrite``: the OR of the rewrites' reasons; ``using``: a type change had a USING clause;
    ``unproven``: why the columns' identities (attnums) cannot be trusted across this change
    (empty: they can).
    """

    columns: tuple[ColumnInfo, ...] | None = None
    rewrite: int = 0
    using: bool = False
    unproven: str = ""
    xids: tuple[int, ...] = ()
    """The 64-bit xids of the DDL's transactions (a baseline whose snapshot saw them all copied
    the new columns already)."""
    outside: str = ""
    """Why rows of the table changed without changes in the stream (a partition attached with rows,
    detached or truncated: ``source/partition_events.py``); empty: none did. Only a new baseline
    follows such a change."""

    def __post_init__(self) -> None:
        if self.columns is not None:
            object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "xids", tuple(sorted(set(self.xids))))
        if self.rewrite < 0:
            raise StateError(f"schema change: rewrite reason {self.rewrite} is negative")

    @property
    def empty(self) -> bool:
        return self == SchemaChange()

    def joined(self, later: SchemaChange) -> SchemaChange:
        """This change followed by ``later``."""
        return SchemaChange(
            later.columns if later.columns is not None else self.columns,
            self.rewrite | later.rewrite,
            self.using or later.using,
            "; ".join(r for r in (self.unproven, later.unproven) if r),
            (*self.xids, *later.xids),
            "; ".join(r for r in (self.outside, later.outside) if r),
        )

    def with_unproven(self, reason: str) -> SchemaChange:
        return replace(self, unproven="; ".join(r for r in (self.unproven, reason) if r))

    def flags_json(self) -> dict[str, Any]:
        """The parts a schema version keeps (segment metadata): everything but the columns."""
        flags = {"rewrite": self.rewrite, "using": self.using, "unproven": self.unproven}
        return {**flags, "xids": list(self.xids), **({"outside": self.outside} if self.outside else {})}

    @classmethod
    def from_flags(cls, data: dict[str, Any] | None) -> SchemaChange:
        if not data:
            return cls()
        rewrite, using = int(data.get("rewrite", 0)), bool(data.get("using", False))
        xids = tuple(int(x) for x in data.get("xids", ()))
        return cls(None, rewrite, using, str(data.get("unproven", "")), xids, str(data.get("outside", "")))


def column_json(c: ColumnInfo) -> list[Any]:
    """A column as the state and the segment metadata write it (older readers take the first four)."""
    out: list[Any] = [c.name, c.type_oid, c.type_modifier, c.is_key]
    if c.attnum or c.missing is not None:
        out += [c.attnum, c.missing]
    return out


def column_of(data: list[Any] | tuple[Any, ...]) -> ColumnInfo:
    """The column written by ``column_json``; ValueError/TypeError when malformed."""
    if len(data) not in (4, 6):
        raise ValueError(f"a column has 4 or 6 fields, not {len(data)}")
    name, oid, mod, key = data[:4]
    if not isinstance(name, str) or not isinstance(key, bool):
        raise TypeError(f"column {name!r}: name must be text and is_key a boolean")
    attnum, missing = (data[4], data[5]) if len(data) == 6 else (0, None)
    if missing is not None and not isinstance(missing, str):
        raise TypeError(f"column {name}: missing value must be text or null")
    return ColumnInfo(name, int(oid), int(mod), key, attnum=int(attnum), missing=missing)
