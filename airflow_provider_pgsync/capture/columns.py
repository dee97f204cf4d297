"""pgoutput payloads to column batches, vectorised with NumPy.

Why not the per-message decoder: capture has to keep pace with the server's own
decoding, and a Python loop costs a few microseconds a change, several times what
PostgreSQL spends. Here the payloads of one fetch are joined into one buffer and the
fields of Begin, Commit, Insert, Update and Delete are read for all messages at once
with NumPy gathers; the rare messages (Relation, Truncate, Type, Origin, logical
messages) go through the reference decoder of ``pgoutput/``. Whenever the vectorised
reading meets something it does not expect, the reference decoder reads the payloads
again one by one and raises its DecodeError naming the tag and the byte offset.

Columns are kept in PostgreSQL's text output format (what pgoutput sends), so every
type round-trips unchanged; the type OIDs travel with the Relation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from airflow_provider_pgsync.capture.tuple_fields import Fallback, be_ints, read_changes
from airflow_provider_pgsync.changelog.schema import segment_schema
from airflow_provider_pgsync.changelog.xids import widen_xids
from airflow_provider_pgsync.errors import DecodeError
from airflow_provider_pgsync.pgoutput import (
    Delete,
    Insert,
    LogicalMessage,
    Origin,
    Relation,
    Truncate,
    Type,
    Update,
    decode_message,
)
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

_B, _C, _I, _U, _D = ord("B"), ord("C"), ord("I"), ord("U"), ord("D")
_R, _T, _Y, _O, _M = ord("R"), ord("T"), ord("Y"), ord("O"), ord("M")
_RARE = (_R, _T, _Y, _O, _M)
_PG_EPOCH_UNIX_US = 946_684_800_000_000
_OPS = np.frombuffer(b"IUDT", dtype=np.uint8)  # op codes 0..3 -> letters
IGNORED = -1
"""The schema version ``version_of`` gives a relation the pipeline does not follow: its changes
are counted in ``ColumnBatcher.skipped`` and left out."""


@dataclass(frozen=True)
class TableVersion:
    """A table as one Relation message describes it, the schema version capture gave it,
    and the Arrow schema of its segments."""

    relation: Relation
    version: int
    schema: pa.Schema

    @classmethod
    def of(cls, relation: Relation, version: int) -> TableVersion:
        """Raises ConfigError when a column name collides with a changelog column (not for a
        relation the pipeline does not follow: ``IGNORED``, no segment schema)."""
        table = TableRef(relation.namespace, relation.relation_name)
        if version == IGNORED:
            return cls(relation, version, pa.schema([]))
        return cls(relation, version, segment_schema(columns_of(relation), table=table))

    @property
    def table(self) -> TableRef:
        return TableRef(self.relation.namespace, self.relation.relation_name)

    @property
    def key(self) -> tuple[int, int]:
        return (self.relation.relation_id, self.version)


@dataclass
class _OpenTransaction:
    xid: int
    commit_lsn: int
    commit_ts: int
    next_seq: int


class ColumnBatcher:
    """Turns successive fetches of a peek into per-table column batches.

    ``version_of`` is asked for the schema version of each Relation message (capture
    starts a new version when the columns changed; ``IGNORED`` for a relation whose changes
    are left out, counted by name in ``skipped``); ``on_message`` gets each logical message
    (the source's DDL trigger writes them) and the xid of its transaction (widened as below),
    in stream order with the Relations; when it returns a ``TableVersion``, that version of its
    relation starts at the message, with a marker row there (op ``T``, every column null) that
    says rows of the table changed outside the stream (the version's change says how; apply
    never hands the marker to a destination: ``apply/run.py``). Transactions
    whose commit LSN is below ``skip_before`` are durable already (a re-run after a crash)
    and are dropped.

    ``xid_reference`` is a 64-bit xid read together with the peek's ``upto`` LSN
    (``pg_snapshot_xmax(pg_current_snapshot())``): every transaction committed by then is
    less than 2^31 from it (wraparound protection, and the slot's catalog_xmin, hold the
    horizon back), so each transaction's 32-bit xid is widened to the 64-bit value nearest
    to it (one NumPy pass per fetch, over its Begin messages). Without a reference the xids
    stay as pgoutput sends them.
    """

    def __init__(
        self,
        version_of: Callable[[Relation], int],
        *,
        skip_before: int = 0,
        xid_reference: int | None = None,
        on_message: Callable[[LogicalMessage, int], TableVersion | None] | None = None,
    ) -> None:
        self.version_of = version_of
        self.on_message = on_message
        self.skip_before = skip_before
        self.xid_reference = xid_reference
        self.relations: dict[int, TableVersion] = {}
        self.open: _OpenTransaction | None = None
        self.payloads = 0
        self.changes = 0
        self.transactions = 0
        self.last_end_lsn: int | None = None
        self.skipped: dict[str, int] = {}

    def feed(self, payloads: Sequence[bytes]) -> list[tuple[TableVersion, pa.Table]]:
        """Column batches of the changes in ``payloads``, one per table version, in order."""
        return self.feed_joined(*join_payloads(payloads))

    def feed_joined(self, data: bytes, lens: np.ndarray) -> list[tuple[TableVersion, pa.Table]]:
        """Like ``feed``, for payloads already joined into ``data`` with their lengths."""
        if len(lens) == 0:
            return []
        ends = np.cumsum(lens)
        starts = ends - lens
        try:
            out = self._feed(data, starts, ends)
        except Fallback as why:
            self._raise_precise(data, starts, ends, str(why))
            raise AssertionError("unreachable") from None  # pragma: no cover
        self.payloads += len(lens)
        return out

    # ---- the vectorised path ---------------------------------------------------------

    def _feed(self, data: bytes, starts: np.ndarray, ends: np.ndarray) -> list[tuple[TableVersion, pa.Table]]:
        n = len(starts)
        lens = ends - starts
        if lens.min() < 1:
            raise Fallback("empty payload")
        buf = np.frombuffer(data, dtype=np.uint8)
        tags = buf[starts]

        is_b, is_c = tags == _B, tags == _C
        is_change = (tags == _I) | (tags == _U) | (tags == _D)
        rare = np.flatnonzero(np.isin(tags, _RARE))
        if int(is_b.sum() + is_c.sum() + is_change.sum()) + len(rare) != n:
            raise Fallback("a message that capture does not expect (streaming is not requested)")

        # transaction structure: depth after each message is 0 or 1, changes inside
        carried = 1 if self.open is not None else 0
        depth = carried + np.cumsum(is_b.astype(np.int64) - is_c.astype(np.int64))
        if ((depth < 0) | (depth > 1)).any() or (depth[is_b] != 1).any():
            raise Fallback("Begin and Commit do not alternate")
        if (depth[is_change] != 1).any():
            raise Fallback("a change outside a transaction")
        if (lens[is_change] < 8).any():
            raise Fallback("a change message too short for its header")

        # transaction of each message: 0 = the one carried over, k = k-th Begin here
        tix = np.cumsum(is_b)
        begins = np.flatnonzero(is_b)
        if ((lens[begins] != 21).any()) or (lens[is_c] != 26).any():
            raise Fallback("Begin or Commit of unexpected length")
        b_pos = starts[begins]
        carry = self.open or _OpenTransaction(0, 0, 0, 0)
        begun = be_ints(buf, b_pos + 17, ">u4")
        if self.xid_reference is not None:
            begun = widen_xids(begun, self.xid_reference)
        xids = _prepend(carry.xid, begun)
        commit_lsns = _prepend(carry.commit_lsn, be_ints(buf, b_pos + 1, ">u8"))
        commit_ts = _prepend(carry.commit_ts, be_ints(buf, b_pos + 9, ">i8"))
        # a message of a transaction that is durable already (a re-run) was taken into account then
        done = commit_lsns[tix[rare]] < self.skip_before if self.skip_before else np.zeros(len(rare), bool)
        relation_at, truncates = self._rare_messages(data, starts, ends, rare, depth, done, xids[tix[rare]])

        # position of each change inside its transaction, counting truncated tables too
        weights = is_change.astype(np.int64)
        for index, truncate in truncates:
            weights[index] = len(truncate.relation_ids)
        cum = np.cumsum(weights)
        base = np.concatenate([[-(self.open.next_seq if self.open else 0)], cum[begins]])
        seq_end = cum - base[tix]  # seq after the message (exclusive)

        out = self._tables(buf, starts, ends, tags, is_change, relation_at, truncates, tix, seq_end)
        skip = self.skip_before
        batches = [(tv, _finish(tv, rows, xids, commit_lsns, commit_ts, skip)) for tv, rows in out]

        # carry the open transaction, remember the last commit
        commits = starts[is_c]
        if len(commits):
            self.last_end_lsn = int(be_ints(buf, commits[-1:] + 10, ">u8")[0])
            self.transactions += len(commits)
        if depth[-1] == 1:
            k = int(tix[-1])
            self.open = _OpenTransaction(
                int(xids[k]), int(commit_lsns[k]), int(commit_ts[k]), int(seq_end[-1])
            )
        else:
            self.open = None
        self.changes += int(weights.sum())
        return [(tv, t) for tv, t in batches if t.num_rows]

    def _rare_messages(
        self,
        data: bytes,
        starts: np.ndarray,
        ends: np.ndarray,
        rare: np.ndarray,
        depth: np.ndarray,
        done: np.ndarray,
        in_xids: np.ndarray,
    ) -> tuple[dict[int, list[tuple[int, TableVersion]]], list[tuple[int, Truncate]]]:
        """Relations (by relation id: where each takes effect) and truncates, read one by one;
        logical messages go to ``on_message`` with their transaction's xid, in stream order
        (unless ``done``), and a version it starts is a Relation and a truncate (the marker) at once."""
        relation_at: dict[int, list[tuple[int, TableVersion]]] = {}
        truncates: list[tuple[int, Truncate]] = []
        for index, was_done, xid in zip(rare.tolist(), done.tolist(), in_xids.tolist(), strict=True):
            message = decode_message(data[starts[index] : ends[index]], in_stream=False)
            if isinstance(message, Relation):
                tv = TableVersion.of(message, self.version_of(message))
                relation_at.setdefault(message.relation_id, []).append((index, tv))
            elif isinstance(message, Truncate):
                if depth[index] != 1:
                    raise Fallback("a Truncate outside a transaction")
                truncates.append((index, message))
            elif isinstance(message, LogicalMessage):
                if self.on_message is not None and not was_done:
                    marker = self.on_message(message, int(xid))
                    if marker is not None:
                        if depth[index] != 1:
                            raise Fallback("a marker outside a transaction")
                        relid = marker.relation.relation_id
                        relation_at.setdefault(relid, []).append((index, marker))
                        truncates.append((index, Truncate(None, 0, (relid,))))
            elif not isinstance(message, Type | Origin):  # pragma: no cover
                raise Fallback(f"unexpected {type(message).__name__}")
        return relation_at, truncates

    def _tables(
        self,
        buf: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        tags: np.ndarray,
        is_change: np.ndarray,
        relation_at: dict[int, list[tuple[int, TableVersion]]],
        truncates: list[tuple[int, Truncate]],
        tix: np.ndarray,
        seq_end: np.ndarray,
    ) -> list[tuple[TableVersion, _Rows]]:
        """Group the changes by table version (in message order) and read their tuples."""
        changes = np.flatnonzero(is_change)
        relids = be_ints(buf, starts[changes] + 1, ">u4") if len(changes) else np.empty(0, np.uint32)
        rows: dict[tuple[int, int], tuple[TableVersion, list[np.ndarray], list[tuple[int, int]]]] = {}

        def group(tv: TableVersion) -> tuple[TableVersion, list[np.ndarray], list[tuple[int, int]]]:
            return rows.setdefault(tv.key, (tv, [], []))

        for relid in np.unique(relids).tolist():
            at = changes[relids == relid]
            for tv, part in self._split_by_version(int(relid), at, relation_at):
                if tv.version == IGNORED:
                    self._skip(tv, len(part))
                else:
                    group(tv)[1].append(part)
        for index, truncate in truncates:
            first = int(seq_end[index]) - len(truncate.relation_ids)
            for j, relid in enumerate(truncate.relation_ids):
                tv = self._version_at(relid, index, relation_at)
                if tv.version == IGNORED:
                    self._skip(tv, 1)
                else:
                    group(tv)[2].append((index, first + j))
        # the relations known at the end of the fetch carry over to the next one
        for relid, entries in relation_at.items():
            self.relations[relid] = entries[-1][1]

        out = []
        for tv, parts, trunc in rows.values():
            positions = np.concatenate(parts) if parts else np.empty(0, np.int64)
            ops, values = read_changes(
                tv.relation.columns, buf, starts[positions], ends[positions], tags[positions]
            )
            found = _Rows(ops, seq_end[positions] - 1, tix[positions], values)
            if trunc:
                found = _with_truncates(found, positions, trunc, tix)
            out.append((tv, found))
        return out

    def _skip(self, tv: TableVersion, changes: int) -> None:
        name = str(tv.table)
        self.skipped[name] = self.skipped.get(name, 0) + changes

    def _split_by_version(
        self, relid: int, at: np.ndarray, relation_at: dict[int, list[tuple[int, TableVersion]]]
    ) -> list[tuple[TableVersion, np.ndarray]]:
        entries = relation_at.get(relid, [])
        if not entries:
            return [(self._version_at(relid, int(at[0]), relation_at), at)]
        cuts = np.searchsorted(at, [index for index, _ in entries])
        bounds = [0, *cuts.tolist(), len(at)]
        versions: list[TableVersion | None] = [self.relations.get(relid)] + [tv for _, tv in entries]
        parts = []
        for k, tv in enumerate(versions):
            part = at[bounds[k] : bounds[k + 1]]
            if len(part) == 0:
                continue
            if tv is None:
                raise Fallback(f"a change of relation {relid} before its Relation message")
            parts.append((tv, part))
        return parts

    def _version_at(
        self, relid: int, index: int, relation_at: dict[int, list[tuple[int, TableVersion]]]
    ) -> TableVersion:
        current = self.relations.get(relid)
        for at, tv in relation_at.get(relid, []):
            if at <= index:  # (the same index: a marker, ``_rare_messages``)
                current = tv
        if current is None:
            raise Fallback(f"a change of relation {relid} before its Relation message")
        return current

    # ---- precise errors ------------------------------------------------------------------

    def _raise_precise(self, data: bytes, starts: np.ndarray, ends: np.ndarray, why: str) -> None:
        """Decode one by one so a malformed payload raises DecodeError at its offset."""
        for index, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            try:
                _check_text(decode_message(data[start:end], in_stream=False))
            except DecodeError as exc:
                where = f"{exc.reason} (payload {self.payloads + index} of the peek)"
                raise DecodeError(where, tag=exc.tag, offset=exc.offset) from None
        raise DecodeError(f"unexpected message sequence: {why}", tag=None, offset=0)


def _check_text(message: object) -> None:
    """Raise DecodeError (with the message's tag) when a text value of a change is not UTF-8."""
    if not isinstance(message, Insert | Update | Delete):
        return
    tag = type(message).__name__[0]
    for name in ("key_tuple", "old_tuple", "new_tuple"):
        tup = getattr(message, name, None)
        if tup is None:
            continue
        for i in range(len(tup)):
            if tup.kind(i) == "t":
                try:
                    tup.text(i)
                except DecodeError as exc:
                    raise DecodeError(f"{name} {exc.reason}", tag=tag, offset=exc.offset) from None


def columns_of(relation: Relation) -> tuple[ColumnInfo, ...]:
    """The columns of a Relation message as the state and the changelog describe them."""
    return tuple(ColumnInfo(c.name, c.type_oid, c.type_modifier, c.is_key) for c in relation.columns)


def _prepend(first: int, values: np.ndarray) -> np.ndarray:
    """``values`` with ``first`` in front, keeping their integer type (never float)."""
    return np.concatenate([np.array([first], dtype=values.dtype), values])


def arrow_payloads(payloads: pa.Array) -> tuple[bytes, np.ndarray]:
    """The payloads of a binary Arrow array (no nulls: a peek's ``data`` is never NULL) as one
    buffer and their lengths, straight from the array's buffers."""
    if payloads.null_count:
        raise ValueError("a peek returned a NULL payload")
    offsets = payloads.type in (pa.large_binary(), pa.large_string())
    _, offset_buffer, data_buffer = payloads.buffers()
    starts = np.frombuffer(offset_buffer, dtype=np.int64 if offsets else np.int32)
    starts = starts[payloads.offset : payloads.offset + len(payloads) + 1]
    if len(payloads) == 0:
        return b"", np.empty(0, np.int64)
    first, last = int(starts[0]), int(starts[-1])
    data = data_buffer.slice(first, last - first).to_pybytes() if data_buffer is not None else b""
    return data, np.diff(starts).astype(np.int64)


def join_payloads(payloads: Sequence[bytes]) -> tuple[bytes, np.ndarray]:
    """The payloads as one buffer and their lengths (what ``feed_joined`` takes)."""
    return b"".join(payloads), np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))


@dataclass
class _Rows:
    """Rows of one table version: op codes, positions in their transactions, transaction
    indexes, and the old key and row columns (keyed by segment column name)."""

    ops: np.ndarray
    seq: np.ndarray
    tix: np.ndarray
    values: dict[str, pa.Array]


def _with_truncates(
    rows: _Rows, positions: np.ndarray, truncates: list[tuple[int, int]], tix: np.ndarray
) -> _Rows:
    """Merge truncate rows (op 'T', every column null) into the changes, in message order."""
    t_pos = np.array([index for index, _ in truncates], np.int64)
    t_seq = np.array([s for _, s in truncates], np.int64)
    order = np.argsort(np.concatenate([positions, t_pos]), kind="stable")
    take = pa.array(order)
    return _Rows(
        ops=np.concatenate([rows.ops, np.full(len(t_pos), 3, np.uint8)])[order],
        seq=np.concatenate([rows.seq, t_seq])[order],
        tix=np.concatenate([rows.tix, tix[t_pos]])[order],
        values={
            name: pa.concat_arrays([values, pa.nulls(len(t_pos), values.type)]).take(take)
            for name, values in rows.values.items()
        },
    )


def _finish(
    tv: TableVersion,
    rows: _Rows,
    xids: np.ndarray,
    commit_lsns: np.ndarray,
    commit_ts: np.ndarray,
    skip_before: int,
) -> pa.Table:
    """The rows in the segment schema: change metadata first, then old keys and row columns."""
    n = len(rows.tix)
    lsn = commit_lsns[rows.tix].astype(np.uint64)
    ts = commit_ts[rows.tix].astype(np.int64) + _PG_EPOCH_UNIX_US
    arrays = [
        pa.StringArray.from_buffers(
            n, pa.py_buffer(np.arange(n + 1, dtype=np.int32)), pa.py_buffer(_OPS[rows.ops])
        ),
        pa.array(lsn, pa.uint64()),
        pa.array(rows.seq.astype(np.int64), pa.int64()),
        pa.array(xids[rows.tix].astype(np.int64), pa.int64()),
        pa.array(ts, pa.timestamp("us", tz="UTC")),
        *rows.values.values(),
    ]
    table = pa.Table.from_arrays(arrays, schema=tv.schema)
    if skip_before and n and int(lsn.min()) < skip_before:
        table = table.filter(pa.array(lsn >= skip_before))
    return table
