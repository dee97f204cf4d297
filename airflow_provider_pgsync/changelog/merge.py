"""Merging sorted segments into one stream in (commit LSN, seq) order, each change once.

Segments may overlap: a capture re-run after a crash can leave ``A..B`` and ``A..C``
holding the same transactions, and several parts of one batch can share a commit LSN.
The merge keeps one buffered batch per *open* segment and repeatedly emits every
buffered change up to the smallest "last buffered key" of the open segments: nothing
that any segment yields later can sort before it. A segment is opened only once the
merge reaches its first commit LSN, so memory grows with the number of segments that
overlap at one point, never with the total size of the changelog.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from airflow_provider_pgsync.changelog.schema import COMMIT_LSN, SEQ
from airflow_provider_pgsync.errors import ChangelogError

Key = tuple[int, int]
"""The position of one change: (commit LSN, seq)."""


@dataclass(frozen=True)
class Source:
    """One sorted segment, opened lazily: ``open()`` returns its schema version and batches."""

    name: str
    first_lsn: int
    open: Callable[[], tuple[int, Iterator[pa.RecordBatch]]]


def count_through(lsn: np.ndarray, seq: np.ndarray, key: Key) -> int:
    """How many leading rows of sorted (lsn, seq) arrays are <= ``key``."""
    lo = int(np.searchsorted(lsn, np.uint64(key[0]), side="left"))
    hi = int(np.searchsorted(lsn, np.uint64(key[0]), side="right"))
    return lo + int(np.searchsorted(seq[lo:hi], key[1], side="right"))


def _keys(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    lsn = batch.column(COMMIT_LSN).to_numpy(zero_copy_only=False)
    seq = batch.column(SEQ).to_numpy(zero_copy_only=False)
    return lsn, seq


class _Cursor:
    """Streams the batches of one segment, after a key, holding the current one."""

    def __init__(self, name: str, version: int, batches: Iterator[pa.RecordBatch], after: Key | None) -> None:
        self.name = name
        self.version = version
        self._batches = batches
        self._after = after
        self._prev: Key | None = None
        self.batch: pa.RecordBatch | None = None
        self.lsn = np.empty(0, np.uint64)
        self.seq = np.empty(0, np.int64)
        self._advance()

    @property
    def done(self) -> bool:
        return self.batch is None

    def last_key(self) -> Key:
        return int(self.lsn[-1]), int(self.seq[-1])

    def take_through(self, bound: Key) -> pa.RecordBatch | None:
        """Remove and return the buffered rows <= ``bound`` (None when there are none)."""
        assert self.batch is not None
        n = count_through(self.lsn, self.seq, bound)
        if n == 0:
            return None
        if n == len(self.lsn):
            head = self.batch
            self._advance()
            return head
        head = self.batch.slice(0, n)
        self.batch = self.batch.slice(n)
        self.lsn, self.seq = self.lsn[n:], self.seq[n:]
        return head

    def close(self) -> None:
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()

    def _advance(self) -> None:
        self.batch = None
        for batch in self._batches:
            if batch.num_rows == 0:
                continue
            lsn, seq = _keys(batch)
            self._check_sorted(lsn, seq)
            self._prev = (int(lsn[-1]), int(seq[-1]))
            skip = 0 if self._after is None else count_through(lsn, seq, self._after)
            if skip < len(lsn):
                self.batch = batch.slice(skip) if skip else batch
                self.lsn, self.seq = lsn[skip:], seq[skip:]
                return
        self.close()

    def _check_sorted(self, lsn: np.ndarray, seq: np.ndarray) -> None:
        ok = (lsn[1:] > lsn[:-1]) | ((lsn[1:] == lsn[:-1]) & (seq[1:] > seq[:-1]))
        first = (int(lsn[0]), int(seq[0]))
        if not ok.all() or (self._prev is not None and first <= self._prev):
            raise ChangelogError(
                f"segment {self.name} is not sorted by (_commit_lsn, _seq); it was not written by "
                "pgsync or is damaged: delete it and run capture again from a slot that still has its WAL"
            )


class _Rebatcher:
    """Joins ordered pieces of one schema version into batches of ``batch_rows`` rows, or
    fewer when that many would hold more than about ``batch_bytes`` bytes."""

    def __init__(self, batch_rows: int, batch_bytes: int | None = None) -> None:
        self.batch_rows = batch_rows
        self.batch_bytes = batch_bytes
        self.version: int | None = None
        self.parts: list[pa.Table] = []
        self.rows = 0
        self.bytes = 0

    def add(self, version: int, table: pa.Table) -> Iterator[tuple[int, pa.RecordBatch]]:
        if self.version is not None and version != self.version:
            yield from self.flush()
        self.version = version
        self.parts.append(table)
        self.rows += table.num_rows
        self.bytes += table.nbytes
        while (cut := self._cut()) is not None:
            whole = pa.concat_tables(self.parts)
            rest = whole.slice(cut)
            yield version, _one_batch(whole.slice(0, cut))
            self.parts = [rest] if rest.num_rows else []
            self.rows, self.bytes = rest.num_rows, rest.nbytes

    def _cut(self) -> int | None:
        """How many of the held rows make the next batch; None: not enough yet."""
        if self.batch_bytes is not None and self.bytes >= self.batch_bytes:
            return min(self.batch_rows, -(-self.rows * self.batch_bytes // self.bytes))
        return self.batch_rows if self.rows >= self.batch_rows else None

    def flush(self) -> Iterator[tuple[int, pa.RecordBatch]]:
        if self.rows and self.version is not None:
            yield self.version, _one_batch(pa.concat_tables(self.parts))
        self.parts, self.rows, self.bytes = [], 0, 0


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    """The rows of a non-empty table as one contiguous batch."""
    (batch,) = table.combine_chunks().to_batches()
    return batch


def _order(pieces: list[tuple[int, pa.RecordBatch]]) -> tuple[list[tuple[int, pa.Table]], Key, Key]:
    """Sort the pieces of one merge step by key, drop repeated keys, split by schema version."""
    if len(pieces) == 1:
        version, batch = pieces[0]
        lsn, seq = _keys(batch)
        return (
            [(version, pa.Table.from_batches([batch]))],
            (int(lsn[0]), int(seq[0])),
            (int(lsn[-1]), int(seq[-1])),
        )
    keys = [_keys(b) for _, b in pieces]
    lsn = np.concatenate([k[0] for k in keys])
    seq = np.concatenate([k[1] for k in keys])
    sizes = [b.num_rows for _, b in pieces]
    piece = np.repeat(np.arange(len(pieces)), sizes)
    row = np.concatenate([np.arange(n) for n in sizes])
    order = np.lexsort((seq, lsn))  # stable: among equal keys the earlier-opened segment wins
    lsn_o, seq_o = lsn[order], seq[order]
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = (lsn_o[1:] != lsn_o[:-1]) | (seq_o[1:] != seq_o[:-1])
    order = order[keep]
    piece_version = np.array([v for v, _ in pieces])
    versions = piece_version[piece[order]]
    # per version: the pieces' rows as one table, and each piece's offset in it
    tables: dict[int, pa.Table] = {}
    offsets = np.zeros(len(pieces), dtype=np.int64)
    for version in dict.fromkeys(v for v, _ in pieces):
        members = [i for i, (v, _) in enumerate(pieces) if v == version]
        start = 0
        for i in members:
            offsets[i] = start
            start += sizes[i]
        try:
            tables[version] = pa.Table.from_batches([pieces[i][1] for i in members])
        except pa.ArrowInvalid:
            raise ChangelogError(
                f"segments of schema version {version} of one table have different columns; the changelog "
                "was written inconsistently: rebaseline the table"
            ) from None
    cuts = np.flatnonzero(versions[1:] != versions[:-1]) + 1
    runs: list[tuple[int, pa.Table]] = []
    for run in np.split(order, cuts):
        version = int(piece_version[piece[run[0]]])
        runs.append((version, tables[version].take(pa.array(offsets[piece[run]] + row[run]))))
    first = (int(lsn[order[0]]), int(seq[order[0]]))
    last = (int(lsn[order[-1]]), int(seq[order[-1]]))
    return runs, first, last


def merge_changes(
    sources: Sequence[Source],
    *,
    after: Key | None = None,
    batch_rows: int = 65536,
    batch_bytes: int | None = None,
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Yield (schema version, batch) with every change of ``sources`` once, in key order, after
    ``after``; batches of ``batch_rows`` rows, or fewer to stay within about ``batch_bytes``."""
    pending = deque(sorted(sources, key=lambda s: s.first_lsn))
    active: list[_Cursor] = []
    out = _Rebatcher(batch_rows, batch_bytes)
    emitted: Key | None = after
    try:
        while True:
            while pending and (not active or pending[0].first_lsn <= min(c.last_key() for c in active)[0]):
                source = pending.popleft()
                version, batches = source.open()
                cursor = _Cursor(source.name, version, batches, after)
                if not cursor.done:
                    active.append(cursor)
            if not active:
                break
            bound = min(c.last_key() for c in active)
            pieces = []
            for cursor in active:
                head = cursor.take_through(bound)
                if head is not None:
                    pieces.append((cursor.version, head))
            active = [c for c in active if not c.done]
            runs, first, last = _order(pieces)
            if emitted is not None and first <= emitted:
                raise ChangelogError(
                    f"changelog segments disagree with their recorded LSN ranges near commit LSN {first[0]}: "
                    "the segment list in state does not match the files; re-read the segment metadata"
                )
            emitted = last
            for version, table in runs:
                yield from out.add(version, table)
        yield from out.flush()
    finally:
        for cursor in active:
            cursor.close()
