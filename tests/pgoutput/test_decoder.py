"""Tests of the pgoutput decoder: every message, every tuple kind, streams, malformed input."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pgoutput import (
    LSN,
    Begin,
    Commit,
    DecodeError,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    PgOutputDecoder,
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

from .wire import encode, encode_with_spans, field_start, in_stream_for

GOLDEN_DIR = Path(__file__).parent / "golden"

# 2024-01-01 00:00:00.123456 UTC in microseconds since 2000-01-01 UTC.
TS_HEX = "0002b0d5d4eb2240"
TS = 757_382_400_123_456
LSN_HEX, LSN_A = "0000000116b37480", LSN.parse("1/16B37480")
LSN2_HEX, LSN_B = "0000000116b374b0", LSN.parse("1/16B374B0")
XID_HEX, XID = "000002ee", 750
REL_HEX, REL = "00004000", 16384

ONE_TEXT = TupleData(b"t", (b"7",))


def h(hex_text: str) -> bytes:
    return bytes.fromhex(hex_text.replace(" ", ""))


def i16(v: int) -> bytes:
    return struct.pack("!h", v)


def i32(v: int) -> bytes:
    return struct.pack("!i", v)


def u32(v: int) -> bytes:
    return struct.pack("!I", v)


def u64(v: int) -> bytes:
    return struct.pack("!Q", v)


# Hand-written payloads, byte by byte, with the message each must decode to.
LITERALS: list[tuple[str, bytes, Message]] = [
    ("begin", h("42" + LSN_HEX + TS_HEX + XID_HEX), Begin(LSN_A, TS, XID)),
    ("commit", h("43 00" + LSN_HEX + LSN2_HEX + TS_HEX), Commit(0, LSN_A, LSN_B, TS)),
    ("origin", h("4f 0000000000000010") + b"origin1\0", Origin(LSN(16), "origin1")),
    (
        "relation",
        h("52" + REL_HEX)
        + b"public\0users\0d"
        + h("0002")
        + b"\x01id\0"
        + h("00000017 ffffffff")
        + b"\x00name\0"
        + h("00000413 00000044"),
        Relation(
            None,
            REL,
            "public",
            "users",
            "d",
            (RelationColumn(1, "id", 23, -1), RelationColumn(0, "name", 1043, 68)),
        ),
    ),
    ("type", h("59 00004001") + b"public\0mood\0", Type(None, 16385, "public", "mood")),
    (
        "insert",
        h("49" + REL_HEX + "4e 0004 74 00000002 3432 62 00000003 000102 6e 75"),
        Insert(None, REL, TupleData(b"tbnu", (b"42", b"\x00\x01\x02", None, None))),
    ),
    ("update", h("55" + REL_HEX + "4e 0001 74 00000001 37"), Update(None, REL, None, None, ONE_TEXT)),
    (
        "update-key",
        h("55" + REL_HEX + "4b 0002 74 00000001 31 6e 4e 0002 74 00000001 31 75"),
        Update(None, REL, None, TupleData(b"tn", (b"1", None)), TupleData(b"tu", (b"1", None))),
    ),
    (
        "update-old",
        h("55" + REL_HEX + "4f 0001 74 00000001 31 4e 0001 74 00000001 37"),
        Update(None, REL, TupleData(b"t", (b"1",)), None, ONE_TEXT),
    ),
    ("delete-key", h("44" + REL_HEX + "4b 0001 74 00000001 37"), Delete(None, REL, None, ONE_TEXT)),
    ("delete-old", h("44" + REL_HEX + "4f 0001 74 00000001 37"), Delete(None, REL, ONE_TEXT, None)),
    ("truncate", h("54 00000002 03 00004000 00004001"), Truncate(None, 3, (16384, 16385))),
    (
        "message",
        h("4d 01" + LSN_HEX) + b"pgsync\0" + h("00000003 610062"),
        LogicalMessage(None, 1, LSN_A, "pgsync", b"a\0b"),
    ),
    ("stream-start", h("53" + XID_HEX + "01"), StreamStart(XID, True)),
    ("stream-stop", h("45"), StreamStop()),
    (
        "stream-commit",
        h("63" + XID_HEX + "00" + LSN_HEX + LSN2_HEX + TS_HEX),
        StreamCommit(XID, 0, LSN_A, LSN_B, TS),
    ),
    ("stream-abort", h("41" + XID_HEX + "000002ef"), StreamAbort(XID, 751)),
    # Inside a stream block the changes carry the xid right after the tag.
    ("insert-in-stream", h("49" + XID_HEX + REL_HEX + "4e 0001 74 00000001 37"), Insert(XID, REL, ONE_TEXT)),
    (
        "update-in-stream",
        h("55" + XID_HEX + REL_HEX + "4e 0001 74 00000001 37"),
        Update(XID, REL, None, None, ONE_TEXT),
    ),
    (
        "delete-in-stream",
        h("44" + XID_HEX + REL_HEX + "4b 0001 74 00000001 37"),
        Delete(XID, REL, None, ONE_TEXT),
    ),
    (
        "relation-in-stream",
        h("52" + XID_HEX + REL_HEX) + b"s\0t\0f" + h("0000"),
        Relation(XID, REL, "s", "t", "f", ()),
    ),
    ("type-in-stream", h("59" + XID_HEX + "00004001") + b"s\0t\0", Type(XID, 16385, "s", "t")),
    ("truncate-in-stream", h("54" + XID_HEX + "00000001 00 00004000"), Truncate(XID, 0, (16384,))),
    (
        "message-in-stream",
        h("4d" + XID_HEX + "00" + LSN_HEX) + b"p\0" + h("00000000"),
        LogicalMessage(XID, 0, LSN_A, "p", b""),
    ),
]

# More shapes for the truncation and trailing-byte tests, built with the test encoder.
EXTRA: list[Message] = [
    Insert(None, 1, TupleData(b"", ())),
    Insert(None, 1, TupleData(b"tt", (b"", b"x"))),
    Insert(4_294_967_295, 4_294_967_295, TupleData(b"bn", (b"\xff" * 20, None))),
    Relation(None, 7, "ns", "ünïcødé", "i", (RelationColumn(0, "c", 25, -1),) * 3),
    Truncate(None, 0, ()),
    LogicalMessage(None, 0, LSN(0), "", b""),
    Origin(LSN(1), ""),
    Delete(9, 2, TupleData(b"nu", (None, None)), None),
]
SAMPLES = [msg for _, _, msg in LITERALS] + EXTRA
SAMPLE_IDS = [name for name, _, _ in LITERALS] + [f"extra-{i}" for i in range(len(EXTRA))]


def assert_decode_error(
    payload: bytes,
    *,
    tag: str | None,
    offset: int,
    match: str | None = None,
    in_stream: bool = False,
    protocol_version: int = 2,
) -> DecodeError:
    with pytest.raises(DecodeError, match=match) as info:
        decode_message(payload, protocol_version=protocol_version, in_stream=in_stream)
    assert (info.value.tag, info.value.offset) == (tag, offset), info.value
    return info.value


# --- valid messages ---------------------------------------------------------------------


@pytest.mark.parametrize(("name", "payload", "expected"), LITERALS, ids=[n for n, _, _ in LITERALS])
def test_decodes_hand_written_payload(name: str, payload: bytes, expected: Message) -> None:
    in_stream = name.endswith("-in-stream") or name == "stream-stop"
    assert decode_message(payload, in_stream=in_stream) == expected


@pytest.mark.parametrize(("name", "payload", "expected"), LITERALS, ids=[n for n, _, _ in LITERALS])
def test_test_encoder_matches_hand_written_payload(name: str, payload: bytes, expected: Message) -> None:
    assert encode(expected) == payload


def test_begin_and_commit_fields() -> None:
    begin = decode_message(h("42" + LSN_HEX + TS_HEX + XID_HEX))
    assert isinstance(begin, Begin)
    assert str(begin.final_lsn) == "1/16B37480"
    assert begin.commit_time == datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    commit = decode_message(h("43 00" + LSN_HEX + LSN2_HEX + "ffffffffffffffff"))
    assert isinstance(commit, Commit)
    assert commit.commit_ts == -1
    assert commit.commit_time == datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def test_commit_time_overflows_for_absurd_timestamps() -> None:
    commit = decode_message(h("43 00" + LSN_HEX + LSN2_HEX + "7fffffffffffffff"))
    assert isinstance(commit, Commit) and commit.commit_ts == 2**63 - 1
    with pytest.raises(OverflowError):
        _ = commit.commit_time


def test_unsigned_and_signed_fields() -> None:
    begin = decode_message(h("42 ffffffffffffffff 8000000000000000 ffffffff"))
    assert begin == Begin(LSN(2**64 - 1), -(2**63), 2**32 - 1)
    rel = decode_message(h("52 ffffffff") + b"a\0b\0n" + h("0001 ff") + b"c\0" + h("ffffffff 80000000"))
    assert rel == Relation(None, 2**32 - 1, "a", "b", "n", (RelationColumn(255, "c", 2**32 - 1, -(2**31)),))


def test_relation_column_key_flag() -> None:
    rel = decode_message(LITERALS[3][1])
    assert isinstance(rel, Relation)
    assert [(c.name, c.is_key) for c in rel.columns] == [("id", True), ("name", False)]


def test_tuple_data_helpers() -> None:
    msg = decode_message(h("49" + REL_HEX + "4e 0005 74 00000002 3432 62 00000001 00 6e 75 74 00000002 c3a9"))
    assert isinstance(msg, Insert)
    tup = msg.new_tuple
    assert len(tup) == 5
    assert tup.kinds == b"tbnut"
    assert [tup.kind(i) for i in range(5)] == ["t", "b", "n", "u", "t"]
    assert [tup.is_null(i) for i in range(5)] == [False, False, True, False, False]
    assert [tup.is_unchanged(i) for i in range(5)] == [False, False, False, True, False]
    assert tup.values == (b"42", b"\x00", None, None, b"\xc3\xa9")
    assert [tup.text(i) for i in (0, 2, 3, 4)] == ["42", None, None, "é"]
    with pytest.raises(ValueError, match="column 1 is in binary format"):
        tup.text(1)


def test_tuple_text_raises_decode_error_on_bad_utf8() -> None:
    tup = TupleData(b"tt", (b"ok", b"ab\xffc"))
    assert tup.text(0) == "ok"
    with pytest.raises(DecodeError, match="column 1 is not valid UTF-8") as info:
        tup.text(1)
    assert (info.value.tag, info.value.offset) == (None, 2)


def test_truncate_options() -> None:
    flags = []
    for options in range(4):
        msg = decode_message(h(f"54 00000000 {options:02x}"))
        assert isinstance(msg, Truncate) and msg.relation_ids == ()
        flags.append((msg.cascade, msg.restart_identity))
    assert flags == [(False, False), (True, False), (False, True), (True, True)]


def test_logical_message_transactional_flag() -> None:
    msg = decode_message(LITERALS[12][1])
    assert isinstance(msg, LogicalMessage) and msg.transactional
    msg = decode_message(h("4d 00" + LSN_HEX) + b"p\0" + h("00000000"))
    assert isinstance(msg, LogicalMessage) and not msg.transactional and msg.content == b""


def test_stream_start_first_segment() -> None:
    assert decode_message(h("53 00000001 00")) == StreamStart(1, False)
    assert decode_message(h("53 00000001 01")) == StreamStart(1, True)


def test_accepts_bytearray_and_memoryview() -> None:
    payload = LITERALS[5][1]
    expected = LITERALS[5][2]
    assert decode_message(bytearray(payload)) == expected  # type: ignore[arg-type]
    assert decode_message(memoryview(payload)) == expected  # type: ignore[arg-type]
    assert PgOutputDecoder().decode(bytearray(payload)) == expected  # type: ignore[arg-type]


def test_protocol_version_1_decodes_non_stream_messages() -> None:
    for name, payload, expected in LITERALS:
        if "stream" not in name:
            assert decode_message(payload, protocol_version=1) == expected


# --- stream blocks -----------------------------------------------------------------------


def test_same_bytes_decode_differently_inside_a_stream_block() -> None:
    payload = h("49 00000001 00004000 4e 0000")
    assert_decode_error(payload, tag="I", offset=5, match="expected one of b'N'")
    assert decode_message(payload, in_stream=True) == Insert(1, 16384, TupleData(b"", ()))


def test_decoder_tracks_stream_blocks() -> None:
    decoder = PgOutputDecoder()
    insert_in_stream = h("49" + XID_HEX + REL_HEX + "4e 0001 74 00000001 37")
    insert_plain = h("49" + REL_HEX + "4e 0001 74 00000001 37")
    assert decoder.protocol_version == 2
    assert not decoder.in_stream
    assert decoder.decode(insert_plain) == Insert(None, REL, ONE_TEXT)
    assert decoder.decode(h("53" + XID_HEX + "01")) == StreamStart(XID, True)
    assert decoder.in_stream
    assert decoder.decode(insert_in_stream) == Insert(XID, REL, ONE_TEXT)
    assert decoder.decode(h("4f 0000000000000010") + b"o\0") == Origin(LSN(16), "o")
    with pytest.raises(DecodeError):
        decoder.decode(insert_in_stream[:-1])
    assert decoder.in_stream, "a failed decode must not change the stream state"
    assert decoder.decode(h("45")) == StreamStop()
    assert not decoder.in_stream
    assert decoder.decode(h("63" + XID_HEX + "00" + LSN_HEX + LSN2_HEX + TS_HEX)) == StreamCommit(
        XID, 0, LSN_A, LSN_B, TS
    )
    assert decoder.decode(insert_plain) == Insert(None, REL, ONE_TEXT)


def test_decoder_rejects_bad_stream_sequences_without_changing_state() -> None:
    decoder = PgOutputDecoder()
    with pytest.raises(DecodeError, match="Stream Stop outside a stream block") as info:
        decoder.decode(b"E")
    assert (info.value.tag, info.value.offset) == ("E", 0)
    decoder.decode(h("53 00000001 01"))
    with pytest.raises(DecodeError, match="Stream Start inside a stream block") as info:
        decoder.decode(h("53 00000002 01"))
    assert (info.value.tag, info.value.offset) == ("S", 0)
    assert decoder.in_stream


@pytest.mark.parametrize(
    ("payload", "in_stream", "tag", "match"),
    [
        (h("53 00000001 01"), True, "S", "Stream Start inside a stream block"),
        (h("45"), False, "E", "Stream Stop outside a stream block"),
        (h("63" + XID_HEX + "00" + LSN_HEX + LSN2_HEX + TS_HEX), True, "c", "Stream Commit inside"),
        (h("41 00000001 00000001"), True, "A", "Stream Abort inside"),
    ],
)
def test_stream_messages_out_of_place(payload: bytes, in_stream: bool, tag: str, match: str) -> None:
    assert_decode_error(payload, tag=tag, offset=0, match=match, in_stream=in_stream)


@pytest.mark.parametrize("name", ["stream-start", "stream-stop", "stream-commit", "stream-abort"])
def test_stream_messages_need_protocol_version_2(name: str) -> None:
    payload = next(p for n, p, _ in LITERALS if n == name)
    assert_decode_error(
        payload, tag=chr(payload[0]), offset=0, match="protocol version 2", protocol_version=1
    )
    with pytest.raises(DecodeError, match="protocol version 2"):
        PgOutputDecoder(protocol_version=1).decode(payload)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_unsupported_protocol_versions(version: int) -> None:
    with pytest.raises(ConfigError, match=f"version {version} is not supported"):
        decode_message(b"E", protocol_version=version)
    with pytest.raises(ConfigError, match=f"version {version} is not supported"):
        PgOutputDecoder(version)


def test_in_stream_needs_protocol_version_2() -> None:
    with pytest.raises(ConfigError, match="in_stream needs pgoutput protocol version 2"):
        decode_message(b"E", protocol_version=1, in_stream=True)


# --- malformed input ---------------------------------------------------------------------


def test_empty_payload() -> None:
    assert_decode_error(b"", tag=None, offset=0, match="empty payload")
    with pytest.raises(DecodeError, match="empty payload"):
        PgOutputDecoder().decode(b"")


@pytest.mark.parametrize("tag", [b"Z", b"b", b"P", b"K", b"r", b"p", b"s", b"\x00", b"\xff"])
def test_unknown_tag(tag: bytes) -> None:
    """Includes the two-phase commit tags of protocol version 3 (b P K r p) and bad bytes."""
    assert_decode_error(tag + b"\0" * 30, tag=chr(tag[0]), offset=0, match="unknown message tag")


@pytest.mark.parametrize("msg", SAMPLES, ids=SAMPLE_IDS)
def test_truncated_at_every_offset(msg: Message) -> None:
    payload, spans = encode_with_spans(msg)
    in_stream = in_stream_for(msg)
    assert decode_message(payload, in_stream=in_stream) == msg
    for cut in range(len(payload)):
        tag = chr(payload[0]) if cut else None
        offset = field_start(spans, cut) if cut else 0
        assert_decode_error(payload[:cut], tag=tag, offset=offset, in_stream=in_stream)


@pytest.mark.parametrize("msg", SAMPLES, ids=SAMPLE_IDS)
def test_trailing_bytes(msg: Message) -> None:
    payload = encode(msg)
    for extra in (b"\0", b"N", b"\xff" * 9):
        assert_decode_error(
            payload + extra,
            tag=chr(payload[0]),
            offset=len(payload),
            match=f"{len(extra)} trailing byte",
            in_stream=in_stream_for(msg),
        )


INSERT_HEAD = b"I" + u32(REL) + b"N"  # the tuple starts at byte 6


@pytest.mark.parametrize(
    ("payload", "tag", "offset", "match", "in_stream"),
    [
        # negative lengths and counts: reported where the bad number is
        (INSERT_HEAD + i16(1) + b"t" + i32(-1), "I", 9, "negative length -1 of tuple column 0", False),
        (INSERT_HEAD + i16(1) + b"b" + i32(-(2**31)) + b"x", "I", 9, "negative length", False),
        (INSERT_HEAD + i16(-1), "I", 6, "negative tuple column count -1", False),
        (
            b"I" + u32(XID) + u32(REL) + b"N" + i16(1) + b"t" + i32(-5) + b"abc",
            "I",
            13,
            "negative length -5",
            True,
        ),
        (h("4d 00" + LSN_HEX) + b"p\0" + i32(-1), "M", 12, "negative content length -1", False),
        (h("54") + i32(-1) + b"\0", "T", 1, "negative relation count -1", False),
        (b"R" + u32(1) + b"a\0b\0d" + i16(-2), "R", 10, "negative column count -2", False),
        # oversized lengths and counts: reported where the missing data should start
        (INSERT_HEAD + i16(1) + b"t" + i32(1000) + b"ab", "I", 13, "1000-byte value of", False),
        (INSERT_HEAD + i16(1) + b"t" + i32(2**31 - 1), "I", 13, "inside the 2147483647-byte value", False),
        (INSERT_HEAD + i16(3) + b"nn", "I", 10, "before tuple column 2", False),
        (INSERT_HEAD + i16(32767) + b"u", "I", 9, "before tuple column 1", False),
        (h("4d 00" + LSN_HEX) + b"p\0" + i32(2**31 - 1) + b"xy", "M", 16, "2147483647-byte content", False),
        (h("54") + i32(10) + b"\0" + u32(1) + u32(2), "T", 14, "relation id 2 of 10", False),
        (h("54") + i32(2**31 - 1) + b"\0" + b"\1\2\3", "T", 6, "relation id 0 of 2147483647", False),
        (
            b"R" + u32(1) + b"a\0b\0d" + i16(5) + b"\0c\0" + u32(25) + i32(-1),
            "R",
            23,
            "flags of column 1",
            False,
        ),
        # missing string terminators: reported where the string starts
        (b"R" + u32(1) + b"public", "R", 5, "namespace has no terminating zero byte", False),
        (b"R" + u32(1) + b"public\0users", "R", 12, "relation name has no terminating", False),
        (b"R" + u32(1) + b"a\0b\0d" + i16(1) + b"\0col", "R", 13, "column 0 has no term", False),
        (b"O" + u64(5) + b"abc", "O", 9, "origin name has no terminating", False),
        (b"Y" + u32(XID) + u32(1) + b"ns\0name", "Y", 12, "type name has no terminating", True),
        (h("4d 00" + LSN_HEX) + b"prefix", "M", 10, "prefix has no terminating", False),
        # bad UTF-8 in names: reported at the first bad byte
        (b"R" + u32(1) + b"public\0us\xffers\0d" + i16(0), "R", 14, "relation name is not", False),
        (b"R" + u32(1) + b"\xc3\x28\0t\0d" + i16(0), "R", 5, "namespace is not valid UTF-8", False),
        (
            b"R" + u32(1) + b"a\0b\0d" + i16(1) + b"\0i\xc3\0" + u32(1) + i32(1),
            "R",
            14,
            "column 0 is not",
            False,
        ),
        (b"O" + u64(5) + b"ok\xed\xa0\x80\0", "O", 11, "origin name is not valid UTF-8", False),
        (b"Y" + u32(1) + b"\x80\0name\0", "Y", 5, "namespace is not valid UTF-8", False),
        (h("4d 00" + LSN_HEX) + b"\xfe\0" + i32(0), "M", 10, "prefix is not valid UTF-8", False),
        # bad letters
        (INSERT_HEAD + i16(2) + b"n" + b"x", "I", 9, "unknown kind b'x' of tuple column 1", False),
        (INSERT_HEAD + i16(1) + b"T" + i32(0), "I", 8, "unknown kind b'T' of tuple column 0", False),
        (b"I" + u32(REL) + b"K" + i16(0), "I", 5, "expected one of b'N'", False),
        (b"U" + u32(REL) + b"X" + i16(0), "U", 5, "expected one of b'KON'", False),
        (b"U" + u32(REL) + b"K" + i16(1) + b"n" + b"X" + i16(0), "U", 9, "expected b'N' before", False),
        (b"U" + u32(REL) + b"K" + i16(1) + b"n" + b"K" + i16(1) + b"n", "U", 9, "expected b'N'", False),
        (b"U" + u32(REL) + b"O" + i16(0), "U", 8, "payload ends before the 'N' of the new tuple", False),
        (b"U" + u32(XID) + u32(REL) + b"n" + i16(0), "U", 9, "expected one of b'KON'", True),
        (b"D" + u32(REL) + b"N" + i16(0), "D", 5, "expected one of b'KO'", False),
        (b"D" + u32(REL), "D", 5, "payload ends before the tuple sub-tag", False),
        (b"R" + u32(1) + b"a\0b\0x" + i16(0), "R", 9, "unknown replica identity b'x'", False),
        (h("53 00000001 02"), "S", 5, "first_segment must be 0 or 1, got 2", False),
        # short fixed fields
        (b"I\0\0", "I", 1, "payload ends inside the xid", True),
        (b"B" + u64(1) + b"\0\0", "B", 9, "payload ends inside commit_ts", False),
    ],
)
def test_malformed_payload(payload: bytes, tag: str, offset: int, match: str, in_stream: bool) -> None:
    assert_decode_error(payload, tag=tag, offset=offset, match=match, in_stream=in_stream)


def test_error_message_names_tag_and_offset() -> None:
    err = assert_decode_error(INSERT_HEAD + i16(1) + b"t" + i32(-1), tag="I", offset=9)
    assert str(err) == "cannot decode pgoutput message 'I' at byte 9: negative length -1 of tuple column 0"
    assert err.retryable is False


# --- golden payloads captured from a real server (optional) -------------------------------


GOLDEN = sorted(GOLDEN_DIR.glob("*.bin")) if GOLDEN_DIR.is_dir() else []


@pytest.mark.skipif(not GOLDEN, reason="no golden payloads in tests/pgoutput/golden yet")
@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_payload_decodes_and_re_encodes(path: Path) -> None:
    payload = path.read_bytes()
    errors = []
    for in_stream in (False, True):
        try:
            msg = decode_message(payload, in_stream=in_stream)
        except DecodeError as exc:
            errors.append(exc)
            continue
        assert encode(msg) == payload
        return
    pytest.fail(f"{path.name} decodes in no context: {errors}")


def test_the_empty_namespace_is_pg_catalog_and_a_relation_has_a_name() -> None:
    """pgoutput sends pg_catalog as the empty namespace; a Relation without a name is no
    message the server sends (a DecodeError, not a table named '')."""
    relation = decode_message(b"R" + u32(7) + b"\0pg_class\0d" + i16(0), in_stream=False)
    assert isinstance(relation, Relation) and relation.namespace == "pg_catalog"
    with pytest.raises(DecodeError, match="empty relation name"):
        decode_message(b"R" + u32(7) + b"public\0\0d" + i16(0), in_stream=False)
