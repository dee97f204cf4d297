"""PostgreSQL's lexical rules for a condition a user writes (``standard_conforming_strings``
on): the text as tokens, refused unless it can only be one expression that stays inside the
parentheses it is put in; pure logic (``row_condition.py`` reads the tokens)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NoReturn

from airflow_provider_pgsync.errors import ConfigError

MAX_LENGTH = 1_000_000
"""The longest condition taken, in characters."""
_OPERATOR_CHARS = set("+-*/<>=~!@#%^&|`?")
_SPECIAL_OPERATOR_CHARS = set("~!@#%^&|`?")
_WHITESPACE = set(" \t\n\r\f\v")
_DIGITS = set("0123456789")
_WORD_START = re.compile(r"[A-Za-z_\x80-\U0010ffff]")
_WORD = re.compile(r"[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*")
_NUMBER = re.compile(
    r"0[xX][0-9A-Fa-f_]+|0[oO][0-7_]+|0[bB][01_]+"
    r"|(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d+)?",
    re.ASCII,
)
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*)?\$")


@dataclass(frozen=True)
class Token:
    """One lexical token: ``kind`` (word, ident, string, estring, bits, number, op, punct),
    the ``text`` as written and its ``value`` (a word in lower case, a name or string unquoted)."""

    kind: str
    text: str
    value: str
    pos: int


def shown(text: str, limit: int = 80) -> str:
    """``text`` as an error message quotes it (long texts cut, control characters escaped)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def tokenize(text: str, where: str) -> list[Token]:
    """The tokens of ``text``, refused (ConfigError) unless it can only be one expression."""
    if not isinstance(text, str):
        raise ConfigError(f"{where}: must be text, not {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ConfigError(
            f"{where}: {len(text):,} characters is longer than the {MAX_LENGTH:,} allowed; "
            "select the rows with a shorter condition"
        )
    if "\x00" in text:
        raise ConfigError(
            f"{where}: contains a NUL character (at character {text.index(chr(0)) + 1}), which PostgreSQL "
            "text cannot hold; remove it"
        )
    tokens: list[Token] = []
    depth: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _WHITESPACE:
            i += 1
            continue
        fail = Failure(text, i, where)
        if text.startswith("--", i) or text.startswith("/*", i):
            fail(
                f"a comment ({text[i : i + 2]}) is not allowed: it could hide the rest of the query; "
                "remove it"
            )
        if c == ";":
            fail("';' is not allowed: a filter is one expression, not statements")
        if c in "'\"" or (c in "eEbBxXnNuU" and _quote_follows(text, i)):
            token = _quoted(text, i, where)
        elif c == "$":
            token = _dollar(text, i, where)
        elif c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            token = _number(text, i, where)
        elif _WORD_START.match(c):
            match = _WORD.match(text, i)
            assert match is not None
            word = match.group()
            if match.end() < n and text[match.end()] == "$":
                Failure(text, match.end(), where)(
                    f"'$' in the name {shown(word + '$')}: write the name in double quotes"
                )
            token = Token("word", word, _fold(word), i)
        elif c in _OPERATOR_CHARS:
            token = _operator(text, i, where)
        elif c in "()[],.":
            token = Token("punct", c, c, i)
            if c in "([":
                depth.append(token)
            elif c in ")]":
                opening = "(" if c == ")" else "["
                if not depth or depth[-1].text != opening:
                    fail(
                        f"{c!r} closes no {opening!r} of the filter: it would close the query around it; "
                        "balance the parentheses"
                    )
                depth.pop()
        elif c == ":":
            colons = "::" if text.startswith("::", i) else ":"
            token = Token("punct", colons, colons, i)
        else:
            fail(f"the character {c!r} is not allowed here")
        tokens.append(token)
        i = token.pos + len(token.text)
    if depth:
        Failure(text, depth[-1].pos, where)(
            f"this {depth[-1].text!r} is never closed; balance the parentheses"
        )
    if not tokens:
        raise ConfigError(f"{where}: is empty; give a condition, or no filter at all")
    return tokens


class Failure:
    """Raises the ConfigError of a problem at one character of the text."""

    def __init__(self, text: str, pos: int, where: str) -> None:
        self.text, self.pos, self.where = text, pos, where

    def __call__(self, problem: str) -> NoReturn:
        near = shown(self.text[self.pos : self.pos + 20], 20)
        raise ConfigError(f"{self.where}: at character {self.pos + 1} (near {near}): {problem}")


def _fold(word: str) -> str:
    """A bare name as PostgreSQL reads it: ASCII letters in lower case."""
    return word.translate(_LOWER)


_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _quote_follows(text: str, i: int) -> bool:
    """Whether a prefixed literal starts at ``i`` (``E'``, ``B'``, ``X'``, ``N'``, ``U&'``, ``U&"``)."""
    c = text[i].lower()
    if c == "u":
        return text.startswith("&'", i + 1) or text.startswith('&"', i + 1)
    return text.startswith("'", i + 1)


def _quoted(text: str, i: int, where: str) -> Token:
    """A string or quoted name starting at ``i`` (with its prefix, if any)."""
    fail = Failure(text, i, where)
    prefix = ""
    if text[i] not in "'\"":
        prefix = text[i].upper()
        if prefix == "U":
            fail("U&'...' and U&\"...\" escapes are not allowed: write the characters themselves")
    start = i + len(prefix)
    quote = text[start]
    escapes = prefix == "E"
    j, value = start + 1, []
    n = len(text)
    while True:
        if j >= n:
            what = "string" if quote == "'" else "quoted name"
            fail(f"this {what} is never closed (a missing {quote})")
        ch = text[j]
        if escapes and ch == "\\":
            if j + 1 >= n:
                fail("this string is never closed (it ends in a backslash)")
            value.append(text[j : j + 2])
            j += 2
            continue
        if ch == quote:
            if text.startswith(quote * 2, j):
                value.append(quote)
                j += 2
                continue
            break
        value.append(ch)
        j += 1
    raw, inner = text[i : j + 1], "".join(value)
    if quote == '"':
        if not inner:
            fail('an empty quoted name ("") is not a name')
        return Token("ident", raw, inner, i)
    if prefix == "E":
        return Token("estring", raw, inner, i)
    if prefix in ("B", "X"):
        allowed = "01" if prefix == "B" else "0123456789abcdefABCDEF"
        if any(ch not in allowed for ch in inner):
            fail(f"a {prefix}'...' bit string holds only {'0 and 1' if prefix == 'B' else 'hex digits'}")
        return Token("bits", raw, inner, i)
    return Token("string", raw, inner, i)


def _dollar(text: str, i: int, where: str) -> Token:
    fail = Failure(text, i, where)
    if i + 1 < len(text) and text[i + 1].isdigit():
        fail("a parameter ($1) is not allowed: write the value itself")
    match = _DOLLAR_TAG.match(text, i)
    if match is None:
        fail("a '$' outside a $$dollar-quoted$$ string is not allowed")
    tag = match.group()
    end = text.find(tag, match.end())
    if end < 0:
        fail(f"this dollar-quoted string is never closed (a missing {tag})")
    return Token("string", text[i : end + len(tag)], text[match.end() : end], i)


def _number(text: str, i: int, where: str) -> Token:
    match = _NUMBER.match(text, i)
    assert match is not None
    end = match.end()
    if end < len(text) and (_WORD_START.match(text[end]) or text[end] in _DIGITS or text[end] == "."):
        Failure(text, i, where)(f"{shown(text[i : end + 1])} is not a number (put a space after a number)")
    return Token("number", match.group(), match.group().replace("_", ""), i)


def _operator(text: str, i: int, where: str) -> Token:
    j = i
    while j < len(text) and text[j] in _OPERATOR_CHARS:
        if text.startswith("--", j) or text.startswith("/*", j):
            break
        j += 1
    op = text[i:j]
    # PostgreSQL: a multi-character operator ends in + or - only if it has one of ~!@#%^&|`?
    if len(op) > 1 and not _SPECIAL_OPERATOR_CHARS & set(op):
        while len(op) > 1 and op[-1] in "+-":
            op = op[:-1]
    return Token("op", op, op, i)
