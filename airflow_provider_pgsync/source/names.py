"""Names of source objects: qualified table names, slot and publication names.

Table names are kept as (schema, name) pairs of exact identifiers and only ever reach
SQL through ``psycopg.sql.Identifier``. Slot and publication names are restricted to
what PostgreSQL itself allows for slots (lower-case letters, digits, underscore), so
they can travel safely inside the pgoutput ``publication_names`` option too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from psycopg import sql

from airflow_provider_pgsync.errors import ConfigError

_SIMPLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_UNQUOTED_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def validate_slot_name(name: str) -> str:
    """Return ``name`` if PostgreSQL accepts it as a replication slot name."""
    if not isinstance(name, str) or not _SIMPLE_NAME.fullmatch(name):
        raise ConfigError(
            f"replication slot name {shown(name)} is not allowed: use 1-63 characters of lower-case "
            "letters, digits and underscores, starting with a letter or underscore (e.g. 'pgsync_orders')"
        )
    return name


def validate_publication_name(name: str) -> str:
    """Return ``name`` if it is a simple lower-case identifier (see the module docstring)."""
    if not isinstance(name, str) or not _SIMPLE_NAME.fullmatch(name):
        raise ConfigError(
            f"publication name {shown(name)} is not allowed: use 1-63 characters of lower-case "
            "letters, digits and underscores, starting with a letter or underscore (e.g. 'pgsync_pub')"
        )
    return name


MAX_IDENTIFIER_BYTES = 63
"""PostgreSQL's identifier limit (NAMEDATALEN - 1): a longer name is refused, never cut."""
_SHOWN_CHARS = 80


def shown(value: object) -> str:
    """``repr(value)`` for an error message, cut in the middle when long (a 100 kB value
    must not become a 100 kB message); the repr escapes NUL, control and bidi characters."""
    text = repr(value)
    if len(text) <= _SHOWN_CHARS:
        return text
    half = _SHOWN_CHARS // 2
    return f"{text[:half]}...({len(text) - 2 * half} more characters)...{text[-half:]}"


def check_identifier(value: object, what: str) -> str:
    """``value`` if PostgreSQL takes it as an identifier exactly (quoted): a non-empty string
    of at most 63 bytes of UTF-8 without NUL. ``what`` names it in the error."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{what} {shown(value)} must be a non-empty string")
    if "\x00" in value:
        raise ConfigError(f"{what} {shown(value)} contains a NUL character, which PostgreSQL cannot store")
    try:
        size = len(value.encode())
    except UnicodeEncodeError as exc:
        raise ConfigError(f"{what} {shown(value)} is not valid Unicode text") from exc
    if size > MAX_IDENTIFIER_BYTES:
        raise ConfigError(
            f"{what} {shown(value)} is {size} bytes, longer than PostgreSQL's 63-byte identifier limit "
            "(PostgreSQL would cut it, and two long names could become one): rename it"
        )
    return value


@dataclass(frozen=True, order=True)
class TableRef:
    """A table of the source: exact schema and table names (case and quotes preserved)."""

    schema: str
    name: str

    def __post_init__(self) -> None:
        for part, value in (("schema", self.schema), ("table", self.name)):
            check_identifier(value, f"{part} name")

    @classmethod
    def parse(cls, text: str, *, default_schema: str = "public") -> TableRef:
        """Parse ``schema.table`` the way PostgreSQL does: unquoted parts fold to lower case,
        ``"Quoted"`` parts are exact (``""`` inside quotes is one quote)."""
        parts = _split_qualified(text)
        if len(parts) == 1:
            return cls(default_schema, parts[0])
        if len(parts) == 2:
            return cls(parts[0], parts[1])
        raise ConfigError(f"table name {shown(text)} has {len(parts)} dotted parts; expected 'schema.table'")

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    def __str__(self) -> str:
        """The qualified name as PostgreSQL would print it (quoted where needed)."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.name)}"


# Reserved key words of PostgreSQL that are also common names: quoted when shown.
_RESERVED_WORDS = (
    "all analyse analyze and any array as asc asymmetric both case cast check collate column "
    "constraint create current_catalog current_date current_role current_time current_timestamp "
    "current_user default deferrable desc distinct do else end except false fetch for foreign from "
    "grant group having in initially intersect into lateral leading limit localtime localtimestamp "
    "not null offset on only or order placing primary references returning select session_user some "
    "symmetric system_user table then to trailing true union unique user using variadic when where "
    "window with"
)
_RESERVED = frozenset(_RESERVED_WORDS.split())


def quote_ident(part: str) -> str:
    """Quote an identifier for display in SQL the user may copy (like PostgreSQL's quote_ident)."""
    if re.fullmatch(r"[a-z_][a-z0-9_]*", part) and part not in _RESERVED:
        return part
    return '"' + part.replace('"', '""') + '"'


def _split_qualified(text: str) -> list[str]:
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"table name {shown(text)} is empty; expected 'schema.table'")
    parts: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == '"':
            end = i + 1
            chunk: list[str] = []
            while True:
                close = text.find('"', end)
                if close < 0:
                    raise ConfigError(f"table name {shown(text)} has an unterminated quoted identifier")
                chunk.append(text[end:close])
                if close + 1 < n and text[close + 1] == '"':
                    chunk.append('"')
                    end = close + 2
                    continue
                i = close + 1
                break
            parts.append("".join(chunk))
        else:
            match = _UNQUOTED_PART.match(text, i)
            if match is None:
                raise ConfigError(
                    f"table name {shown(text)} is not a valid identifier at position {i}; "
                    'quote unusual names like "My Table"'
                )
            parts.append(match.group(0).lower())
            i = match.end()
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            return parts
        if text[i] != ".":
            raise ConfigError(f"table name {shown(text)} has unexpected {text[i]!r} at position {i}")
        i += 1
