"""Bucket bisection of two sides of a table down to the rows that differ; pure logic.

A row's bucket at level ``length`` is the first ``length`` hex digits of its key's MD5, so
both sides split the rows identically whatever engine reads them. Each side gives, per
bucket, the row count and the sum of its rows' hash numbers (``canonical``): equal buckets
hold the same rows (as a multiset) but for a hash collision. Buckets that differ are split
finer at the next level, and at the last level their rows are fetched from both sides and
classified: missing (in the source only), extra (in the destination only), different (same
key, other values). A table whose identity is the whole row compares multisets: a row text
is its key, and each surplus copy on one side is one missing or extra row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from airflow_provider_pgsync.reconcile.canonical import hash_number

FIRST_LEVEL = 3
"""Hex digits of the first level (4,096 buckets)."""
STEP = 2
"""Hex digits each finer level adds (256 times the buckets)."""
LEAF_ROWS = 2000
"""About the most rows per bucket whose rows are fetched rather than split further."""
MAX_LEVEL = 32


@dataclass(frozen=True)
class Aggregate:
    """One bucket of one side: its rows and the sum of their hash numbers."""

    count: int
    total: int


@dataclass(frozen=True)
class RowDigest:
    """One row of one side: its key text and the MD5 of its row text."""

    key: str
    row_md5: str


class Side(Protocol):
    """One side of a table (source, or a destination) with the keys to leave out already left out."""

    def aggregates(self, length: int, within: Sequence[str] | None) -> dict[str, Aggregate]:
        """Buckets of ``length`` hex digits (only those under the shorter prefixes ``within``)."""

    def rows(self, length: int, buckets: Sequence[str]) -> list[RowDigest]:
        """The rows in ``buckets`` (of ``length`` hex digits)."""


def levels(rows: int, *, first: int = FIRST_LEVEL, leaf_rows: int = LEAF_ROWS) -> list[int]:
    """The bucket lengths to compare at, coarse to fine, for a table of about ``rows`` rows:
    the last one leaves about ``leaf_rows`` rows or fewer per bucket."""
    found = [first]
    while rows / 16 ** found[-1] > leaf_rows and found[-1] + STEP <= MAX_LEVEL:
        found.append(found[-1] + STEP)
    return found


def differing(source: dict[str, Aggregate], destination: dict[str, Aggregate]) -> list[str]:
    """The buckets whose aggregates differ (present on one side only included), sorted."""
    return sorted(b for b in source.keys() | destination.keys() if source.get(b) != destination.get(b))


@dataclass(frozen=True)
class Differences:
    """The keys (key texts) that differ, and the bisection's effort."""

    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    different: tuple[str, ...] = ()
    source_rows: int = 0
    buckets_compared: int = 0
    rows_fetched: int = 0
    levels: tuple[int, ...] = field(default=())

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.different)


def compare(
    source: Side, destination: Side, bucket_levels: Sequence[int], *, keyed: bool
) -> Differences:
    """Bisect ``source`` against ``destination`` over ``bucket_levels`` and classify the rows
    of the finest buckets that still differ."""
    within: list[str] | None = None
    compared = 0
    source_rows = 0
    for position, length in enumerate(bucket_levels):
        ours = source.aggregates(length, within)
        theirs = destination.aggregates(length, within)
        if position == 0:
            source_rows = sum(a.count for a in ours.values())
        compared += len(ours.keys() | theirs.keys())
        within = differing(ours, theirs)
        if not within:
            return Differences(
                source_rows=source_rows, buckets_compared=compared, levels=tuple(bucket_levels)
            )
    assert within is not None
    last = bucket_levels[-1]
    mine, other = source.rows(last, within), destination.rows(last, within)
    missing, extra, different = classify(mine, other, keyed=keyed)
    return Differences(
        missing=missing,
        extra=extra,
        different=different,
        source_rows=source_rows,
        buckets_compared=compared,
        rows_fetched=len(mine) + len(other),
        levels=tuple(bucket_levels),
    )


def classify(
    source: Sequence[RowDigest], destination: Sequence[RowDigest], *, keyed: bool
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(missing, extra, different) key texts of two sides' rows; without a key (multiset) a key
    appears once per surplus copy and nothing is "different"."""
    if not keyed:
        ours = Counter(r.key for r in source)
        theirs = Counter(r.key for r in destination)
        missing = sorted((ours - theirs).elements())
        extra = sorted((theirs - ours).elements())
        return tuple(missing), tuple(extra), ()
    mine = {r.key: r.row_md5 for r in source}
    other = {r.key: r.row_md5 for r in destination}
    return (
        tuple(sorted(k for k in mine if k not in other)),
        tuple(sorted(k for k in other if k not in mine)),
        tuple(sorted(k for k in mine if k in other and mine[k] != other[k])),
    )


class MemorySide:
    """A side held as row digests (a lake's source read in Python, tests): buckets computed here."""

    def __init__(self, rows: Sequence[tuple[str, str, str]]) -> None:
        """``rows``: (key text, key MD5, row MD5) each."""
        self._rows = list(rows)

    def aggregates(self, length: int, within: Sequence[str] | None) -> dict[str, Aggregate]:
        prefixes = tuple(within) if within is not None else None
        counts: dict[str, list[int]] = {}
        for _, key_md5, row_md5 in self._rows:
            if prefixes is not None and not key_md5.startswith(prefixes):
                continue
            entry = counts.setdefault(key_md5[:length], [0, 0])
            entry[0] += 1
            entry[1] += hash_number(row_md5)
        return {b: Aggregate(c, t) for b, (c, t) in counts.items()}

    def rows(self, length: int, buckets: Sequence[str]) -> list[RowDigest]:
        wanted = set(buckets)
        return [RowDigest(k, r) for k, km, r in self._rows if km[:length] in wanted]
