"""Tests of source object names: qualified table names, slot and publication names."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import (
    TableRef,
    quote_ident,
    validate_publication_name,
    validate_slot_name,
)

# ---- TableRef.parse ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "schema", "name"),
    [
        ("orders", "public", "orders"),
        ("Orders", "public", "orders"),
        ("ORDERS", "public", "orders"),
        ("Sales.Orders", "sales", "orders"),
        (" sales . orders ", "sales", "orders"),
        ("_x1.a$b", "_x1", "a$b"),
        ('"Orders"', "public", "Orders"),
        ('"Sales"."Orders"', "Sales", "Orders"),
        ('Sales."Orders"', "sales", "Orders"),
        ('"Sales".Orders', "Sales", "orders"),
        ('"my table"', "public", "my table"),
        ('"a.b"', "public", "a.b"),
        ('"say ""hi"""', "public", 'say "hi"'),
        ('""""', "public", '"'),
    ],
)
def test_parse_folds_unquoted_and_keeps_quoted(text: str, schema: str, name: str) -> None:
    assert TableRef.parse(text) == TableRef(schema, name)


def test_parse_hostile_quoted_name_with_mixed_case_quoted_schema() -> None:
    ref = TableRef.parse('"Sales Dept"."Odd ""Name""; DROP TABLE x;--"')
    assert ref.schema == "Sales Dept"
    assert ref.name == 'Odd "Name"; DROP TABLE x;--'
    assert str(ref) == '"Sales Dept"."Odd ""Name""; DROP TABLE x;--"'


def test_parse_uses_the_default_schema_only_for_one_part() -> None:
    assert TableRef.parse("orders", default_schema="shop") == TableRef("shop", "orders")
    assert TableRef.parse("s.orders", default_schema="shop") == TableRef("s", "orders")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "table name '' is empty"),
        ("   ", "table name '   ' is empty"),
        ("a.b.c", "table name 'a.b.c' has 3 dotted parts"),
        ('"a"."b".c', "has 3 dotted parts"),
        ('"orders', "table name '\"orders' has an unterminated quoted identifier"),
        ('public."orders', "has an unterminated quoted identifier"),
        ('"a""', "has an unterminated quoted identifier"),
        ("1orders", "table name '1orders' is not a valid identifier at position 0"),
        ("a.", "table name 'a.' is not a valid identifier at position 2"),
        (".a", "is not a valid identifier at position 0"),
        ("a b", "table name 'a b' has unexpected 'b' at position 2"),
        ("a-b", "table name 'a-b' has unexpected '-' at position 1"),
        ("orders; DROP TABLE x", "has unexpected ';' at position 6"),
        ('"a"b', "has unexpected 'b' at position 3"),
        ('""', "table name '' must be a non-empty string"),
        ('"' + "x" * 64 + '"', "longer than PostgreSQL's 63-byte identifier limit"),
    ],
)
def test_parse_rejects_bad_names(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        TableRef.parse(text)
    assert message in str(excinfo.value)


@pytest.mark.parametrize("value", [None, 42, b"orders"])
def test_parse_rejects_non_strings(value: Any) -> None:
    with pytest.raises(ConfigError, match="is empty"):
        TableRef.parse(value)


def test_table_ref_rejects_bad_parts() -> None:
    with pytest.raises(ConfigError, match="schema name '' must be a non-empty string"):
        TableRef("", "t")
    with pytest.raises(ConfigError, match="table name 'a\\\\x00b' contains a NUL character"):
        TableRef("public", "a\x00b")
    # 63 bytes is the limit in bytes, not characters
    TableRef("public", "é" * 31)
    with pytest.raises(ConfigError, match="63-byte"):
        TableRef("public", "é" * 32)
    # e.g. from json.loads('"\\ud800"'): a typed error, not UnicodeEncodeError
    with pytest.raises(ConfigError, match="table name '\\\\ud800' is not valid Unicode text"):
        TableRef.parse('"\ud800"')


# ---- str(TableRef) and quote_ident --------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "text"),
    [
        (TableRef("public", "orders"), "public.orders"),
        (TableRef("Sales", "Orders"), '"Sales"."Orders"'),
        (TableRef("public", "my table"), 'public."my table"'),
        (TableRef("public", 'a"b'), 'public."a""b"'),
        (TableRef("s", "1abc"), 's."1abc"'),
        (TableRef("s", "a.b"), 's."a.b"'),
    ],
)
def test_str_quotes_where_needed(ref: TableRef, text: str) -> None:
    assert str(ref) == text
    assert TableRef.parse(text) == ref


_PARTS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20).filter(
    lambda part: len(part.encode()) <= 63
)


@given(_PARTS, _PARTS)
def test_str_round_trips_through_parse(schema: str, name: str) -> None:
    ref = TableRef(schema, name)
    assert TableRef.parse(str(ref)) == ref


def test_quote_ident() -> None:
    assert quote_ident("orders") == "orders"
    assert quote_ident("_o2") == "_o2"
    assert quote_ident("Orders") == '"Orders"'
    assert quote_ident('x"y') == '"x""y"'
    assert quote_ident("2x") == '"2x"'


def test_identifier_is_a_psycopg_identifier() -> None:
    ident = TableRef("Sales", 'Odd "Name"').identifier
    assert ident.as_string(None) == '"Sales"."Odd ""Name"""'


# ---- slot and publication names ------------------------------------------------------------------

GOOD_NAMES = ["a", "_", "pgsync_orders", "slot_1", "a" * 63, "_9"]
BAD_NAMES = ["", "Pgsync", "PGSYNC", "my-slot", "a" * 64, "1slot", "slot name", "slot.x", "slöt", "slot\n"]


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_slot_and_publication_names(name: str) -> None:
    assert validate_slot_name(name) == name
    assert validate_publication_name(name) == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_slot_names_are_refused_by_name(name: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        validate_slot_name(name)
    assert f"replication slot name {name!r} is not allowed" in str(excinfo.value)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_publication_names_are_refused_by_name(name: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        validate_publication_name(name)
    assert f"publication name {name!r} is not allowed" in str(excinfo.value)


@pytest.mark.parametrize("value", [None, 7, b"slot", ["slot"]])
def test_non_string_names_are_refused(value: Any) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"replication slot name {value!r} is not allowed")):
        validate_slot_name(value)
    with pytest.raises(ConfigError, match=re.escape(f"publication name {value!r} is not allowed")):
        validate_publication_name(value)
