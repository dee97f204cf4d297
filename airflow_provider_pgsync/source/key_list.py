"""A backfill's explicit key list (``PgBackfillOperator(backfill_keys=...)``), checked against the
table's key columns; pure logic.

A key is a dict of the table's key columns (its replica identity) to values as PostgreSQL text
(``{"id": "17"}``); an ``int`` is taken as its decimal text. Keys are kept in the order given,
without repeats; the source's server parses and compares the values (``hooks/key_rows.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.state.model import ColumnInfo

MAX_BACKFILL_KEYS = 100_000
"""The most keys one backfill takes: the keys travel in one statement, the rows are read on the
Airflow worker and staged by apply in one transaction per destination."""

KeyValues = tuple[str | None, ...]


@dataclass(frozen=True)
class KeyList:
    """Keys of a table: ``columns`` (its key columns, in Relation order) and one tuple of text
    values per key, in that order, without repeats."""

    columns: tuple[str, ...]
    values: tuple[KeyValues, ...]

    def column(self, index: int) -> list[str | None]:
        """The values of key column ``index``, one per key."""
        return [key[index] for key in self.values]


def read_keys(
    backfill_keys: object,
    key_names: Sequence[str],
    table: str,
    *,
    nullable: bool = False,
    limit: int = MAX_BACKFILL_KEYS,
) -> KeyList:
    """``backfill_keys`` as a ``KeyList`` of the key columns ``key_names`` of ``table``;
    ConfigError naming the table, the key (by its position) and the remedy otherwise. NULL
    values only where ``nullable`` (a table whose key is the whole row)."""
    where = f"backfill_keys of table {table}"
    example = "[{" + ", ".join(f'"{n}": "..."' for n in key_names) + "}]"
    if isinstance(backfill_keys, str | bytes | Mapping) or not isinstance(backfill_keys, Sequence):
        raise ConfigError(
            f"{where} must be a list of keys, each a dict of the key columns to their values as text, "
            f"e.g. {example}; not {type(backfill_keys).__name__}"
        )
    if not backfill_keys:
        raise ConfigError(f"{where} is empty: name at least one key, e.g. {example}")
    if len(backfill_keys) > limit:
        raise ConfigError(
            f"{where} has {len(backfill_keys):,} keys, more than the {limit:,} one backfill takes: split "
            "them into several backfills, or re-send a range with backfill_filter (e.g. id BETWEEN 1 AND 99)"
        )
    wanted = set(key_names)
    seen: dict[KeyValues, None] = {}
    for index, key in enumerate(backfill_keys):
        at = f"{where}, key {index} ({_shown(key)})"
        if not isinstance(key, Mapping):
            raise ConfigError(f"{at}: each key is a dict of the key columns to their values, e.g. {example}")
        unknown = [str(n) for n in key if n not in wanted]
        missing = [n for n in key_names if n not in key]
        if unknown or missing:
            problems = [f"{_names(unknown)} not a key column of the table"] if unknown else []
            problems += [f"{_names(missing)} missing"] if missing else []
            raise ConfigError(
                f"{at}: {'; '.join(problems)}; the table's key is ({', '.join(key_names)}): give "
                f"exactly those columns, e.g. {example}"
            )
        seen[tuple(_value(key[n], n, at, nullable) for n in key_names)] = None
    return KeyList(tuple(key_names), tuple(seen))


def key_names_of(columns: Sequence[ColumnInfo]) -> list[str]:
    """The key columns of a table with ``columns`` (every column when its identity is the row)."""
    keys = [c.name for c in columns if c.is_key]
    return keys or [c.name for c in columns]


def _value(value: object, name: str, at: str, nullable: bool) -> str | None:
    if value is None:
        if nullable:
            return None
        raise ConfigError(f"{at}: key column {name!r} is NULL, and a key has no NULL value; give its value")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ConfigError(
            f"{at}: the value of {name!r} must be text as PostgreSQL writes it (a str, e.g. '17' or "
            f"'2024-01-01 10:00:00+00'), not {type(value).__name__}"
        )
    if "\x00" in value:
        raise ConfigError(
            f"{at}: the value of {name!r} holds a NUL character, which no PostgreSQL text holds"
        )
    return value


def _names(names: list[str]) -> str:
    return (
        ("column " if len(names) == 1 else "columns ")
        + ", ".join(repr(n) for n in names)
        + (" is" if len(names) == 1 else " are")
    )


def _shown(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
