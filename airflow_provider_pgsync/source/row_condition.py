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
from airflow_provider_pgsync.source.sql_tokens import Failure, Token, shown, tokenize

GRAMMARS = ("safe", "sql")
"""The filter grammars: ``safe`` (the default) and ``sql``."""
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
        Failure(self.text, at.pos, self.where)(
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
