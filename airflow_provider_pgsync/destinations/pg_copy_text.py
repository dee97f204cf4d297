"""Rows of PostgreSQL text as the text format of ``COPY ... FROM STDIN``, and the COPY itself.

The text format rather than CSV: the server parses it faster. Measured on this project's
2-core machine, 908,246 rows of five columns (bigint, int, text, float8, timestamptz) copied
into an empty table six times each, alternating: best 0.75 s against 0.92 s for CSV with
every value quoted, median 1.14 s against 1.37 s.

Written with pyarrow kernels, which release the GIL, so the text of one COPY is written in a
worker thread while the server runs the statement before it. No library writes this format
from Arrow (pyarrow's CSV writer neither escapes with backslashes nor writes ``\\N``), hence
the few lines here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

CopyText = Sequence[memoryview]
"""The text of one COPY, in parts written one after the other."""

_PIECE_ROWS = 65536
"""Rows per part of the text (each part is built as one Arrow array, then written in turn)."""

# a backslash first: the escapes written after it are not escaped again
_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))


def copy_text(rows: pa.Table) -> CopyText:
    """``rows`` as COPY's text format: values separated by a tab, each row ending with a
    newline, NULL as ``\\N``, and a backslash, tab, newline or carriage return in a value
    escaped with a backslash (so a value ``\\N`` stays that value). Columns that are not
    strings are written as pyarrow casts them to strings (integers, booleans)."""
    parts = []
    for batch in rows.to_batches(max_chunksize=_PIECE_ROWS):
        if not batch.num_rows:
            continue
        # large strings (64-bit offsets): a part of long values may pass 2 GiB
        values = [
            _escaped(column.cast(pa.large_string())).fill_null(_text("\\N")) for column in batch.columns
        ]
        values[-1] = pc.binary_join_element_wise(values[-1], _text("\n"), _text(""))
        parts.append(_data(pc.binary_join_element_wise(*values, _text("\t"))))
    return parts


def copy_rows(
    conn: psycopg.Connection[Any], target: sql.Composable, names: list[str], rows: pa.Table
) -> None:
    """``rows`` (PostgreSQL text) into the ``names`` columns of ``target`` with COPY; the
    server parses the values."""
    copy_prepared(conn, target, names, copy_text(rows))


def copy_prepared(
    conn: psycopg.Connection[Any], target: sql.Composable, names: list[str], text: CopyText
) -> None:
    """The rows of ``text`` (``copy_text``) into the ``names`` columns of ``target`` with COPY."""
    with conn.cursor().copy(
        sql.SQL("COPY {} ({}) FROM STDIN").format(target, sql.SQL(", ").join(map(sql.Identifier, names)))
    ) as copy:
        for part in text:
            copy.write(part)


def _text(value: str) -> pa.Scalar:
    """A large string scalar (the kernels take no plain string beside large strings)."""
    return pa.scalar(value, pa.large_string())


def _escaped(values: pa.Array) -> pa.Array:
    """``values`` with the characters COPY's text format escapes escaped; the values
    themselves when none holds one (looked for in their bytes at once, not value by value)."""
    raw = bytes(_data(values))
    if not any(raw.find(char.encode()) >= 0 for char, _ in _ESCAPES):
        return values
    for char, escape in _ESCAPES:
        values = pc.replace_substring(values, char, escape)
    return values


def _data(values: pa.Array) -> memoryview:
    """The bytes of a large string array's values, one after the other (for the joined
    columns of rows: the lines of the COPY)."""
    offsets, data = values.buffers()[1:3]
    if offsets is None or data is None:  # no values, or only empty strings
        return memoryview(b"")
    bounds = np.frombuffer(offsets, dtype=np.int64, count=len(values) + 1, offset=values.offset * 8)
    return memoryview(data)[int(bounds[0]) : int(bounds[-1])]
