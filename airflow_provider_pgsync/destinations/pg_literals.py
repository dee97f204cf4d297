"""PostgreSQL's text output of arrays, composites (row values) and hstore values split into the
texts of their elements, fields and pairs (None for NULL), for ``lake_values.py`` to convert by
the same rules as scalars. A value that is not such a literal raises ``LiteralError``; a
non-empty array whose dimensions or lower bounds the lake cannot hold raises ``ArrayShapeError``.
"""

# Hand-written on purpose: no maintained library parses PostgreSQL's text output of arrays,
# composites (row values) and hstore into Arrow. Drivers such as psycopg parse them per value
# into Python objects and need a live connection's type catalog, and pyarrow's casts only read
# ISO scalars. The grammar below follows PostgreSQL's array_out/array_in, record_out/record_in
# and hstore_out/hstore_in.

from __future__ import annotations

import re
from typing import Any, NoReturn

from airflow_provider_pgsync.typemap.spark import array_refusal


class LiteralError(ValueError):
    """A value that is not a valid literal of its kind (array, composite value, hstore value);
    the message says which and what is wrong."""


class ArrayShapeError(LiteralError):
    """A non-empty array the lake cannot hold exactly: other dimensions than the lake column's
    ``declared`` ones, or a lower bound other than 1; ``dims`` is its ``array_dims`` text."""

    def __init__(self, dims: str, declared: int) -> None:
        super().__init__(array_refusal("PostgreSQL array", dims, declared))
        self.dims = dims
        self.declared = declared


class _Literal:
    """One array, composite or hstore literal being parsed."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def fail(self, problem: str) -> NoReturn:
        raise LiteralError(f"PostgreSQL {self.kind}: {problem}")


_SPACE = " \t\n\r\v\f"  # PostgreSQL's scanner_isspace
_ESCAPE = re.compile(r"\\(.)", re.S)


def _unescape(text: str) -> str:
    return _ESCAPE.sub(r"\1", text) if "\\" in text else text


# arrays: array_out quotes elements holding special characters, with \" and \\ inside quotes

_WS = r"[ \t\n\r\v\f]*+"  # possessive quantifiers (*+, ++) keep every pattern linear
_BOUND = r"-?\d++" + _WS
_DIMENSIONS = re.compile(rf"{_WS}(?:\[{_WS}(?:{_BOUND}:{_WS})?{_BOUND}\]{_WS})+=")
_DIMENSION = re.compile(rf"\[{_WS}(?:(-?\d++){_WS}:{_WS})?(-?\d++){_WS}\]")  # [lower:upper] or [upper]
_QUOTED_BODY = r'(?:[^"\\]|\\.)*+'
_BARE = r'(?:[^{}",\\]|\\.)++'  # may end in blanks: they are stripped
_ARRAY_TOKEN = re.compile(f'{_WS}(?:([{{}},])|"({_QUOTED_BODY})"|({_BARE}))', re.S)
_ARRAY_TOKENS = re.compile(f'(?:{_WS}(?:[{{}},]|"{_QUOTED_BODY}"|{_BARE}))*+{_WS}', re.S)
_ELEMENT = f'{_WS}(?:"{_QUOTED_BODY}"{_WS}|{_BARE})'
_ELEMENT_PARTS = re.compile(f'{_WS}(?:"({_QUOTED_BODY})"|({_BARE}))', re.S)
_FLAT_ARRAY = re.compile(rf"{_WS}\{{(?:{_ELEMENT}(?:,{_ELEMENT})*+)?{_WS}\}}{_WS}", re.S)
_OPENED, _NEED_ELEMENT, _AFTER_ELEMENT = range(3)


def parse_array(text: str, depth: int) -> list[Any]:
    """An array literal as nested lists ``depth`` deep of element texts (None for NULL).

    The lake holds arrays of its column's ``depth`` dimensions indexed from 1: a non-empty
    array with other dimensions, or whose ``[lower:upper]...=`` decoration (array_out writes it
    when a lower bound is not 1) has a lower bound other than 1, raises ``ArrayShapeError``.
    """
    if depth == 1 and _FLAT_ARRAY.fullmatch(text):  # most arrays: one regex pass finds the elements
        return [_array_element(quoted, bare) for quoted, bare in _ELEMENT_PARTS.findall(text)]
    literal = _Literal("array")
    decoration = _DIMENSIONS.match(text)  # [-3:-1]= or [1:2][0:1]= before the braces
    start = decoration.end() if decoration else 0
    if not _ARRAY_TOKENS.fullmatch(text, start):
        literal.fail("it has an unterminated quote or a stray backslash")
    tokens = _ARRAY_TOKEN.findall(text, start)
    found = _leading_braces(tokens)  # the value's dimensions, as its braces nest
    empty = found == 1 and len(tokens) > 1 and tokens[1][0] == "}"  # {}: no dimensions at all
    if empty or (found == depth and decoration is None) or found == 0:
        return _nest(tokens, depth, literal)
    nested = _nest(tokens, found, literal)  # a well-formed literal before its shape is judged
    if decoration is None:
        dims = _dims_text([(1, length) for length in _lengths(nested, found)])
    else:
        bounds = [(int(lower or 1), int(upper)) for lower, upper in _DIMENSION.findall(decoration[0])]
        if len(bounds) != found:
            literal.fail(f"its {len(bounds)} [lower:upper] dimensions differ from its braces' {found}")
        dims = _dims_text(bounds)
        if found == depth and all(lower == 1 for lower, _ in bounds):
            return nested
    raise ArrayShapeError(dims, depth)


def _leading_braces(tokens: list[tuple[str, str, str]]) -> int:
    count = 0
    while count < len(tokens) and tokens[count][0] == "{":
        count += 1
    return count


def _lengths(nested: list[Any], dimensions: int) -> list[int]:
    """The length of each dimension of a rectangular array (array_in makes every array one)."""
    lengths = []
    level: Any = nested
    for _ in range(dimensions):
        lengths.append(len(level))
        level = level[0] if level and isinstance(level[0], list) else []
    return lengths


def _dims_text(bounds: list[tuple[int, int]]) -> str:
    """``array_dims``'s text of (lower, upper) bounds: ``[1:2][-3:-1]``."""
    return "".join(f"[{lower}:{upper}]" for lower, upper in bounds)


def _nest(tokens: list[tuple[str, str, str]], depth: int, literal: _Literal) -> list[Any]:
    """The (punctuation, quoted, bare) tokens of an array literal as nested lists."""
    if not tokens or tokens[0][0] != "{":
        literal.fail("it must start with '{'")
    root: list[Any] = []
    open_arrays = [root]  # the innermost takes the next element
    state = _OPENED
    for punct, quoted, bare in tokens[1:]:
        if not open_arrays:
            literal.fail("text follows the closing '}'")
        if punct == "}":
            if state == _NEED_ELEMENT:
                literal.fail("an element is missing")
            open_arrays.pop()
            state = _AFTER_ELEMENT
        elif punct == ",":
            if state != _AFTER_ELEMENT:
                literal.fail("an element is missing")
            state = _NEED_ELEMENT
        elif state == _AFTER_ELEMENT:
            literal.fail("an element is not followed by ',' or '}'")
        elif (punct == "{") != (len(open_arrays) < depth):
            literal.fail(f"its dimensions differ from the lake column's {depth}-dimensional arrays")
        elif punct == "{":
            sub_array: list[Any] = []
            open_arrays[-1].append(sub_array)
            open_arrays.append(sub_array)
            state = _OPENED
        else:
            open_arrays[-1].append(_array_element(quoted, bare))
            state = _AFTER_ELEMENT
    if open_arrays:
        literal.fail("it lacks a closing '}'")
    return root


def _array_element(quoted: str, bare: str) -> str | None:
    if not bare:  # a bare element is never empty: this one was quoted
        return _unescape(quoted)
    bare = bare.rstrip(_SPACE)
    return None if bare.upper() == "NULL" else _unescape(bare)


# composites: record_out quotes fields holding special characters, doubling " and \ inside

_COMPOSITE_FIELD = re.compile(r'(?:[^",)\\]|\\.|"(?:[^"\\]|\\.|"")*+")*+', re.S)
_COMPOSITE_PART = re.compile(r'"((?:[^"\\]|\\.|"")*+)"|\\(.)', re.S)
_QUOTED_COMPOSITE_CHAR = re.compile(r'""|\\(.)', re.S)


def parse_composite(text: str, count: int) -> tuple[str | None, ...]:
    """A composite literal ``(1,"a b",,t)`` as its ``count`` field texts (None for NULL)."""
    literal = _Literal("composite value")
    body = text.strip(_SPACE)
    if not (body.startswith("(") and body.endswith(")")):
        literal.fail("it must be enclosed in parentheses")
    body = body[1:-1]
    if '"' in body or "\\" in body or ")" in body:
        fields = _composite_fields(body, literal)
    else:  # no quotes or escapes (most values): the commas separate the fields
        fields = [field or None for field in body.split(",")]
    if len(fields) != count:
        literal.fail(f"it has {len(fields)} fields where the lake column's struct has {count}")
    return tuple(fields)


def _composite_fields(body: str, literal: _Literal) -> list[str | None]:
    fields: list[str | None] = []
    position = 0
    while True:
        match = _COMPOSITE_FIELD.match(body, position)
        assert match is not None  # the pattern matches the empty string
        raw = match[0]
        fields.append(_decode_composite_field(raw) if raw else None)
        position = match.end()
        if position == len(body):
            return fields
        if body[position] != ",":
            literal.fail(f"unexpected {body[position]!r} at character {position + 2}")
        position += 1


def _decode_composite_field(raw: str) -> str:
    return _COMPOSITE_PART.sub(_decode_composite_part, raw)


def _decode_composite_part(part: re.Match[str]) -> str:
    if part[1] is None:  # a backslash-escaped character outside quotes
        return part[2]
    return _QUOTED_COMPOSITE_CHAR.sub(lambda inner: inner[1] or '"', part[1])  # "" or \x inside quotes


# hstore: hstore_out writes "key"=>"value" (or NULL) pairs joined by ", "

_HSTORE_KEY = rf'(?:"(?P<qkey>{_QUOTED_BODY})"|(?P<key>(?:[^ \t\n\r\v\f=,"\\]|\\.)++))'
_HSTORE_VALUE = rf'(?:"(?P<qvalue>{_QUOTED_BODY})"|(?P<value>(?:[^ \t\n\r\v\f,"\\]|\\.)++))'
_HSTORE_PAIR = re.compile(rf"{_WS}{_HSTORE_KEY}{_WS}=>{_WS}{_HSTORE_VALUE}{_WS}(?:,|\Z)", re.S)


def parse_hstore(text: str) -> list[tuple[str, str | None]]:
    """An hstore literal as (key, value) pairs, value None for NULL."""
    literal = _Literal("hstore value")
    pairs: list[tuple[str, str | None]] = []
    position = 0
    end = len(text.rstrip(_SPACE))
    while position < end:
        match = _HSTORE_PAIR.match(text, position)
        if match is None:
            literal.fail(f'expected "key"=>"value" at character {position + 1}')
        key = match["qkey"] if match["qkey"] is not None else match["key"]
        pairs.append((_unescape(key), _hstore_value(match)))
        position = match.end()
    return pairs


def _hstore_value(match: re.Match[str]) -> str | None:
    if match["qvalue"] is not None:
        return _unescape(match["qvalue"])
    bare = match["value"]
    return None if bare.upper() == "NULL" else _unescape(bare)
