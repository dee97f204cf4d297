"""Which tables a publication carries, with PostgreSQL 15 column lists and row filters."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.row_condition import check_expression

# Row filters are SQL expressions written by the pipeline's author (like the SQL of a DAG);
# they reach the server inside parentheses, checked to be one expression (row_condition).
# Everything else is an identifier.


@dataclass(frozen=True)
class PublishedTable:
    """One table of a publication: optional column list and row filter (PostgreSQL 15+)."""

    table: TableRef
    columns: tuple[str, ...] | None = None
    row_filter: str | None = None

    def __post_init__(self) -> None:
        if self.columns is not None and not self.columns:
            raise ConfigError(f"table {self.table}: an empty column list publishes nothing; omit it")
        if self.row_filter is not None and not isinstance(self.row_filter, str):
            raise ConfigError(f"table {self.table}: the row filter must be a string, not {self.row_filter!r}")
        if self.row_filter is not None and not self.row_filter.strip():
            raise ConfigError(f"table {self.table}: the row filter is empty; omit it")
        if self.row_filter is not None:
            check_expression(self.row_filter, f"table {self.table}: row_filter")

    def as_sql(self) -> sql.Composed:
        parts: list[sql.Composable] = [self.table.identifier]
        if self.columns:
            parts.append(sql.SQL(" ({})").format(sql.SQL(", ").join(map(sql.Identifier, self.columns))))
        if self.row_filter:
            parts.append(sql.SQL(" WHERE ({})").format(sql.SQL(self.row_filter)))
        return sql.Composed(parts)


def published_table(spec: str | TableRef | PublishedTable | Mapping[str, Any]) -> PublishedTable:
    """Accept ``'schema.table'``, a TableRef, or ``{"table": ..., "columns": [...], "row_filter": ...}``."""
    if isinstance(spec, PublishedTable):
        return spec
    if isinstance(spec, TableRef):
        return PublishedTable(spec)
    if isinstance(spec, str):
        return PublishedTable(TableRef.parse(spec))
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"table", "columns", "row_filter"}
        if unknown:
            raise ConfigError(
                f"table entry {dict(spec)!r} has unknown keys {sorted(unknown)}; "
                "allowed: table, columns, row_filter"
            )
        if "table" not in spec:
            raise ConfigError(f"table entry {dict(spec)!r} needs a 'table' key ('schema.table')")
        if not isinstance(spec["table"], str | TableRef):
            raise ConfigError(f"table entry {dict(spec)!r}: 'table' must be 'schema.table' or a TableRef")
        columns = spec.get("columns")
        if columns is not None and (
            isinstance(columns, str) or not all(isinstance(c, str) and c for c in columns)
        ):
            raise ConfigError(f"table {spec['table']!r}: 'columns' must be a list of column names")
        return PublishedTable(
            TableRef.parse(spec["table"]) if isinstance(spec["table"], str) else spec["table"],
            tuple(columns) if columns is not None else None,
            spec.get("row_filter"),
        )
    raise ConfigError(f"cannot read table entry {spec!r}; give 'schema.table' or a mapping")


def published_tables(specs: Iterable[Any]) -> tuple[PublishedTable, ...]:
    """Parse a list of table entries and refuse the same table twice."""
    if isinstance(specs, str | Mapping):
        raise ConfigError(f"tables must be a list of table entries, not {specs!r}")
    tables = tuple(published_table(s) for s in specs)
    seen: set[TableRef] = set()
    for t in tables:
        if t.table in seen:
            raise ConfigError(f"table {t.table} is listed twice")
        seen.add(t.table)
    if not tables:
        raise ConfigError("no tables given: list at least one 'schema.table'")
    return tables


def table_list_sql(tables: Sequence[PublishedTable]) -> sql.Composed:
    """``TABLE a (cols) WHERE (...), TABLE b`` for CREATE/ALTER PUBLICATION."""
    return sql.SQL(", ").join(sql.SQL("TABLE {}").format(t.as_sql()) for t in tables)


def normalise_filter(expr: str | None) -> str | None:
    """A row filter reduced for comparison with the server's deparsed form (best effort)."""
    if expr is None:
        return None
    text = " ".join(expr.split())
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0
