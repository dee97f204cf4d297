"""Dates and timestamps beyond the years 1 to 9999 in PostgreSQL's text output (``0044-03-15 BC``,
``12000-06-01 00:00:00+00``) as days or microseconds since 1970, the way the baseline keeps them.

Pure logic for the lake destination. pyarrow's casts and Python's ``datetime`` only read the
years 1 to 9999; PostgreSQL and Spark share the proleptic Gregorian calendar beyond them (1 BC
is the year 0), so such a value is moved by whole 400-year cycles (146097 days each, the same
calendar again) into that range, read there, and moved back. Such values are rare: they are
parsed one by one.
"""

from __future__ import annotations

import re
from datetime import date

import pyarrow as pa
import pyarrow.compute as pc

_CYCLE_YEARS = 400
_CYCLE_DAYS = 146_097
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY_MICROS = 86_400_000_000
_TEXT = re.compile(
    r"(?P<year>\d{4,})-(?P<month>\d\d)-(?P<day>\d\d)"
    r"(?: (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<frac>\d{1,6}))?)?"
    r"(?:(?P<sign>[+-])(?P<oh>\d\d)(?::(?P<om>\d\d))?(?::(?P<os>\d\d))?)?"
    r"(?P<bc> BC)?"
)
PLACEHOLDER_DATE = "1970-01-01"
"""What the far values are replaced with before the vectorised conversion of the others."""


def far_years(text: pa.Array) -> pa.Array:
    """Where ``text`` holds a date or timestamp before the year 1 or after 9999 (nulls: false)."""
    far = pc.or_(pc.ends_with(text, " BC"), pc.match_substring_regex(text, r"^\d{5}"))
    return pc.fill_null(far, False)


def epoch_days(text: str) -> int:
    """Days since 1970-01-01 of a date's text; ValueError when it is not one."""
    parts = _parts(text)
    if parts["h"] is not None or parts["sign"] is not None:
        raise ValueError(f"not a date: {text!r}")
    return _days(parts)


def epoch_micros(text: str, *, with_offset: bool) -> int:
    """Microseconds since 1970-01-01 00:00 (UTC when ``with_offset``) of a timestamp's text."""
    parts = _parts(text)
    if parts["h"] is None or (parts["sign"] is not None) != with_offset:
        raise ValueError(f"not a timestamp {'with' if with_offset else 'without'} time zone: {text!r}")
    seconds = _int(parts, "h") * 3600 + _int(parts, "m") * 60 + _int(parts, "s")
    micros = _days(parts) * _DAY_MICROS + seconds * 1_000_000 + int((parts["frac"] or "0").ljust(6, "0"))
    if with_offset:
        east = _int(parts, "oh") * 3600 + _int(parts, "om") * 60 + _int(parts, "os")
        micros -= (east if parts["sign"] == "+" else -east) * 1_000_000
    return micros


def _parts(text: str) -> dict[str, str | None]:
    match = _TEXT.fullmatch(text)
    if match is None:
        raise ValueError(f"not a PostgreSQL date or timestamp: {text!r}")
    return match.groupdict()


def _int(parts: dict[str, str | None], name: str) -> int:
    return int(parts[name] or 0)


def _days(parts: dict[str, str | None]) -> int:
    year = _int(parts, "year")
    if parts["bc"]:
        year = 1 - year  # 1 BC is the year 0
    cycles = (year - 1) // _CYCLE_YEARS  # year - 400 * cycles lies in 1..400
    moved = date(year - _CYCLE_YEARS * cycles, _int(parts, "month"), _int(parts, "day"))
    return moved.toordinal() - _EPOCH_ORDINAL + cycles * _CYCLE_DAYS
