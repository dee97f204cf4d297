"""ColumnBatcher equals a straightforward reference built on the per-message decoder.

``reference`` below decodes every payload with ``decode_message`` and builds the rows
of DESIGN §4 one by one in plain Python; the tests feed the same payloads to
``ColumnBatcher`` in random chunkings (one chunk, one payload a chunk, random cuts that
split transactions) and demand exactly the same rows, per table version, in the same
order and with the same column order. Malformed streams must raise DecodeError and
nothing else, naming the corrupted payload's tag when one payload is corrupt.
"""

from __future__ import annotations

import itertools
import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from airflow_provider_pgsync.capture.columns import ColumnBatcher, TableVersion, arrow_payloads, join_payloads
from airflow_provider_pgsync.changelog.schema import segment_schema
from airflow_provider_pgsync.errors import ConfigError, DecodeError, PgSyncError
from airflow_provider_pgsync.pgoutput import (
    LSN,
    PG_EPOCH,
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
    decode_message,
)
from airflow_provider_pgsync.state.model import ColumnInfo
from tests.pgoutput.mutations import mutate
from tests.pgoutput.wire import encode

PROPERTY = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

Key = tuple[int, int]
Row = list[tuple[str, Any]]  # a row as (column, value) pairs, so column order is compared too

# ---- the reference -------------------------------------------------------------------------


class Invalid(Exception):
    """The reference found the message sequence malformed (ColumnBatcher must raise DecodeError)."""


class SchemaVersions:
    """A ``version_of``: a new version of a relation id whenever its columns differ from the last."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[tuple[RelationColumn, ...], int]] = {}

    def __call__(self, relation: Relation) -> int:
        previous = self.last.get(relation.relation_id)
        if previous is None:
            version = 0
        elif previous[0] == relation.columns:
            version = previous[1]
        else:
            version = previous[1] + 1
        self.last[relation.relation_id] = (relation.columns, version)
        return version


@dataclass
class Outcome:
    """Rows per TableVersion.key, the columns of each key, and the batcher's counters."""

    rows: dict[Key, list[Row]] = field(default_factory=dict)
    columns: dict[Key, tuple[RelationColumn, ...]] = field(default_factory=dict)
    payloads: int = 0
    changes: int = 0
    transactions: int = 0
    last_end_lsn: int | None = None


def reference(payloads: Sequence[bytes], version_of: SchemaVersions, *, skip_before: int = 0) -> Outcome:
    """The rows of DESIGN §4, decoded one message at a time.

    ``changes`` counts every change row read (a Truncate one per relation), also those of
    transactions dropped by ``skip_before``; ``transactions`` counts every Commit.
    Raises DecodeError (a payload) or Invalid (the sequence) for malformed input.
    """
    out = Outcome(payloads=len(payloads))
    known: dict[int, tuple[Relation, int]] = {}
    begin: Begin | None = None
    seq = 0

    def change(op: str, relation_id: int, old: TupleData | None, new: TupleData | None) -> None:
        nonlocal seq
        if begin is None:
            raise Invalid("a change outside a transaction")
        if relation_id not in known:
            raise Invalid(f"a change of relation {relation_id} before its Relation")
        relation, version = known[relation_id]
        columns = relation.columns
        for tup in (old, new):
            if tup is not None and (len(tup) != len(columns) or ord("b") in tup.kinds):
                raise Invalid("a tuple that does not match its Relation, or a binary value")
        this, seq = seq, seq + 1
        out.changes += 1
        if int(begin.final_lsn) < skip_before:
            return
        unchanged = [c.name for i, c in enumerate(columns) if new is not None and new.is_unchanged(i)]
        row: dict[str, Any] = {
            "_op": op,
            "_commit_lsn": int(begin.final_lsn),
            "_seq": this,
            "_xid": begin.xid,
            "_commit_ts": PG_EPOCH + timedelta(microseconds=begin.commit_ts),
            "_unchanged": unchanged or None,
        }
        # text() raises DecodeError for bad UTF-8 in what is output: the key columns of the old
        # tuple and the new tuple (the other old values are not read, by either side)
        for i, c in enumerate(columns):
            if c.is_key:
                row[f"_old_key_{c.name}"] = old.text(i) if old is not None else None
        for i, c in enumerate(columns):
            row[c.name] = new.text(i) if new is not None else None
        key = (relation_id, version)
        out.rows.setdefault(key, []).append(list(row.items()))
        out.columns.setdefault(key, columns)

    for payload in payloads:
        message = decode_message(payload, in_stream=False)
        match message:
            case Relation():
                known[message.relation_id] = (message, version_of(message))
            case Begin():
                if begin is not None:
                    raise Invalid("a Begin inside a transaction")
                begin, seq = message, 0
            case Commit():
                if begin is None:
                    raise Invalid("a Commit outside a transaction")
                out.transactions += 1
                out.last_end_lsn = int(message.end_lsn)
                begin = None
            case Insert():
                change("I", message.relation_id, None, message.new_tuple)
            case Update():
                change("U", message.relation_id, message.key_tuple or message.old_tuple, message.new_tuple)
            case Delete():
                change("D", message.relation_id, message.key_tuple or message.old_tuple, None)
            case Truncate():
                if begin is None:
                    raise Invalid("a Truncate outside a transaction")
                for relation_id in message.relation_ids:
                    change("T", relation_id, None, None)
            case Type() | Origin() | LogicalMessage():
                pass
            case _:
                raise Invalid(f"unexpected {type(message).__name__}")
    return out


# ---- running the batcher -------------------------------------------------------------------


def column_infos(columns: Sequence[RelationColumn]) -> list[ColumnInfo]:
    return [ColumnInfo(c.name, c.type_oid, c.type_modifier, c.is_key) for c in columns]


def assert_segment_columns(tv: TableVersion, schema: pa.Schema) -> None:
    """Names, types and order of segment_schema; the not-null metadata flags: see test_schema_is_exactly_*."""
    want = segment_schema(column_infos(tv.relation.columns))
    assert [(f.name, f.type) for f in schema] == [(f.name, f.type) for f in want]
    assert list(schema)[5:] == list(want)[5:]  # _unchanged, old keys and row columns: exactly
    assert schema.metadata is None


def as_rows(table: pa.Table) -> list[Row]:
    return [list(row.items()) for row in table.to_pylist()]


def bounds_of(n: int, cuts: Sequence[int]) -> list[int]:
    return [0, *sorted(cuts), n]


def _as_fetched(chunk: Sequence[bytes], *, large: bool) -> pa.Array:
    """``chunk`` as a binary Arrow array that is a slice of a longer one (offsets not at 0)."""
    padded = pa.array([b"before", *chunk, b"after"], pa.large_binary() if large else pa.binary())
    return padded.slice(1, len(chunk))


def run_batcher(
    payloads: Sequence[bytes], bounds: Sequence[int], *, skip_before: int = 0, check_schema: bool = True
) -> Outcome:
    """Feed ``payloads`` cut at ``bounds``, alternating ``feed``, ``feed_joined`` and
    ``feed_joined`` of an Arrow array's buffers (as capture fetches them); collect the rows."""
    batcher = ColumnBatcher(SchemaVersions(), skip_before=skip_before)
    out = Outcome()
    for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        chunk = payloads[lo:hi]
        if k % 3 == 0:
            batches = batcher.feed(chunk)
        elif k % 3 == 1:
            batches = batcher.feed_joined(*join_payloads(chunk))
        else:
            batches = batcher.feed_joined(*arrow_payloads(_as_fetched(chunk, large=k % 2 == 0)))
        for tv, table in batches:
            assert isinstance(tv, TableVersion) and isinstance(table, pa.Table)
            assert table.num_rows > 0, "an empty table was returned"
            if check_schema:
                assert_segment_columns(tv, table.schema)
            out.rows.setdefault(tv.key, []).extend(as_rows(table))
            assert out.columns.setdefault(tv.key, tv.relation.columns) == tv.relation.columns
    out.payloads, out.changes = batcher.payloads, batcher.changes
    out.transactions, out.last_end_lsn = batcher.transactions, batcher.last_end_lsn
    return out


def assert_same(got: Outcome, expected: Outcome) -> None:
    assert sorted(got.rows) == sorted(expected.rows)
    for key, rows in expected.rows.items():
        assert len(got.rows[key]) == len(rows), key
        for i, (g, e) in enumerate(zip(got.rows[key], rows, strict=True)):
            assert g == e, f"table version {key}, row {i}"
        assert got.columns[key] == expected.columns[key]
    assert (got.payloads, got.changes, got.transactions, got.last_end_lsn) == (
        expected.payloads,
        expected.changes,
        expected.transactions,
        expected.last_end_lsn,
    )


def check_chunkings(payloads: Sequence[bytes], cuts: Sequence[int], skip_before: int = 0) -> Outcome:
    """One chunk, one payload a chunk and ``cuts`` all give exactly the reference's rows."""
    expected = reference(payloads, SchemaVersions(), skip_before=skip_before)
    n = len(payloads)
    for bounds in ([0, n], list(range(n + 1)), bounds_of(n, cuts)):
        assert_same(run_batcher(payloads, bounds, skip_before=skip_before), expected)
    return expected


# ---- valid streams -------------------------------------------------------------------------

TRICKY_NAMES = [
    "id",
    "a b",
    'say "hi"',
    "it's",
    "Ünïcödé",
    "名前",
    "emoji 😀",
    " lead",
    "trail ",
    "_old_key_id",
    "UPPER",
    "x" * 63,
    "_op_",
    "tab\tname",
    "new\nline",
    "item",
]
names = st.one_of(
    st.sampled_from(TRICKY_NAMES),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=10),
)
short_text = st.text(st.characters(codec="utf-8"), max_size=12)
long_text = st.builds(
    lambda s, k: s * k, st.text(st.characters(codec="utf-8"), min_size=1, max_size=4), st.integers(1000, 5000)
)
values = st.one_of(short_text, short_text, short_text, st.just(""), long_text)
u32 = st.integers(0, 2**32 - 1)
TYPE_OIDS = [16, 20, 23, 25, 1043, 1700, 3802, 1184, 16385]


@st.composite
def relation_columns(draw: st.DrawFn) -> tuple[RelationColumn, ...]:
    """1-6 columns with unique names, random key flags, sometimes all key (REPLICA IDENTITY FULL)."""
    column_names = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    full = draw(st.integers(0, 3)) == 0
    columns = tuple(
        RelationColumn(
            1 if full else draw(st.sampled_from([0, 0, 1])),
            name,
            draw(st.sampled_from(TYPE_OIDS)),
            draw(st.sampled_from([-1, 14, 655366])),
        )
        for name in column_names
    )
    assume(usable(columns))
    return columns


def usable(columns: Sequence[RelationColumn]) -> bool:
    """Whether a table may have these columns: unique names, none named like a changelog column."""
    try:
        segment_schema(column_infos(columns))
    except ConfigError:
        return False
    return all(c.name != "_tix" for c in columns)  # see test_column_named_tix_is_kept


@st.composite
def schema_change(draw: st.DrawFn, columns: tuple[RelationColumn, ...]) -> tuple[RelationColumn, ...]:
    """``columns`` after an ALTER TABLE: a column added, dropped, retyped, renamed or (un)keyed."""
    changed = list(columns)
    i = draw(st.integers(0, len(changed) - 1))
    c = changed[i]
    match draw(st.sampled_from(["add", "drop", "type", "rename", "key"])):
        case "add":
            changed.insert(draw(st.integers(0, len(changed))), RelationColumn(0, draw(names), 25, -1))
        case "drop" if len(changed) > 1:
            del changed[i]
        case "type":
            changed[i] = RelationColumn(c.flags, c.name, c.type_oid + 1, c.type_modifier)
        case "rename":
            changed[i] = RelationColumn(c.flags, draw(names), c.type_oid, c.type_modifier)
        case _:
            changed[i] = RelationColumn(c.flags ^ 1, c.name, c.type_oid, c.type_modifier)
    return tuple(changed) if usable(changed) else columns


@dataclass
class Stream:
    messages: list[Message]
    commit_lsns: list[int]  # of every transaction, the open one included

    @property
    def payloads(self) -> list[bytes]:
        return [encode(m) for m in self.messages]


def draw_tuple(
    draw: st.DrawFn, columns: Sequence[RelationColumn], kinds: bytes, *, keys_only: bool = False
) -> TupleData:
    out_kinds, out_values = bytearray(), []
    for c in columns:
        kind = ord("n") if keys_only and not c.is_key else draw(st.sampled_from(kinds))
        out_kinds.append(kind)
        out_values.append(draw(values).encode() if kind == ord("t") else None)
    return TupleData(bytes(out_kinds), tuple(out_values))


@st.composite
def streams(draw: st.DrawFn, *, nonempty: bool = False) -> Stream:
    """A valid pgoutput stream: relations, transactions of changes, optionally the last one open."""
    nrel = draw(st.integers(1, 4))
    relids = draw(
        st.lists(u32 | st.sampled_from([0, 1, 16384, 2**32 - 1]), min_size=nrel, max_size=nrel, unique=True)
    )
    variants = {}
    for relid in relids:
        versions = [draw(relation_columns())]
        for _ in range(draw(st.integers(0, 2))):
            versions.append(draw(schema_change(versions[-1])))
        variants[relid] = versions
    ident = {r: (draw(names), draw(names)) for r in relids}
    current: dict[int, tuple[RelationColumn, ...]] = {}
    messages: list[Message] = []

    def send_relation(relid: int, columns: tuple[RelationColumn, ...]) -> None:
        if draw(st.integers(0, 3)) == 0:
            messages.append(Type(None, draw(u32), draw(names), draw(names)))
        identity = "f" if all(c.is_key for c in columns) else draw(st.sampled_from("dni"))
        messages.append(Relation(None, relid, *ident[relid], identity, columns))
        current[relid] = columns

    def columns_of(relid: int) -> tuple[RelationColumn, ...]:
        if relid not in current:
            send_relation(relid, draw(st.sampled_from(variants[relid])))
        return current[relid]

    lsn = draw(st.one_of(st.integers(0, 2**40), st.integers(2**62, 2**63)))
    commit_lsns = []
    ntx = draw(st.integers(1, 6))  # no transaction at all: test_empty_input
    leave_open = draw(st.booleans())
    for t in range(ntx):
        for _ in range(draw(st.integers(0, 1))):  # non-transactional logical messages
            messages.append(LogicalMessage(None, 0, LSN(lsn), draw(names), draw(st.binary(max_size=16))))
        final = lsn + draw(st.integers(1, 10_000))
        ts = draw(st.integers(-(10**15), 10**16))
        messages.append(Begin(LSN(final), ts, draw(u32)))
        commit_lsns.append(final)
        if draw(st.integers(0, 4)) == 0:
            messages.append(Origin(LSN(final), draw(names)))
        first = nonempty and t == 0
        for k in range(draw(st.integers(1 if first else 0, 10))):
            action = "I" if first and k == 0 else draw(st.sampled_from("IIIUUUDDTMYRR"))
            relid = draw(st.sampled_from(relids))
            if action == "I":
                messages.append(Insert(None, relid, draw_tuple(draw, columns_of(relid), b"ttn")))
            elif action == "U":
                columns = columns_of(relid)
                new = draw_tuple(draw, columns, b"ttnu")
                before = draw(st.sampled_from("NKO"))
                key = draw_tuple(draw, columns, b"ttn", keys_only=True) if before == "K" else None
                old = draw_tuple(draw, columns, b"ttn") if before == "O" else None
                messages.append(Update(None, relid, old, key, new))
            elif action == "D":
                columns = columns_of(relid)
                if draw(st.booleans()):
                    key = draw_tuple(draw, columns, b"ttn", keys_only=True)
                    messages.append(Delete(None, relid, None, key))
                else:
                    messages.append(Delete(None, relid, draw_tuple(draw, columns, b"ttn"), None))
            elif action == "T":
                targets = draw(st.lists(st.sampled_from(relids), min_size=1, max_size=3, unique=True))
                for target in targets:
                    columns_of(target)
                messages.append(Truncate(None, draw(st.integers(0, 3)), tuple(targets)))
            elif action == "M":
                content = draw(st.binary(max_size=16))
                messages.append(LogicalMessage(None, 1, LSN(final - 1), draw(names), content))
            elif action == "Y":
                messages.append(Type(None, draw(u32), draw(names), draw(names)))
            else:  # a Relation re-sent: the same columns or a schema change
                send_relation(relid, draw(st.sampled_from(variants[relid])))
        if t == ntx - 1 and leave_open:
            break
        end = final + draw(st.integers(1, 1000))
        messages.append(Commit(0, LSN(final), LSN(end), ts))
        lsn = end + draw(st.integers(0, 1000))
    return Stream(messages, commit_lsns)


def chunk_cuts(data: st.DataObject, n: int) -> list[int]:
    return data.draw(st.lists(st.integers(0, n), max_size=8), label="cuts")


@PROPERTY
@given(streams(), st.data())
def test_batcher_equals_reference(stream: Stream, data: st.DataObject) -> None:
    payloads = stream.payloads
    skips = [*stream.commit_lsns, *(c + 1 for c in stream.commit_lsns)]
    skip_before = data.draw(st.just(0) | st.sampled_from(skips or [0]), label="skip_before")
    out = check_chunkings(payloads, chunk_cuts(data, len(payloads)), skip_before)
    rows = [dict(row) for key_rows in out.rows.values() for row in key_rows]
    event(
        f"rows: {'none' if not rows else '1-9' if len(rows) < 10 else '10-29' if len(rows) < 30 else '30+'}"
    )
    for what, seen in (
        ("a schema change", any(version for _, version in out.rows)),
        ("two tables", len({relid for relid, _ in out.rows}) > 1),
        ("a truncate", any(row["_op"] == "T" for row in rows)),
        ("unchanged TOAST", any(row["_unchanged"] for row in rows)),
        (
            "an old key",
            any(k.startswith("_old_key_") and v is not None for row in rows for k, v in row.items()),
        ),
        ("a value over 4 kB", any(len(p) > 4096 for p in payloads)),
        ("rows skipped", out.changes > len(rows)),
        ("the last transaction open", len(stream.commit_lsns) > out.transactions),
    ):
        if seen:
            event(f"with {what}")


# ---- targeted examples ---------------------------------------------------------------------


def col(name: str, key: bool = False, oid: int = 25) -> RelationColumn:
    return RelationColumn(1 if key else 0, name, oid, -1)


def tup(*vals: str | bytes | None) -> TupleData:
    """Text values; None is null, b"u" marks an unchanged TOAST value."""
    kinds = bytes(ord("n") if v is None else ord("u") if v == b"u" else ord("t") for v in vals)
    return TupleData(kinds, tuple(v.encode() if isinstance(v, str) else None for v in vals))


def rel(relid: int, *columns: RelationColumn, name: str = "t") -> Relation:
    return Relation(None, relid, "public", name, "d", columns)


def ts_of(micros: int) -> Any:
    return PG_EPOCH + timedelta(microseconds=micros)


def tx(
    final: int,
    xid: int,
    body: Sequence[Message],
    *,
    end: int | None = None,
    ts: int = 1000,
    open_: bool = False,
) -> list[Message]:
    messages: list[Message] = [Begin(LSN(final), ts, xid), *body]
    if not open_:
        messages.append(Commit(0, LSN(final), LSN(end or final + 8), ts))
    return messages


def meta(op: str, lsn: int, seq: int, xid: int, ts: int = 1000, unchanged: list[str] | None = None) -> Row:
    return [
        ("_op", op),
        ("_commit_lsn", lsn),
        ("_seq", seq),
        ("_xid", xid),
        ("_commit_ts", ts_of(ts)),
        ("_unchanged", unchanged),
    ]


def test_empty_input() -> None:
    batcher = ColumnBatcher(SchemaVersions())
    assert batcher.feed([]) == []
    assert (batcher.payloads, batcher.changes, batcher.transactions, batcher.last_end_lsn) == (0, 0, 0, None)
    # transactions without changes give no tables, but count and move last_end_lsn
    quiet = [LogicalMessage(None, 0, LSN(5), "p", b"x"), *tx(100, 7, [Type(None, 1, "s", "t")], end=120)]
    assert batcher.feed([encode(m) for m in quiet]) == []
    assert batcher.feed([]) == []
    assert (batcher.payloads, batcher.changes, batcher.transactions, batcher.last_end_lsn) == (4, 0, 1, 120)


def test_truncate_of_two_relations() -> None:
    r1, r2 = rel(1, col("id", True), col("v")), rel(2, col("k", True))
    body: list[Message] = [
        r1,
        r2,
        Insert(None, 1, tup("1", "a")),
        Truncate(None, 1, (1, 2)),
        Insert(None, 2, tup("9")),
    ]
    payloads = [encode(m) for m in tx(500, 42, body)]
    out = check_chunkings(payloads, [3, 4])
    assert out.rows == {
        (1, 0): [
            [*meta("I", 500, 0, 42), ("_old_key_id", None), ("id", "1"), ("v", "a")],
            [*meta("T", 500, 1, 42), ("_old_key_id", None), ("id", None), ("v", None)],
        ],
        (2, 0): [
            [*meta("T", 500, 2, 42), ("_old_key_k", None), ("k", None)],
            [*meta("I", 500, 3, 42), ("_old_key_k", None), ("k", "9")],
        ],
    }
    assert out.changes == 4


def test_relation_change_mid_transaction() -> None:
    v0 = rel(7, col("id", True), col("b"))
    v1 = rel(7, col("id", True), col("b"), col("c", oid=23))
    body: list[Message] = [
        v0,
        Insert(None, 7, tup("1", "x")),
        v1,
        Insert(None, 7, tup("2", "y", "3")),
        Update(None, 7, None, tup("1", None, None), tup("10", b"u", "4")),
        Delete(None, 7, None, tup("2", None, None)),
        v1,  # re-sent unchanged: same version
        Update(None, 7, tup("10", "y", "4"), None, tup("10", "z", None)),
    ]
    payloads = [encode(m) for m in tx(900, 3, body, ts=-5)]
    for cut in range(len(payloads) + 1):
        out = check_chunkings(payloads, [cut])
    assert out.rows == {
        (7, 0): [[*meta("I", 900, 0, 3, -5), ("_old_key_id", None), ("id", "1"), ("b", "x")]],
        (7, 1): [
            [*meta("I", 900, 1, 3, -5), ("_old_key_id", None), ("id", "2"), ("b", "y"), ("c", "3")],
            [*meta("U", 900, 2, 3, -5, ["b"]), ("_old_key_id", "1"), ("id", "10"), ("b", None), ("c", "4")],
            [*meta("D", 900, 3, 3, -5), ("_old_key_id", "2"), ("id", None), ("b", None), ("c", None)],
            [*meta("U", 900, 4, 3, -5), ("_old_key_id", "10"), ("id", "10"), ("b", "z"), ("c", None)],
        ],
    }


def test_skip_before_drops_the_first_transactions() -> None:
    r = rel(1, col("id", True))
    messages: list[Message] = []
    for i, final in enumerate([100, 200, 300, 400]):
        body: list[Message] = [Insert(None, 1, tup(str(i))), Insert(None, 1, tup(str(i)))]
        messages += tx(final, i, [r, *body] if i == 0 else body, end=final + 10)
    payloads = [encode(m) for m in messages]
    for skip_before, kept in ((300, [300, 400]), (301, [400]), (401, [])):
        out = check_chunkings(payloads, [5, 9], skip_before)
        assert [row[1][1] for row in out.rows.get((1, 0), [])] == [lsn for lsn in kept for _ in (0, 1)]
        assert (out.transactions, out.changes, out.last_end_lsn) == (4, 8, 410)


def test_open_transaction_at_the_end_returns_its_rows() -> None:
    r = rel(1, col("id", True), col("v"))
    first = tx(100, 1, [r, Insert(None, 1, tup("1", "a"))], end=150)
    second = tx(
        200, 2, [Insert(None, 1, tup("2", "b")), Update(None, 1, None, None, tup("2", "c"))], ts=9, open_=True
    )
    batcher = ColumnBatcher(SchemaVersions())
    got = [as_rows(t) for _, t in batcher.feed([encode(m) for m in first + second[:2]])]
    assert got == [
        [
            [*meta("I", 100, 0, 1), ("_old_key_id", None), ("id", "1"), ("v", "a")],
            [*meta("I", 200, 0, 2, 9), ("_old_key_id", None), ("id", "2"), ("v", "b")],
        ]
    ]
    assert (batcher.transactions, batcher.last_end_lsn) == (1, 150)
    got = [as_rows(t) for _, t in batcher.feed([encode(second[2]), encode(Commit(0, LSN(200), LSN(210), 9))])]
    assert got == [[[*meta("U", 200, 1, 2, 9), ("_old_key_id", None), ("id", "2"), ("v", "c")]]]
    assert (batcher.transactions, batcher.last_end_lsn, batcher.changes) == (2, 210, 3)


def test_a_huge_transaction_in_seven_chunks() -> None:
    rng = random.Random(20240601)
    r1 = rel(10, col("id", True), col("body"), col("n", oid=23))
    r2 = rel(11, col("a", True), col("b", True))  # REPLICA IDENTITY FULL
    body: list[Message] = [r1, r2]
    big = "ü" * 10_000  # 20 kB of UTF-8
    for i in range(6000):
        value = big if i % 500 == 0 else f"v{i}"
        match rng.randrange(5):
            case 0 | 1:
                body.append(Insert(None, 10, tup(str(i), value, None)))
            case 2:
                body.append(Update(None, 10, None, tup(str(i - 1), None, None), tup(str(i), b"u", "1")))
            case 3:
                body.append(Insert(None, 11, tup(value, str(i))))
            case _:
                body.append(Delete(None, 11, tup(str(i), value), None))
    payloads = [encode(m) for m in tx(2**52 + 5, 2**32 - 1, body, ts=10**15)]
    cuts = sorted(rng.sample(range(1, len(payloads)), 6))
    expected = reference(payloads, SchemaVersions())
    assert_same(run_batcher(payloads, bounds_of(len(payloads), cuts)), expected)
    assert_same(run_batcher(payloads, [0, len(payloads)]), expected)
    seqs = sorted(dict(row)["_seq"] for rows in expected.rows.values() for row in rows)
    assert seqs == list(range(6000))


# ---- malformed input -----------------------------------------------------------------------


def tuple_fields(payload: bytes) -> list[tuple[int, int | None]]:
    """(offset of the kind byte, offset of the length or None) of every column of a change."""
    fields: list[tuple[int, int | None]] = []

    def walk(pos: int) -> int:
        (ncols,) = struct.unpack_from("!h", payload, pos)
        pos += 2
        for _ in range(ncols):
            if payload[pos] == ord("t"):
                fields.append((pos, pos + 1))
                pos += 5 + struct.unpack_from("!i", payload, pos + 1)[0]
            else:
                fields.append((pos, None))
                pos += 1
        return pos

    pos = walk(6)
    if payload[0] == ord("U") and payload[5] != ord("N"):
        walk(pos + 1)
    return fields


def readable_fields(payload: bytes) -> list[int]:
    """The offsets of the value lengths of a change payload that may have been edited before."""
    try:
        return [at for _, at in tuple_fields(payload) if at is not None]
    except (IndexError, struct.error):
        return []


BAD_UTF8 = [b"\xff", b"\xc3", b"a\x80b", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"ok\xe2\x82", b"\xc0\xaf"]
MUTATIONS = ["cut", "extend", "length", "kind", "tag", "outside", "no_relation", "stream", "utf8"]


@dataclass
class Malformed:
    payloads: list[bytes]
    mutation: str
    tag: str | None  # the tag DecodeError must name; None: any DecodeError


@st.composite
def malformed_streams(draw: st.DrawFn) -> Malformed:
    stream = draw(streams(nonempty=True))
    messages, payloads = stream.messages, stream.payloads
    changes = [i for i, m in enumerate(messages) if isinstance(m, Insert | Update | Delete)]
    mutation = draw(st.sampled_from(MUTATIONS))
    if mutation in ("cut", "extend"):
        i = draw(st.integers(0, len(payloads) - 1))
        p = payloads[i]
        if mutation == "extend":
            payloads[i] = p + draw(st.binary(min_size=1, max_size=4))
        else:  # changes cut below 7 bytes: see test_short_change_payload_*
            payloads[i] = p[: draw(st.integers(7 if i in changes else 1, len(p) - 1))]
        return Malformed(payloads, mutation, chr(p[0]))
    if mutation in ("length", "kind", "tag"):
        i = draw(st.sampled_from(changes))
        edited = bytearray(payloads[i])
        fields = tuple_fields(payloads[i])
        if mutation == "length":
            lengths = [at for _, at in fields if at is not None]
            assume(lengths)
            at = draw(st.sampled_from(lengths))
            remaining = len(edited) - at - 4
            bad = draw(st.one_of(st.integers(-(2**31), -1), st.integers(remaining + 1, 2**31 - 1)))
            edited[at : at + 4] = struct.pack("!i", bad)
        elif mutation == "kind":
            edited[draw(st.sampled_from([k for k, _ in fields]))] = ord("x")
        else:
            edited[0] = draw(st.sampled_from(b"Zxq?\x00\xff"))
        payloads[i] = bytes(edited)
        return Malformed(payloads, mutation, chr(edited[0]))
    if mutation == "outside":  # a copy of a change between transactions (or first)
        depth, spots = 0, [0]
        for i, m in enumerate(messages):
            depth += isinstance(m, Begin) - isinstance(m, Commit)
            if depth == 0:
                spots.append(i + 1)
        at = draw(st.sampled_from(spots))
        payloads.insert(at, payloads[draw(st.sampled_from(changes))])
    elif mutation == "no_relation":
        relid = draw(st.sampled_from([messages[i].relation_id for i in changes]))  # type: ignore[union-attr]
        payloads = [
            p
            for p, m in zip(payloads, messages, strict=True)
            if not (isinstance(m, Relation) and m.relation_id == relid)
        ]
    elif mutation == "stream":
        streamed: list[Message] = [
            StreamStart(9, True),
            StreamStop(),
            StreamCommit(9, 0, LSN(1), LSN(2), 3),
            StreamAbort(9, 9),
        ]
        message = draw(st.sampled_from(streamed))
        payloads.insert(draw(st.integers(0, len(payloads))), encode(message))
    else:  # bad UTF-8 in a value of a new tuple
        writes = [i for i in changes if isinstance(messages[i], Insert | Update)]
        assume(writes)
        i = draw(st.sampled_from(writes))
        m = messages[i]
        assert isinstance(m, Insert | Update)
        j = draw(st.integers(0, len(m.new_tuple) - 1))
        kinds = bytearray(m.new_tuple.kinds)
        kinds[j] = ord("t")
        vals = list(m.new_tuple.values)
        vals[j] = draw(st.text(max_size=3)).encode() + draw(st.sampled_from(BAD_UTF8))
        new = TupleData(bytes(kinds), tuple(vals))
        payloads[i] = encode(
            Insert(None, m.relation_id, new)
            if isinstance(m, Insert)
            else Update(None, m.relation_id, m.old_tuple, m.key_tuple, new)
        )
    return Malformed(payloads, mutation, None)


@PROPERTY
@given(malformed_streams(), st.data())
def test_malformed_streams_raise_decode_error(case: Malformed, data: st.DataObject) -> None:
    event(f"mutation: {case.mutation}")
    with pytest.raises((DecodeError, Invalid)):
        reference(case.payloads, SchemaVersions())
    bounds = bounds_of(len(case.payloads), chunk_cuts(data, len(case.payloads)))
    with pytest.raises(DecodeError) as info:  # anything else (IndexError, ArrowInvalid...) fails the test
        run_batcher(case.payloads, bounds)
    if case.tag is not None:
        assert info.value.tag == case.tag, info.value


@st.composite
def fuzzed_streams(draw: st.DrawFn) -> list[bytes]:
    """A valid stream with 1-3 of its payloads (not Begin or Commit) randomly edited."""
    stream = draw(streams(nonempty=True))
    payloads = stream.payloads
    targets = [i for i, m in enumerate(stream.messages) if not isinstance(m, Begin | Commit)]
    changes = [i for i, m in enumerate(stream.messages) if isinstance(m, Insert | Update | Delete)]
    relids = sorted({m.relation_id for m in stream.messages if isinstance(m, Relation)})
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            i = draw(st.sampled_from(targets))
            payloads[i] = mutate(draw, payloads[i], edits=3, insert_max=6)
        else:  # an edit that keeps the payload readable: a value's bytes, the relation id, a sub-tag
            i = draw(st.sampled_from(changes))
            p = bytearray(payloads[i])
            what = draw(st.sampled_from(["value", "value", "relid", "subtag"]))
            values = [
                (at, length)
                for at in readable_fields(bytes(p))
                if 0 < (length := struct.unpack_from("!i", p, at)[0]) <= len(p) - at - 4
            ]
            if what == "value" and values:
                at, length = draw(st.sampled_from(values))
                pos = at + 4 + draw(st.integers(0, length - 1))
                p[pos] = draw(st.integers(0x20, 0x7E) | st.integers(0x80, 0xFF))
            elif what == "relid" and len(p) >= 5:
                p[1:5] = struct.pack("!I", draw(st.sampled_from(relids)))
            elif len(p) >= 6:
                p[5] = draw(st.sampled_from(b"NKO"))
            payloads[i] = bytes(p)
    return payloads


@PROPERTY
@given(fuzzed_streams(), st.data())
def test_fuzzed_streams_match_the_reference_or_raise_decode_error(
    payloads: list[bytes], data: st.DataObject
) -> None:
    """Differential: where the reference reads an edited stream, the rows agree; else DecodeError."""
    bounds = bounds_of(len(payloads), chunk_cuts(data, len(payloads)))
    try:
        expected = reference(payloads, SchemaVersions())
    except (DecodeError, Invalid) as exc:
        event(f"malformed: {type(exc).__name__}")
        with pytest.raises(DecodeError):
            run_batcher(payloads, bounds, check_schema=False)
        return
    event("still valid: rows compared")
    assert_same(run_batcher(payloads, bounds, check_schema=False), expected)


R = rel(1, col("id", True), col("v"))
BEGIN = encode(Begin(LSN(100), 0, 5))
OPEN = [BEGIN, encode(R)]  # a transaction begun and the Relation of its changes sent
INS = Insert(None, 1, tup("1", "a"))


def in_tx(*body: Message) -> list[bytes]:
    return [*OPEN, *(encode(m) for m in body), encode(Commit(0, LSN(100), LSN(108), 0))]


@pytest.mark.parametrize(
    ("payloads", "tag"),
    [
        pytest.param([*OPEN, encode(INS), encode(Begin(LSN(200), 0, 6))], None, id="begin-in-transaction"),
        pytest.param([encode(Commit(0, LSN(1), LSN(2), 0))], None, id="commit-outside"),
        pytest.param([encode(R), encode(INS)], None, id="change-outside"),
        pytest.param([encode(R), encode(Truncate(None, 0, (1,)))], None, id="truncate-outside"),
        pytest.param([BEGIN, encode(Truncate(None, 0, (2,)))], None, id="truncate-before-its-relation"),
        pytest.param([BEGIN, encode(INS)], None, id="change-before-its-relation"),
        pytest.param(in_tx(Insert(None, 1, tup("1"))), None, id="tuple-shorter-than-relation"),
        pytest.param(in_tx(Update(None, 1, None, tup("1"), tup("1", "a"))), None, id="key-tuple-too-short"),
        pytest.param(in_tx(Insert(None, 1, TupleData(b"tb", (b"1", b"\x00")))), None, id="binary-value"),
        pytest.param([*OPEN, b""], None, id="empty-payload"),
        pytest.param([*OPEN, encode(StreamStart(5, True))], None, id="stream-start"),
        pytest.param([*OPEN, encode(StreamStop())], "E", id="stream-stop"),
        pytest.param(
            [*OPEN, encode(Delete(None, 1, None, tup("1", None))) + b"N"], "D", id="delete-trailing"
        ),
        pytest.param([*OPEN, encode(Commit(0, LSN(100), LSN(108), 0))[:-1]], "C", id="commit-short"),
        pytest.param([BEGIN + b"\0"], "B", id="begin-long"),
        pytest.param([*OPEN, b"I\0\0\0\x01N\0\x02t\0\0\0\x011"], "I", id="insert-missing-column"),
        pytest.param([*OPEN, b"U\0\0\0\x01K\0\x02t\0\0\0\x011nX\0\x02nn"], "U", id="update-bad-new-tag"),
        pytest.param([*OPEN, b"I\0\0\0\x01N\0\x02t\0\0\0\x011x"], "I", id="kind-x"),
        pytest.param([*OPEN, b"D\0\0\0\x01K\0\x02t\x7f\xff\xff\xff1n"], "D", id="huge-value-length"),
    ],
)
def test_malformed_examples(payloads: list[bytes], tag: str | None) -> None:
    with pytest.raises((DecodeError, Invalid)):
        reference(payloads, SchemaVersions())
    for bounds in ([0, len(payloads)], list(range(len(payloads) + 1))):
        with pytest.raises(DecodeError) as info:
            run_batcher(payloads, bounds)
        if tag is not None:
            assert info.value.tag == tag


# ---- edge cases that were bugs once ---------------------------------------------------------


def test_bad_utf8_error_names_the_payload() -> None:
    payloads = in_tx(Insert(None, 1, TupleData(b"tt", (b"1", b"ab\xff"))))
    with pytest.raises(DecodeError) as info:
        ColumnBatcher(SchemaVersions()).feed(payloads)
    assert info.value.tag == "I"


def test_bad_utf8_raises_decode_error() -> None:
    for bad in BAD_UTF8:
        for message in (
            Insert(None, 1, TupleData(b"tt", (b"1", bad))),
            Update(None, 1, None, TupleData(b"tn", (bad, None)), tup("1", "a")),
            Delete(None, 1, TupleData(b"tt", (bad, b"x")), None),
        ):
            with pytest.raises(DecodeError):
                ColumnBatcher(SchemaVersions()).feed(in_tx(message))


def test_column_named_tix_is_kept() -> None:
    r = rel(1, col("id", True), col("_tix"))
    payloads = [encode(m) for m in tx(100, 5, [r, Insert(None, 1, tup("1", "x"))])]
    [(_, table)] = ColumnBatcher(SchemaVersions()).feed(payloads)
    assert table.column_names == segment_schema(column_infos(r.columns)).names
    assert table.column("_tix").to_pylist() == ["x"]


def test_column_named_like_a_changelog_column_raises_a_typed_error() -> None:
    r = rel(1, col("id", True), col("_op"))
    payloads = [encode(m) for m in tx(100, 5, [r, Insert(None, 1, tup("1", "x"))])]
    with pytest.raises(PgSyncError):
        ColumnBatcher(SchemaVersions()).feed(payloads)


def test_schema_is_exactly_segment_schema() -> None:
    payloads = in_tx(Insert(None, 1, tup("1", "a")))
    [(tv, table)] = ColumnBatcher(SchemaVersions()).feed(payloads)
    assert table.schema == segment_schema(column_infos(tv.relation.columns))


@pytest.mark.parametrize("short", [b"I", b"U\0", b"D\0\0\0"])
def test_short_change_payload_at_the_end_of_a_fetch(short: bytes) -> None:
    with pytest.raises(DecodeError):
        ColumnBatcher(SchemaVersions()).feed([BEGIN, short])


@pytest.mark.parametrize("tiny", [b"I\0\0\0\x01N", b"I"])
def test_short_fetch_inside_an_open_transaction(tiny: bytes) -> None:
    batcher = ColumnBatcher(SchemaVersions())
    batcher.feed(OPEN)
    with pytest.raises(DecodeError):
        batcher.feed([tiny])


@pytest.mark.parametrize("lsn", [2**53 + 1, 2**63 + 1])
def test_lsn_above_2_53(lsn: int) -> None:
    messages: list[Message] = [Begin(LSN(lsn), 0, 1), R, INS, Commit(0, LSN(lsn), LSN(lsn + 10), 0)]
    payloads = [encode(m) for m in messages]
    out = check_chunkings(payloads, [2])
    assert out.rows[(1, 0)][0][1] == ("_commit_lsn", lsn)


# ---- 64-bit xids ------------------------------------------------------------------------------

FULL = 1 << 32


@PROPERTY
@given(
    reference=st.integers(1 << 31, 1 << 62),
    ages=st.lists(st.integers(0, (1 << 31) - 1), min_size=1, max_size=12),
    cuts=st.lists(st.integers(1, 60), max_size=6),
)
def test_xids_are_widened_to_64_bits(reference: int, ages: list[int], cuts: list[int]) -> None:
    """With a reference read with the peek's bound, ``_xid`` holds each transaction's exact
    64-bit xid (every one less than 2^31 below the reference), also for a transaction
    carried from one fetch into the next."""
    exact = [reference - 1 - age for age in ages]
    messages: list[Message] = [R]
    for k, xid in enumerate(exact):
        messages += tx(1000 + 100 * k, xid & (FULL - 1), [Insert(None, 1, tup(str(k), "a"))])
    payloads = [encode(m) for m in messages]
    batcher = ColumnBatcher(SchemaVersions(), xid_reference=reference)
    bounds = sorted({min(c, len(payloads)) for c in cuts} | {len(payloads)})
    got: list[int] = []
    start = 0
    for stop in bounds:
        for _, table in batcher.feed(payloads[start:stop]):
            got += table.column("_xid").to_pylist()
        start = stop
    assert got == exact


def test_xids_across_an_epoch_boundary() -> None:
    reference = 3 * FULL + 5  # the next xid has just wrapped into epoch 3
    messages: list[Message] = [R]
    for k, xid in enumerate([FULL - 2, FULL - 1, 0, 3]):
        messages += tx(1000 + 100 * k, xid, [Insert(None, 1, tup(str(k), "a"))])
    [(_, table)] = ColumnBatcher(SchemaVersions(), xid_reference=reference).feed(
        [encode(m) for m in messages]
    )
    assert table.column("_xid").to_pylist() == [3 * FULL - 2, 3 * FULL - 1, 3 * FULL, 3 * FULL + 3]
    [(_, plain)] = ColumnBatcher(SchemaVersions()).feed([encode(m) for m in messages])
    assert plain.column("_xid").to_pylist() == [FULL - 2, FULL - 1, 0, 3]  # without a reference: as sent


def test_arrow_payloads_are_the_buffers_of_the_fetched_array() -> None:
    payloads = [b"a", b"", b"bcd", b"\x00\xff"]
    for large in (False, True):
        data, lens = arrow_payloads(_as_fetched(payloads, large=large))
        assert (data, lens.tolist()) == (b"".join(payloads), [1, 0, 3, 2])
    empty = arrow_payloads(pa.array([], pa.binary()))
    assert (empty[0], empty[1].tolist()) == (b"", [])
    with pytest.raises(ValueError, match="NULL payload"):
        arrow_payloads(pa.array([b"a", None], pa.binary()))
