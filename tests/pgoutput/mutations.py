"""Random byte edits of valid payloads, shared by the decoders' fuzz tests."""

from __future__ import annotations

from hypothesis import strategies as st

INTERESTING_INT32 = [b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff", b"\x00\x00\x00\x00"]


def mutate(draw: st.DrawFn, payload: bytes, *, edits: int = 4, insert_max: int = 8) -> bytes:
    """``payload`` with 1 to ``edits`` random edits: bit flips, cuts, insertions, replacements,
    deletions and extreme 32-bit values."""
    buf = bytearray(payload)
    for _ in range(draw(st.integers(1, edits))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "replace", "delete", "int32"]))
        if op == "cut":
            del buf[draw(st.integers(0, len(buf))) :]
        elif op == "insert":
            at = draw(st.integers(0, len(buf)))
            buf[at:at] = draw(st.binary(min_size=1, max_size=insert_max))
        elif not buf:
            continue
        elif op == "flip":
            buf[draw(st.integers(0, len(buf) - 1))] ^= 1 << draw(st.integers(0, 7))
        elif op == "replace":
            buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
        elif op == "delete":
            at = draw(st.integers(0, len(buf) - 1))
            del buf[at : at + draw(st.integers(1, 4))]
        else:
            at = draw(st.integers(0, len(buf) - 1))
            buf[at : at + 4] = draw(st.sampled_from(INTERESTING_INT32))
    return bytes(buf)
