"""Decode pgoutput logical replication messages, protocol versions 1 and 2.

Hand-written because no maintained Python library decodes pgoutput: database drivers
only carry the payloads of a replication connection. The format is small and stable,
and the capture stage needs a decoder that is fast and never fails in an untyped way.

Speed: Insert, Update, Delete and their TupleData are on the hot path, so they use
precompiled ``struct`` unpackers, a dispatch dict on the tag byte, plain lists and
explicit integer bounds checks instead of per-field helper objects.

Errors: every malformed payload raises DecodeError naming the tag and a byte offset.
The offset is the start of the field that cannot be read: for a payload cut short, the
field in which it ends (so any truncation of a valid payload reports the field it cut);
for a bad value (negative length, unknown letter, bad UTF-8), where that value starts
(the first bad byte for UTF-8); for trailing bytes, the first extra byte.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct, calcsize
from typing import NamedTuple

from airflow_provider_pgsync.errors import ConfigError, DecodeError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.pgoutput.messages import (
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
)

SUPPORTED_VERSIONS = (1, 2)
_REPLICA_IDENTITIES = frozenset(b"dnfi")

_i16 = Struct("!h").unpack_from
_i32 = Struct("!i").unpack_from
_u32 = Struct("!I").unpack_from


class _Layout(NamedTuple):
    """A run of fixed-size fields read with one unpack, with names for errors."""

    unpack: Callable[[bytes, int], tuple[int, ...]]
    size: int
    fields: tuple[tuple[str, int], ...]


def _layout(fmt: str, *names: str) -> _Layout:
    sizes = [calcsize("!" + code) for code in fmt]
    return _Layout(Struct("!" + fmt).unpack_from, sum(sizes), tuple(zip(names, sizes, strict=True)))


_BEGIN = _layout("QqI", "final_lsn", "commit_ts", "xid")
_COMMIT = _layout("BQQq", "flags", "commit_lsn", "end_lsn", "commit_ts")
_ORIGIN = _layout("Q", "commit_lsn")
_MESSAGE = _layout("BQ", "flags", "lsn")
_OID = _layout("I", "relation id")
_TYPE_OID = _layout("I", "type id")
_COLUMN_TYPE = _layout("Ii", "column type oid", "column type modifier")
_TRUNCATE = _layout("iB", "relation count", "options")
_STREAM_START = _layout("IB", "xid", "first_segment")
_STREAM_COMMIT = _layout("IBQQq", "xid", "flags", "commit_lsn", "end_lsn", "commit_ts")
_STREAM_ABORT = _layout("II", "xid", "subxid")


def _error(data: bytes, reason: str, offset: int) -> DecodeError:
    return DecodeError(reason, tag=chr(data[0]) if data else None, offset=offset)


def _fixed(data: bytes, pos: int, layout: _Layout) -> tuple[int, ...]:
    if pos + layout.size <= len(data):
        return layout.unpack(data, pos)
    for name, size in layout.fields:
        if pos + size > len(data):
            raise _error(data, f"payload ends inside {name}", pos)
        pos += size
    raise AssertionError("unreachable")  # pragma: no cover


def _string(data: bytes, pos: int, what: str) -> tuple[str, int]:
    end = data.find(b"\0", pos)
    if end < 0:
        raise _error(data, f"{what} has no terminating zero byte", pos)
    try:
        return data[pos:end].decode("utf-8"), end + 1
    except UnicodeDecodeError as exc:
        raise _error(data, f"{what} is not valid UTF-8", pos + exc.start) from None


def _tuple(data: bytes, pos: int) -> tuple[TupleData, int]:
    """TupleData at pos; the hot path, so checks are inlined integer comparisons."""
    n = len(data)
    if pos + 2 > n:
        raise _error(data, "payload ends inside the tuple column count", pos)
    (ncols,) = _i16(data, pos)
    if ncols < 0:
        raise _error(data, f"negative tuple column count {ncols}", pos)
    pos += 2
    kinds = bytearray(ncols)
    values: list[bytes | None] = [None] * ncols
    for i in range(ncols):
        if pos >= n:
            raise _error(data, f"payload ends before tuple column {i}", pos)
        kind = kinds[i] = data[pos]
        if kind == 116 or kind == 98:  # 't' text, 'b' binary
            if pos + 5 > n:
                raise _error(data, f"payload ends inside the length of tuple column {i}", pos + 1)
            (length,) = _i32(data, pos + 1)
            start = pos + 5
            pos = start + length
            if length < 0 or pos > n:
                raise _bad_value(data, i, length, start)
            values[i] = data[start:pos]
        elif kind == 110 or kind == 117:  # 'n' null, 'u' unchanged TOAST: no value
            pos += 1
        else:
            raise _error(data, f"unknown kind {bytes([kind])!r} of tuple column {i}", pos)
    return TupleData(bytes(kinds), tuple(values)), pos


def _bad_value(data: bytes, column: int, length: int, start: int) -> DecodeError:
    if length < 0:
        return _error(data, f"negative length {length} of tuple column {column}", start - 4)
    return _error(data, f"payload ends inside the {length}-byte value of tuple column {column}", start)


def _short_head(data: bytes, pos: int, expected: bytes) -> DecodeError:
    """The error for a change whose relation id and sub-tag could not be read."""
    if pos + 4 > len(data):
        return _error(data, "payload ends inside relation id", pos)
    if pos + 4 == len(data):
        return _error(data, "payload ends before the tuple sub-tag", pos + 4)
    return _error(
        data, f"expected one of {expected!r} before the tuple, got {data[pos + 4 : pos + 5]!r}", pos + 4
    )


def _trailing(data: bytes, pos: int) -> DecodeError:
    return _error(data, f"{len(data) - pos} trailing byte(s) after the message", pos)


def _end(data: bytes, pos: int) -> None:
    if pos != len(data):
        raise _trailing(data, pos)


def _sub_tag(data: bytes, pos: int, what: str) -> int:
    if pos >= len(data):
        raise _error(data, f"payload ends before the {what}", pos)
    return data[pos]


# Messages that carry an xid only inside a stream block: (data, pos, xid) -> message.
# Insert, Update and Delete are the hot path: their head is checked with one comparison.


def _insert(data: bytes, pos: int, xid: int | None) -> Message:
    if pos + 5 > len(data) or data[pos + 4] != 78:  # 'N'
        raise _short_head(data, pos, b"N")
    relation_id: int = _u32(data, pos)[0]
    new, end = _tuple(data, pos + 5)
    if end != len(data):
        raise _trailing(data, end)
    return Insert(xid, relation_id, new)


def _update(data: bytes, pos: int, xid: int | None) -> Message:
    if pos + 5 > len(data) or data[pos + 4] not in b"KON":
        raise _short_head(data, pos, b"KON")
    relation_id: int = _u32(data, pos)[0]
    sub = data[pos + 4]
    pos += 5
    old = key = None
    if sub != 78:  # 'K' key tuple or 'O' old tuple, then 'N'
        before, pos = _tuple(data, pos)
        if sub == 75:
            key = before
        else:
            old = before
        if _sub_tag(data, pos, "'N' of the new tuple") != 78:
            raise _error(data, f"expected b'N' before the new tuple, got {data[pos : pos + 1]!r}", pos)
        pos += 1
    new, end = _tuple(data, pos)
    if end != len(data):
        raise _trailing(data, end)
    return Update(xid, relation_id, old, key, new)


def _delete(data: bytes, pos: int, xid: int | None) -> Message:
    if pos + 5 > len(data) or data[pos + 4] not in b"KO":
        raise _short_head(data, pos, b"KO")
    relation_id: int = _u32(data, pos)[0]
    sub = data[pos + 4]
    before, end = _tuple(data, pos + 5)
    if end != len(data):
        raise _trailing(data, end)
    if sub == 75:
        return Delete(xid, relation_id, None, before)
    return Delete(xid, relation_id, before, None)


# pgoutput sends an empty namespace for pg_catalog (the protocol's message formats)
_CATALOG = "pg_catalog"


def _relation(data: bytes, pos: int, xid: int | None) -> Message:
    (relation_id,) = _fixed(data, pos, _OID)
    namespace, pos = _string(data, pos + 4, "namespace")
    start = pos
    name, pos = _string(data, pos, "relation name")
    if not name:
        raise _error(data, "empty relation name", start)
    identity = _sub_tag(data, pos, "replica identity")
    if identity not in _REPLICA_IDENTITIES:
        raise _error(data, f"unknown replica identity {bytes([identity])!r}", pos)
    pos += 1
    if pos + 2 > len(data):
        raise _error(data, "payload ends inside the column count", pos)
    (ncols,) = _i16(data, pos)
    if ncols < 0:
        raise _error(data, f"negative column count {ncols}", pos)
    pos += 2
    columns = []
    for i in range(ncols):
        flags = _sub_tag(data, pos, f"flags of column {i}")
        column_name, pos = _string(data, pos + 1, f"name of column {i}")
        type_oid, type_modifier = _fixed(data, pos, _COLUMN_TYPE)
        pos += 8
        columns.append(RelationColumn(flags, column_name, type_oid, type_modifier))
    _end(data, pos)
    return Relation(xid, relation_id, namespace or _CATALOG, name, chr(identity), tuple(columns))


def _type(data: bytes, pos: int, xid: int | None) -> Message:
    (type_id,) = _fixed(data, pos, _TYPE_OID)
    namespace, pos = _string(data, pos + 4, "namespace")
    name, pos = _string(data, pos, "type name")
    _end(data, pos)
    return Type(xid, type_id, namespace or _CATALOG, name)


def _truncate(data: bytes, pos: int, xid: int | None) -> Message:
    count, options = _fixed(data, pos, _TRUNCATE)
    if count < 0:
        raise _error(data, f"negative relation count {count}", pos)
    pos += 5
    available = (len(data) - pos) // 4
    if count > available:
        raise _error(data, f"payload ends inside relation id {available} of {count}", pos + 4 * available)
    ids = Struct(f"!{count}I").unpack_from(data, pos)
    _end(data, pos + 4 * count)
    return Truncate(xid, options, ids)


def _message(data: bytes, pos: int, xid: int | None) -> Message:
    flags, lsn = _fixed(data, pos, _MESSAGE)
    prefix, pos = _string(data, pos + 9, "prefix")
    if pos + 4 > len(data):
        raise _error(data, "payload ends inside the content length", pos)
    (length,) = _i32(data, pos)
    if length < 0:
        raise _error(data, f"negative content length {length}", pos)
    pos += 4
    if pos + length > len(data):
        raise _error(data, f"payload ends inside the {length}-byte content", pos)
    _end(data, pos + length)
    return LogicalMessage(xid, flags, LSN(lsn), prefix, data[pos : pos + length])


# Messages without an xid prefix: (data) -> message; the fields start at byte 1.


def _begin(data: bytes) -> Message:
    final_lsn, commit_ts, xid = _fixed(data, 1, _BEGIN)
    _end(data, 1 + _BEGIN.size)
    return Begin(LSN(final_lsn), commit_ts, xid)


def _commit(data: bytes) -> Message:
    flags, commit_lsn, end_lsn, commit_ts = _fixed(data, 1, _COMMIT)
    _end(data, 1 + _COMMIT.size)
    return Commit(flags, LSN(commit_lsn), LSN(end_lsn), commit_ts)


def _origin(data: bytes) -> Message:
    (commit_lsn,) = _fixed(data, 1, _ORIGIN)
    name, pos = _string(data, 9, "origin name")
    _end(data, pos)
    return Origin(LSN(commit_lsn), name)


def _stream_start(data: bytes) -> Message:
    xid, first = _fixed(data, 1, _STREAM_START)
    if first > 1:
        raise _error(data, f"first_segment must be 0 or 1, got {first}", 5)
    _end(data, 1 + _STREAM_START.size)
    return StreamStart(xid, first == 1)


def _stream_stop(data: bytes) -> Message:
    _end(data, 1)
    return StreamStop()


def _stream_commit(data: bytes) -> Message:
    xid, flags, commit_lsn, end_lsn, commit_ts = _fixed(data, 1, _STREAM_COMMIT)
    _end(data, 1 + _STREAM_COMMIT.size)
    return StreamCommit(xid, flags, LSN(commit_lsn), LSN(end_lsn), commit_ts)


def _stream_abort(data: bytes) -> Message:
    xid, subxid = _fixed(data, 1, _STREAM_ABORT)
    _end(data, 1 + _STREAM_ABORT.size)
    return StreamAbort(xid, subxid)


_WITH_XID: dict[int, Callable[[bytes, int, int | None], Message]] = {
    ord("I"): _insert,
    ord("U"): _update,
    ord("D"): _delete,
    ord("R"): _relation,
    ord("Y"): _type,
    ord("T"): _truncate,
    ord("M"): _message,
}
_PLAIN: dict[int, Callable[[bytes], Message]] = {
    ord("B"): _begin,
    ord("C"): _commit,
    ord("O"): _origin,
}
_STREAM_S, _STREAM_E = ord("S"), ord("E")
_STREAM_NAMES = {ord("S"): "Stream Start", ord("c"): "Stream Commit", ord("A"): "Stream Abort"}
_STREAM: dict[int, Callable[[bytes], Message]] = {
    _STREAM_S: _stream_start,
    _STREAM_E: _stream_stop,
    ord("c"): _stream_commit,
    ord("A"): _stream_abort,
}


def _decode(data: bytes, version: int, in_stream: bool) -> Message:
    if not data:
        raise DecodeError("empty payload", tag=None, offset=0)
    tag = data[0]
    with_xid = _WITH_XID.get(tag)
    if with_xid is not None:
        if not in_stream:
            return with_xid(data, 1, None)
        if len(data) < 5:
            raise _error(data, "payload ends inside the xid", 1)
        return with_xid(data, 5, _u32(data, 1)[0])
    plain = _PLAIN.get(tag)
    if plain is not None:
        return plain(data)
    stream = _STREAM.get(tag)
    if stream is None:
        raise _error(data, "unknown message tag", 0)
    if version < 2:
        raise _error(data, "stream messages need protocol version 2", 0)
    if in_stream:
        if tag != _STREAM_E:
            raise _error(data, f"{_STREAM_NAMES[tag]} inside a stream block", 0)
    elif tag == _STREAM_E:
        raise _error(data, "Stream Stop outside a stream block", 0)
    return stream(data)


def _check_version(protocol_version: int) -> None:
    if protocol_version not in SUPPORTED_VERSIONS:
        raise ConfigError(f"pgoutput protocol version {protocol_version!r} is not supported; use 1 or 2")


def decode_message(data: bytes, *, protocol_version: int = 2, in_stream: bool = False) -> Message:
    """Decode one pgoutput payload (the data of one XLogData message).

    ``in_stream`` says whether the payload was sent between Stream Start and Stream
    Stop, where Relation, Type, Insert, Update, Delete, Truncate and Message carry an
    xid. Raises DecodeError for a malformed payload or a stream message out of place,
    ConfigError for an unsupported protocol version or in_stream under version 1.
    """
    _check_version(protocol_version)
    if in_stream and protocol_version < 2:
        raise ConfigError("in_stream needs pgoutput protocol version 2")
    if type(data) is not bytes:
        data = bytes(data)
    return _decode(data, protocol_version, in_stream)


class PgOutputDecoder:
    """Decodes a sequence of pgoutput payloads, tracking Stream Start ... Stream Stop."""

    __slots__ = ("_in_stream", "_version")

    def __init__(self, protocol_version: int = 2) -> None:
        _check_version(protocol_version)
        self._version = protocol_version
        self._in_stream = False

    @property
    def protocol_version(self) -> int:
        """The pgoutput protocol version the payloads were requested with."""
        return self._version

    @property
    def in_stream(self) -> bool:
        """Whether the last payload left the decoder inside a stream block."""
        return self._in_stream

    def decode(self, data: bytes) -> Message:
        """Decode the next payload; a DecodeError leaves the stream state unchanged."""
        if type(data) is not bytes:
            data = bytes(data)
        message = _decode(data, self._version, self._in_stream)
        kind = type(message)
        if kind is StreamStart:
            self._in_stream = True
        elif kind is StreamStop:
            self._in_stream = False
        return message
