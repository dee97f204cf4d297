"""The canonical text of a row and its digests, the same whatever engine read the row.

A row's text is its values' texts joined by ``,``, each ``<length>:<text>`` or ``N`` for NULL:
unambiguous, and parsed back by ``parse_row_text``. A PostgreSQL side builds it in SQL from
each value's text output (``hooks/reconcile_pg.py``); a lake side builds it in Python from the
Arrow value of the lake's type (``arrow_texts``), which the source's rows are converted to by
apply's own conversion first, so both sides of a lake comparison go through this module.

The key's text is the row text of the key columns (of every column for a table whose identity
is the whole row). Its MD5 in hex places the row in a bucket (a prefix of the digest); the
row's MD5 gives a 60-bit number that sums per bucket independently of order, so a bucket's
count and sum compare multisets as well as keyed rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

NULL_TEXT = "N"
HASH_HEX = 15
"""Hex digits of a row's MD5 that make its summed number (60 bits: a sum stays exact in
PostgreSQL's numeric and in Python's int)."""


def value_text(text: str | None) -> str:
    """One value in a row text."""
    return NULL_TEXT if text is None else f"{len(text)}:{text}"


def row_text(values: Sequence[str | None]) -> str:
    """The row text of ``values`` (texts, None for NULL)."""
    return ",".join(value_text(v) for v in values)


def parse_row_text(text: str) -> list[str | None]:
    """The values of a row text (its inverse); ValueError for malformed text."""
    values: list[str | None] = []
    pos = 0
    while pos < len(text):
        if text.startswith(NULL_TEXT, pos):
            values.append(None)
            pos += 1
        else:
            colon = text.index(":", pos)
            length = int(text[pos:colon])
            values.append(text[colon + 1 : colon + 1 + length])
            pos = colon + 1 + length
        if pos < len(text):
            if text[pos] != ",":
                raise ValueError(f"malformed row text at {pos}: {text[:80]!r}")
            pos += 1
    return values


def md5_hex(text: str) -> str:
    """The MD5 of ``text`` (UTF-8) in hex, as PostgreSQL's ``md5(text)`` gives it."""
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def hash_number(row_md5: str) -> int:
    """The number a row's MD5 adds to its bucket's sum."""
    return int(row_md5[:HASH_HEX], 16)


# ---- Arrow values (the lake's types) -------------------------------------------------------


def arrow_texts(values: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """A canonical text per value of ``values`` (any Arrow type a lake column has), None for
    NULL: the same for the same value whichever reader built the array (Spark's Arrow batches,
    or apply's conversion of PostgreSQL text). Instants are UTC microseconds, so a reader's
    time zone does not matter; a float ``-0`` is ``0`` (the baseline reads it so in arrays)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    kind = values.type
    if pa.types.is_timestamp(kind):
        micros = pc.cast(pc.cast(values, pa.timestamp("us", tz=kind.tz)), pa.int64()).to_pylist()
        return [None if m is None else str(m) for m in micros]
    if pa.types.is_date(kind):
        return [None if d is None else d.isoformat() for d in values.to_pylist()]
    return [None if v is None else _scalar_text(v) for v in values.to_pylist()]


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, str):
        return value
    if isinstance(value, int | decimal.Decimal):
        return str(value)
    return json.dumps(value, default=_json_default, ensure_ascii=False, separators=(",", ":"))


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return repr(0.0 if value == 0 else value)


def _json_default(value: object) -> object:
    """JSON for the values nested types hold (lists, structs as dicts, maps as pair lists)."""
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"no canonical text for {type(value).__name__}")
