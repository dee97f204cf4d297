"""Row conditions a user writes (a backfill filter, a publication's row filter): one boolean
expression, nothing else; pure logic.

The text is read with PostgreSQL's lexical rules (``standard_conforming_strings`` on) into
tokens, and refused unless it is one expression that stays inside the parentheses it is put in:
no ``;``, no comment (``--``, ``/*``: they would hide the rest of the query), no ``)`` or ``]``
without its opening one, no unclosed one, no ``$1`` parameter, no NUL. Two grammars read the
tokens:

- ``safe``: a small grammar parsed into a tree (``Expr``): columns, literals, comparisons,
  AND/OR/NOT, IN, BETWEEN, IS [NOT] NULL, parentheses. The SQL that runs is the rendering of
  the tree (identifiers and literals quoted by the query builder), never the user's text.
- ``sql``: any expression (``SqlText``). The SQL that runs is the tokens rendered again one by
  one, string literals and quoted identifiers re-quoted: what runs is what was checked here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import NoReturn

from airflow_provider_pgsync.errors import ConfigError

GRAMMARS = ("safe", "sql")
"""The filter grammars: ``safe`` (the default) and ``sql``."""
MAX_LENGTH = 1_000_000
"""The longest condition taken, in characters."""
MAX_DEPTH = 50
"""The deepest nesting (parentheses, NOT) taken."""
TYPED_LITERALS = {
    "date": "date",
    "time": "time",
    "timestamp": "timestamp",
    "timestamptz": "timestamptz",
    "interval": "interval",
}
"""Typed literals of the safe grammar (``DATE '2024-01-01'``): the word and the SQL type it casts to."""
COMPARISONS = ("=", "<>", "!=", "<", "<=", ">", ">=")
SAFE_GRAMMAR = (
    "the table's columns (bare or \"quoted\"), literals ('text' with '' for a quote, numbers, TRUE, "
    "FALSE, NULL, DATE/TIME/TIMESTAMP/TIMESTAMPTZ/INTERVAL 'text'), comparisons (= <> != < <= > >=), "
    "AND, OR, NOT, IN (literal, ...), BETWEEN ... AND ..., IS [NOT] NULL and parentheses, "
    "e.g. id > 1000 AND created >= DATE '2024-01-01'"
)
"""What the safe grammar allows, as error messages and the trigger form say it."""
_RESERVED = {"and", "or", "not", "in", "between", "is", "null", "true", "false"}
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


# ---- the tree of the safe grammar ----------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str


@dataclass(frozen=True)
class Literal:
    """A constant: text, int, Decimal, bool or None (NULL); ``type`` casts text (a typed literal)."""

    value: str | int | Decimal | bool | None
    type: str | None = None


Operand = Column | Literal


@dataclass(frozen=True)
class Compare:
    op: str
    left: Operand
    right: Operand


@dataclass(frozen=True)
class In:
    operand: Operand
    values: tuple[Literal, ...]
    negated: bool = False


@dataclass(frozen=True)
class Between:
    operand: Operand
    low: Operand
    high: Operand
    negated: bool = False


@dataclass(frozen=True)
class IsNull:
    operand: Operand
    negated: bool = False


@dataclass(frozen=True)
class Not:
    item: Expr


@dataclass(frozen=True)
class BoolOp:
    """``AND`` or ``OR`` of two or more items."""

    op: str
    items: tuple[Expr, ...]


Expr = Column | Literal | Compare | In | Between | IsNull | Not | BoolOp


@dataclass(frozen=True)
class SqlText:
    """A condition of the ``sql`` grammar: its tokens, one expression."""

    tokens: tuple[Token, ...]


Condition = Expr | SqlText


def parse_condition(text: str, grammar: str, where: str) -> Condition:
    """``text`` read with ``grammar`` (``GRAMMARS``); ConfigError starting with ``where`` (e.g.
    ``backfill_filter of table public.items``) saying what is wrong and what is allowed."""
    if grammar not in GRAMMARS:
        raise ConfigError(
            f"{where}: filter grammar {grammar!r} is unknown; use one of: {', '.join(GRAMMARS)}"
        )
    tokens = tokenize(text, where)
    if grammar == "sql":
        return SqlText(tuple(tokens))
    return _Parser(tokens, text, where).parse()


def check_expression(text: str, where: str) -> SqlText:
    """``text`` as one SQL expression (the ``sql`` grammar); ConfigError otherwise."""
    return SqlText(tuple(tokenize(text, where)))


def calls_of(condition: SqlText) -> tuple[list[str], list[str]]:
    """The names of the functions an ``sql`` condition calls (a name followed by ``(``, the last
    part of a qualified one) and the operators it uses, each once, in order of first use."""
    functions: dict[str, None] = {}
    operators: dict[str, None] = {}
    tokens = condition.tokens
    for token, after in zip(tokens, (*tokens[1:], None), strict=True):
        if token.kind in ("word", "ident") and after is not None and after.text == "(":
            functions.setdefault(token.value, None)
        elif token.kind == "op":
            operators.setdefault(token.value, None)
    return list(functions), list(operators)


def columns_of(expr: Expr) -> list[str]:
    """The column names ``expr`` uses, in order of first use."""
    found: dict[str, None] = {}
    for node in _walk(expr):
        if isinstance(node, Column):
            found.setdefault(node.name, None)
    return list(found)


def _walk(expr: Expr) -> Iterator[Expr]:
    yield expr
    children: tuple[Expr, ...] = ()
    if isinstance(expr, Compare):
        children = (expr.left, expr.right)
    elif isinstance(expr, In):
        children = (expr.operand, *expr.values)
    elif isinstance(expr, Between):
        children = (expr.operand, expr.low, expr.high)
    elif isinstance(expr, IsNull):
        children = (expr.operand,)
    elif isinstance(expr, Not):
        children = (expr.item,)
    elif isinstance(expr, BoolOp):
        children = expr.items
    for child in children:
        yield from _walk(child)


def shown(text: str, limit: int = 80) -> str:
    """``text`` as an error message quotes it (long texts cut, control characters escaped)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


# ---- tokens --------------------------------------------------------------------------------


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
        fail = _Failure(text, i, where)
        if text.startswith("--", i) or text.startswith("/*", i):
            fail(
                f"a comment ({text[i:i + 2]}) is not allowed: it could hide the rest of the query; "
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
                _Failure(text, match.end(), where)(
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
        _Failure(text, depth[-1].pos, where)(
            f"this {depth[-1].text!r} is never closed; balance the parentheses"
        )
    if not tokens:
        raise ConfigError(f"{where}: is empty; give a condition, or no filter at all")
    return tokens


class _Failure:
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
    fail = _Failure(text, i, where)
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
    fail = _Failure(text, i, where)
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
        _Failure(text, i, where)(f"{shown(text[i:end + 1])} is not a number (put a space after a number)")
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


# ---- the safe grammar ----------------------------------------------------------------------


class _Parser:
    """Recursive descent over the tokens of the safe grammar."""

    def __init__(self, tokens: list[Token], text: str, where: str) -> None:
        self.tokens, self.text, self.where = tokens, text, where
        self.i = 0
        self.depth = 0

    def parse(self) -> Expr:
        expr = self.expr()
        if self.i < len(self.tokens):
            self.fail("expected AND, OR or the end of the condition")
        return expr

    def fail(self, problem: str, token: Token | None = None) -> NoReturn:
        at = token or self.peek()
        if at is None:
            raise ConfigError(
                f"{self.where}: the condition ends too soon: {problem}; "
                f"the safe grammar allows {SAFE_GRAMMAR}"
            )
        _Failure(self.text, at.pos, self.where)(
            f"{problem}, found {shown(at.text, 30)}; the safe grammar allows {SAFE_GRAMMAR}"
        )

    def peek(self, ahead: int = 0) -> Token | None:
        at = self.i + ahead
        return self.tokens[at] if at < len(self.tokens) else None

    def word(self, *words: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token is not None and token.kind == "word" and token.value in words

    def punct(self, mark: str) -> bool:
        token = self.peek()
        return token is not None and token.kind == "punct" and token.text == mark

    def take(self) -> Token:
        token = self.peek()
        if token is None:
            self.fail("expected more")
        self.i += 1
        return token

    def expect(self, mark: str) -> None:
        if not self.punct(mark):
            self.fail(f"expected {mark!r}")
        self.i += 1

    def nested(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(f"nested more than {MAX_DEPTH} deep")

    def expr(self) -> Expr:
        return self.bool_op("or", self.conjunction)

    def conjunction(self) -> Expr:
        return self.bool_op("and", self.negation)

    def bool_op(self, op: str, read: Callable[[], Expr]) -> Expr:
        items = [read()]
        while self.word(op):
            self.i += 1
            items.append(read())
        return items[0] if len(items) == 1 else BoolOp(op.upper(), tuple(items))

    def negation(self) -> Expr:
        if self.word("not"):
            self.i += 1
            self.nested()
            inner = self.negation()
            self.depth -= 1
            return Not(inner)
        return self.predicate()

    def predicate(self) -> Expr:
        if self.punct("("):
            self.i += 1
            self.nested()
            inner = self.expr()
            self.expect(")")
            self.depth -= 1
            return inner
        left = self.operand()
        token = self.peek()
        if token is not None and token.kind == "op":
            if token.text not in COMPARISONS:
                allowed = " ".join(COMPARISONS)
                self.fail(f"the operator {token.text!r} is not allowed (comparisons: {allowed})")
            self.i += 1
            return Compare("<>" if token.text == "!=" else token.text, left, self.operand())
        if self.word("is"):
            self.i += 1
            negated = self.word("not")
            self.i += negated
            if not self.word("null"):
                self.fail("expected NULL after IS or IS NOT")
            self.i += 1
            return IsNull(left, negated)
        negated = self.word("not") and self.word("in", "between", ahead=1)
        self.i += negated
        if self.word("in"):
            self.i += 1
            self.expect("(")
            values = [self.literal()]
            while self.punct(","):
                self.i += 1
                values.append(self.literal())
            self.expect(")")
            return In(left, tuple(values), negated)
        if self.word("between"):
            self.i += 1
            low = self.operand()
            if not self.word("and"):
                self.fail("expected AND of BETWEEN ... AND ...")
            self.i += 1
            return Between(left, low, self.operand(), negated)
        return left

    def literal(self) -> Literal:
        token = self.peek()
        operand = self.operand()
        if not isinstance(operand, Literal):
            self.fail("expected a literal (IN takes a list of constants)", token)
        return operand

    def operand(self) -> Operand:
        token = self.take()
        if token.kind == "op" and token.text in ("-", "+") and (self.peek() or token).kind == "number":
            number = self.take()
            return Literal(self.number(("-" if token.text == "-" else "") + number.value, number))
        if token.kind == "number":
            return Literal(self.number(token.value, token))
        if token.kind == "string":
            return Literal(token.value)
        if token.kind == "ident":
            return Column(token.value)
        if token.kind == "word":
            if token.value in ("true", "false"):
                return Literal(token.value == "true")
            if token.value == "null":
                return Literal(None)
            if token.value in TYPED_LITERALS and (self.peek() or token).kind == "string":
                return Literal(self.take().value, token.value)
            if token.value in _RESERVED:
                self.fail("expected a column or a literal", token)
            if self.punct("(") or self.punct(".") or self.punct("::"):
                self.fail(f"only plain columns of the table are allowed after {token.text!r}")
            return Column(token.value)
        self.fail("expected a column or a literal", token)


    def number(self, text: str, token: Token) -> int | Decimal:
        try:
            if re.fullmatch(r"-?0[xXoObB].*", text):
                return int(text, 0)
            if re.fullmatch(r"-?[0-9]+", text):
                return int(text)
            return Decimal(text)
        except (ValueError, InvalidOperation):
            self.fail("not a number", token)
