"""A test-only pgoutput ENCODER: builds payloads from message objects, recording fields.

It writes the optional stream xid exactly when the message's ``xid`` is not None, so a
payload it builds decodes with ``in_stream=msg.xid is not None``. Besides the bytes it
records the span of every field, which tells the tests the exact offset a decoder must
report when the payload is cut short inside that field.
"""

from __future__ import annotations

import struct

from airflow_provider_pgsync.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
)


class Writer:
    """Appends big-endian fields to a buffer and remembers where each one is."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.spans: list[tuple[int, int]] = []

    def raw(self, data: bytes) -> None:
        start = len(self.buf)
        self.buf += data
        if data:
            self.spans.append((start, len(self.buf)))

    def pack(self, fmt: str, value: int) -> None:
        self.raw(struct.pack("!" + fmt, value))

    def string(self, text: str) -> None:
        self.raw(text.encode("utf-8") + b"\0")

    def xid(self, xid: int | None) -> None:
        if xid is not None:
            self.pack("I", xid)

    def tuple_data(self, tup: TupleData) -> None:
        self.pack("h", len(tup.kinds))
        for kind, value in zip(tup.kinds, tup.values, strict=True):
            self.raw(bytes([kind]))
            if value is not None:
                self.pack("i", len(value))
                self.raw(value)


def _write(w: Writer, msg: Message) -> None:
    match msg:
        case Begin():
            w.raw(b"B")
            w.pack("Q", msg.final_lsn.value)
            w.pack("q", msg.commit_ts)
            w.pack("I", msg.xid)
        case Commit():
            w.raw(b"C")
            w.pack("B", msg.flags)
            w.pack("Q", msg.commit_lsn.value)
            w.pack("Q", msg.end_lsn.value)
            w.pack("q", msg.commit_ts)
        case Origin():
            w.raw(b"O")
            w.pack("Q", msg.commit_lsn.value)
            w.string(msg.name)
        case Relation():
            w.raw(b"R")
            w.xid(msg.xid)
            w.pack("I", msg.relation_id)
            w.string("" if msg.namespace == "pg_catalog" else msg.namespace)  # as the server sends it
            w.string(msg.relation_name)
            w.raw(msg.replica_identity.encode("ascii"))
            w.pack("h", len(msg.columns))
            for col in msg.columns:
                w.pack("B", col.flags)
                w.string(col.name)
                w.pack("I", col.type_oid)
                w.pack("i", col.type_modifier)
        case Type():
            w.raw(b"Y")
            w.xid(msg.xid)
            w.pack("I", msg.type_id)
            w.string("" if msg.namespace == "pg_catalog" else msg.namespace)
            w.string(msg.name)
        case Insert():
            w.raw(b"I")
            w.xid(msg.xid)
            w.pack("I", msg.relation_id)
            w.raw(b"N")
            w.tuple_data(msg.new_tuple)
        case Update():
            w.raw(b"U")
            w.xid(msg.xid)
            w.pack("I", msg.relation_id)
            if msg.key_tuple is not None:
                w.raw(b"K")
                w.tuple_data(msg.key_tuple)
            elif msg.old_tuple is not None:
                w.raw(b"O")
                w.tuple_data(msg.old_tuple)
            w.raw(b"N")
            w.tuple_data(msg.new_tuple)
        case Delete():
            w.raw(b"D")
            w.xid(msg.xid)
            w.pack("I", msg.relation_id)
            if msg.key_tuple is not None:
                w.raw(b"K")
                w.tuple_data(msg.key_tuple)
            else:
                assert msg.old_tuple is not None, "a Delete needs key_tuple or old_tuple"
                w.raw(b"O")
                w.tuple_data(msg.old_tuple)
        case Truncate():
            w.raw(b"T")
            w.xid(msg.xid)
            w.pack("i", len(msg.relation_ids))
            w.pack("B", msg.options)
            for relation_id in msg.relation_ids:
                w.pack("I", relation_id)
        case LogicalMessage():
            w.raw(b"M")
            w.xid(msg.xid)
            w.pack("B", msg.flags)
            w.pack("Q", msg.lsn.value)
            w.string(msg.prefix)
            w.pack("i", len(msg.content))
            w.raw(msg.content)
        case StreamStart():
            w.raw(b"S")
            w.pack("I", msg.xid)
            w.pack("B", int(msg.first_segment))
        case StreamStop():
            w.raw(b"E")
        case StreamCommit():
            w.raw(b"c")
            w.pack("I", msg.xid)
            w.pack("B", msg.flags)
            w.pack("Q", msg.commit_lsn.value)
            w.pack("Q", msg.end_lsn.value)
            w.pack("q", msg.commit_ts)
        case StreamAbort():
            w.raw(b"A")
            w.pack("I", msg.xid)
            w.pack("I", msg.subxid)


def encode_with_spans(msg: Message) -> tuple[bytes, list[tuple[int, int]]]:
    """The payload of msg and the (start, end) span of each of its non-empty fields."""
    w = Writer()
    _write(w, msg)
    return bytes(w.buf), w.spans


def encode(msg: Message) -> bytes:
    """The payload of msg, as pgoutput would send it."""
    return encode_with_spans(msg)[0]


def in_stream_for(msg: Message) -> bool:
    """The decoding context a payload built by this encoder needs."""
    if isinstance(msg, StreamStop):
        return True
    if isinstance(msg, Relation | Type | Insert | Update | Delete | Truncate | LogicalMessage):
        return msg.xid is not None
    return False


def field_start(spans: list[tuple[int, int]], offset: int) -> int:
    """The start of the field that holds byte ``offset``."""
    for start, end in spans:
        if start <= offset < end:
            return start
    raise AssertionError(f"no field holds byte {offset}")
