"""Row conditions (backfill filters, row filters): one expression or a clear refusal, in both
grammars; the safe grammar's tree; hostile texts of every kind (pure, no server)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from airflow_provider_pgsync.baseline.plan import condition_sql
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.row_condition import (
    MAX_DEPTH,
    SAFE_GRAMMAR,
    Between,
    BoolOp,
    Column,
    Compare,
    Expr,
    In,
    IsNull,
    Literal,
    Not,
    SqlText,
    check_expression,
    columns_of,
    parse_condition,
)
from airflow_provider_pgsync.source.sql_tokens import MAX_LENGTH, Token, tokenize

WHERE = "backfill_filter of table public.items"
GRAMMARS = ("safe", "sql")


def _safe(text: str) -> Expr:
    tree = parse_condition(text, "safe", WHERE)
    assert not isinstance(tree, SqlText)
    return tree


def _sql(text: str) -> str:
    return condition_sql(parse_condition(text, "sql", WHERE)).as_string(None)


# ---- the safe grammar ------------------------------------------------------------------------


def test_the_safe_grammar_reads_each_form_into_a_tree() -> None:
    assert _safe("id > 1000 AND created >= DATE '2024-01-01'") == BoolOp(
        "AND",
        (
            Compare(">", Column("id"), Literal(1000)),
            Compare(">=", Column("created"), Literal("2024-01-01", "date")),
        ),
    )
    assert _safe("NOT a IN (1, -2.5, 'x''y') OR b IS NOT NULL") == BoolOp(
        "OR",
        (
            Not(In(Column("a"), (Literal(1), Literal(Decimal("-2.5")), Literal("x'y")))),
            IsNull(Column("b"), True),
        ),
    )
    assert _safe('"Mixed Case" NOT BETWEEN 1 AND 2') == Between(
        Column("Mixed Case"), Literal(1), Literal(2), True
    )
    assert _safe("a NOT IN (TRUE, FALSE, NULL)") == In(
        Column("a"), (Literal(True), Literal(False), Literal(None)), True
    )
    assert _safe("(a = 1 OR b != 2) AND c") == BoolOp(
        "AND",
        (
            BoolOp("OR", (Compare("=", Column("a"), Literal(1)), Compare("<>", Column("b"), Literal(2)))),
            Column("c"),
        ),
    )
    assert _safe("ID = $$it's$$") == Compare(
        "=", Column("id"), Literal("it's")
    )  # bare names fold to lower case
    assert _safe("a<-1") == Compare("<", Column("a"), Literal(-1))  # as PostgreSQL reads '<-1'
    assert _safe("名前 = 'é'") == Compare("=", Column("名前"), Literal("é"))
    assert columns_of(_safe('b = 1 AND (a IS NULL OR b < "C")')) == ["b", "a", "C"]


def test_the_safe_grammar_renders_quoted_names_and_literals() -> None:
    rendered = condition_sql(
        _safe("""id > 1 AND "we""ird" IN ('a', 'b''c', 'x\\y') AND d <= TIMESTAMPTZ '2024-01-01'""")
    )
    assert rendered.as_string(None) == (
        """(("id" > 1) AND ("we""ird" IN ('a', 'b''c',  E'x\\\\y'))"""
        """ AND ("d" <= CAST('2024-01-01' AS timestamptz)))"""
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("lo_create(0) > 0", r"only plain columns of the table are allowed after 'lo_create'"),
        ("nextval('s') > 0", r"only plain columns .* after 'nextval'"),
        ("id = (SELECT 1)", r"at character 6 .*expected a column or a literal, found '\('"),
        ("a LIKE 'x'", r"expected AND, OR or the end of the condition, found 'LIKE'"),
        ("a::text = 'x'", r"only plain columns .* after 'a'"),
        ("t.a = 1", r"only plain columns .* after 't'"),
        ("a || 'x' = 'y'", r"the operator '\|\|' is not allowed \(comparisons: = <> != < <= > >=\)"),
        ("a = E'x'", r"expected a column or a literal, found \"E'x'\""),
        ("a IN (b)", r"expected a literal \(IN takes a list of constants\), found 'b'"),
        ("a BETWEEN 1 OR 2", r"expected AND of BETWEEN"),
        ("a IS 1", r"expected NULL after IS"),
        ("a = ", r"the condition ends too soon"),
        ("AND a = 1", r"expected a column or a literal, found 'AND'"),
        ("a = 1 b = 2", r"expected AND, OR or the end"),
    ],
)
def test_the_safe_grammar_refuses_the_rest_saying_what_is_allowed(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=rf"^backfill_filter of table public.items: .*{problem}") as error:
        _safe(text)
    assert SAFE_GRAMMAR in str(error.value)


def test_the_safe_grammar_refuses_deep_nesting_without_a_crash() -> None:
    deep = "(" * (MAX_DEPTH + 1) + "a = 1" + ")" * (MAX_DEPTH + 1)
    with pytest.raises(ConfigError, match=rf"nested more than {MAX_DEPTH} deep"):
        _safe(deep)
    with pytest.raises(ConfigError, match=rf"nested more than {MAX_DEPTH} deep"):
        _safe("NOT " * 100_000 + "a")  # no RecursionError
    assert _safe("(" * MAX_DEPTH + "a = 1" + ")" * MAX_DEPTH) == Compare("=", Column("a"), Literal(1))


# ---- one expression, in both grammars ------------------------------------------------------

HOSTILE = [
    # the attack, and others that end the statement
    ("id > 0) ; COMMIT; DROP TABLE x; --", r"at character 7 .*'\)' closes no '\(' of the filter"),
    ("id > 0; DROP TABLE x", r"at character 7 .*';' is not allowed: a filter is one expression"),
    ("id > 0 -- the rest", r"a comment \(--\) is not allowed: it could hide the rest of the query"),
    ("id > 0 /* x */", r"a comment \(/\*\) is not allowed"),
    ("id >--1", r"a comment \(--\) is not allowed"),
    ("id > 0) OR (true", r"'\)' closes no '\(' of the filter: it would close the query around it"),
    ("(id > 0", r"at character 1 .*this '\(' is never closed"),
    ("a[1] > 0]", r"'\]' closes no '\['"),
    ("(a = 1]", r"'\]' closes no '\['"),
    ("name = 'x", r"this string is never closed \(a missing '\)"),
    ("name = 'it''s", r"this string is never closed"),
    ('"name = 1', r"this quoted name is never closed \(a missing \"\)"),
    ('"" = 1', r"an empty quoted name"),
    ("name = 'x\\'; DROP TABLE x; --'", r"at character 12 .*';' is not allowed"),  # no escape in '...'
    ("name = E'x\\\\'; DROP TABLE x; --'", r"';' is not allowed"),  # an escaped backslash
    ("name = $$x; DROP TABLE x", r"this dollar-quoted string is never closed \(a missing \$\$\)"),
    ("name = $q$x$$; DROP TABLE x", r"never closed \(a missing \$q\$\)"),
    ("id = $1", r"a parameter \(\$1\) is not allowed"),
    ("a$b = 1", r"'\$' in the name 'a\$'"),
    ("name = U&'\\0041'", r"U&'...' and U&\"...\" escapes are not allowed"),
    ('U&"a" = 1', r"U&'...' and U&\"...\" escapes are not allowed"),
    ("b = B'012'", r"bit string holds only 0 and 1"),
    ("id = 1x", r"'1x' is not a number"),
    ("id = \\", r"the character '\\\\' is not allowed"),
    ("id = {1}", r"the character '\{' is not allowed"),
    (
        "id > 0\x00; DROP TABLE x",
        r"contains a NUL character \(at character 7\), which PostgreSQL text cannot hold",
    ),
    ("   ", r"is empty"),
]


@pytest.mark.parametrize("grammar", GRAMMARS)
@pytest.mark.parametrize(("text", "problem"), HOSTILE)
def test_hostile_texts_are_refused_in_both_grammars(grammar: str, text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=rf"^backfill_filter of table public.items: .*{problem}"):
        parse_condition(text, grammar, WHERE)


def test_very_long_texts_are_read_or_refused_clearly() -> None:
    values = ", ".join(str(i) for i in range(20_000))  # about 110 kB: read
    assert len(values) > 100_000
    tree = _safe(f"id IN ({values})")
    assert isinstance(tree, In) and len(tree.values) == 20_000
    long_string = "x';" * 40_000  # 120 kB of quotes and ';' inside one literal
    assert _safe("name = '" + long_string.replace("'", "''") + "'") == Compare(
        "=", Column("name"), Literal(long_string)
    )
    with pytest.raises(ConfigError, match=r"1,000,001 characters is longer than the 1,000,000 allowed"):
        tokenize("a" * (MAX_LENGTH + 1), WHERE)


def test_the_sql_grammar_takes_any_one_expression_and_renders_its_tokens_again() -> None:
    assert _sql("lo_create(0) > 0") == "lo_create ( 0 ) > 0"
    assert _sql("""a = $t$x;'y$t$ AND "B""c" ~ '{;}' AND d = e'\\'' AND f = x'ff'""") == (
        """a = 'x;''y' AND "B""c" ~ '{;}' AND d = e'\\'' AND f = x'ff'"""
    )
    assert (
        _sql("now() - interval '1 day' < ts::timestamptz") == "now ( ) - interval '1 day' < ts :: timestamptz"
    )
    assert _sql("name = E'x\\'; DROP TABLE x; --'") == "name = E'x\\'; DROP TABLE x; --'"  # one literal
    assert (
        _sql("id IN (SELECT id FROM other WHERE note = ';--')")
        == "id IN ( SELECT id FROM other WHERE note = ';--' )"
    )


def test_a_row_filter_is_checked_as_one_expression() -> None:
    assert isinstance(check_expression("country = 'NL'", "row_filter"), SqlText)
    with pytest.raises(ConfigError, match=r"^row_filter: at character 15 .*';' is not allowed"):
        check_expression("country = 'NL'; DELETE FROM t", "row_filter")


def test_an_unknown_grammar_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"filter grammar 'lax' is unknown; use one of: safe, sql"):
        parse_condition("a = 1", "lax", WHERE)


_PIECES = [*"ab1 '\"$;-/*()[]\\eEuU&:.,=<>!|\n\x00é€𝄞", "$$", "--", "/*", "''", "E'", "AND", "NOT"]
_NASTY = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)


@settings(max_examples=600, deadline=None)
@given(text=_NASTY, grammar=st.sampled_from(GRAMMARS))
@example(text="$$\\$$", grammar="sql").via("a backslash in a string is written back as E'\\\\'")
@example(text="'a\\b'", grammar="sql").via("the same in a plain string")
def test_any_text_is_either_one_expression_or_a_config_error(text: str, grammar: str) -> None:
    """Never another exception; and what is accepted renders to SQL with no ';' or comment
    outside a literal and balanced parentheses: reading the rendering again gives the same tokens."""
    try:
        condition = parse_condition(text, grammar, WHERE)
    except ConfigError:
        return
    rendered = condition_sql(condition).as_string(None)
    again = tokenize(rendered, "rendered")  # raises on ';', comments, unbalanced parentheses
    if isinstance(condition, SqlText):
        assert [_meaning(t) for t in again] == [_meaning(t) for t in condition.tokens]


def _meaning(token: Token) -> tuple[str, str]:
    """A token as PostgreSQL reads it, as far as the rendering may change it: psycopg writes a
    string holding a backslash as an E'...' string with the backslash doubled."""
    if token.kind == "estring":
        return "string", token.value.replace("\\\\", "\\")
    return token.kind, token.value
