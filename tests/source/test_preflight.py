"""Tests of the pure preflight checks over hand-built facts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from airflow_provider_pgsync.errors import PreflightError, Problem
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.preflight import SourceFacts, TableFacts, find_problems

ORDERS = TableRef("public", "orders")
ODD = TableRef("Sales", 'Odd "T"')


def _table(table: TableRef = ORDERS, **changes: Any) -> TableFacts:
    facts = TableFacts(table, exists=True, relkind="r", replica_identity="d", has_primary_key=True)
    return replace(facts, **changes)


def _facts(**changes: Any) -> SourceFacts:
    """A source that is fit in every respect, with ``changes`` applied."""
    facts = SourceFacts(
        database="shop",
        role="etl",
        server_version_num=150004,
        wal_level="logical",
        role_superuser=False,
        role_replication=True,
        can_create_in_database=True,
        max_replication_slots=10,
        slots_in_use=2,
        slot_name="pgsync_slot",
        slot_plugin=None,
        slot_database=None,
        publication_exists=False,
        tables=(_table(),),
    )
    return replace(facts, **changes)


def test_a_fit_source_has_no_problems() -> None:
    assert find_problems(_facts()) == []


def test_a_fit_source_with_its_existing_slot_and_publication_has_no_problems() -> None:
    facts = _facts(
        slot_plugin="pgoutput",
        slot_database="shop",
        slots_in_use=10,  # all in use, but one of them is ours
        publication_exists=True,
        can_create_in_database=False,
        tables=(_table(is_owner=False, in_publication=True),),
    )
    assert find_problems(facts) == []


# ---- server ------------------------------------------------------------------------------------


def test_old_server() -> None:
    assert find_problems(_facts(server_version_num=130011)) == [
        Problem(
            "server",
            "PostgreSQL 13 is too old; pgsync needs 14 or newer",
            "upgrade the source server to PostgreSQL 14 or newer",
        )
    ]


def test_oldest_supported_server_is_fine() -> None:
    assert find_problems(_facts(server_version_num=140000)) == []


@pytest.mark.parametrize("level", ["replica", "minimal"])
def test_wal_level_not_logical(level: str) -> None:
    assert find_problems(_facts(wal_level=level)) == [
        Problem(
            "server setting wal_level",
            f"wal_level is {level!r}; logical decoding needs 'logical'",
            "ALTER SYSTEM SET wal_level = logical; then restart the server",
        )
    ]


# ---- role --------------------------------------------------------------------------------------


def test_role_without_replication() -> None:
    assert find_problems(_facts(role="Etl User", role_replication=False)) == [
        Problem(
            'role "Etl User"',
            "may not use replication slots (neither REPLICATION nor superuser)",
            'ALTER ROLE "Etl User" WITH REPLICATION;',
        )
    ]


def test_superuser_needs_no_replication_attribute_nor_privileges() -> None:
    facts = _facts(
        role_superuser=True,
        role_replication=False,
        can_create_in_database=False,
        tables=(_table(can_select=False, is_owner=False),),
    )
    assert find_problems(facts) == []


def test_role_that_may_not_create_the_publication() -> None:
    assert find_problems(_facts(can_create_in_database=False)) == [
        Problem(
            "role etl",
            "may not create a publication in database shop",
            "GRANT CREATE ON DATABASE shop TO etl;",
        )
    ]


def test_create_privilege_is_not_needed_when_the_publication_exists() -> None:
    assert find_problems(_facts(can_create_in_database=False, publication_exists=True)) == []


# ---- slot --------------------------------------------------------------------------------------


def test_no_free_slot() -> None:
    assert find_problems(_facts(slots_in_use=10, max_replication_slots=10)) == [
        Problem(
            "replication slot pgsync_slot",
            "no free slot: 10 of max_replication_slots=10 are in use",
            "drop an unused slot (SELECT pg_drop_replication_slot('name');) or "
            "ALTER SYSTEM SET max_replication_slots = 14; then restart the server",
        )
    ]


def test_one_free_slot_is_enough() -> None:
    assert find_problems(_facts(slots_in_use=9, max_replication_slots=10)) == []


def test_slot_with_another_plugin() -> None:
    facts = _facts(slot_plugin="test_decoding", slot_database="shop")
    assert find_problems(facts) == [
        Problem(
            "replication slot pgsync_slot",
            "exists already with plugin 'test_decoding' in database 'shop'; "
            "pgsync needs a pgoutput slot in 'shop'",
            "choose another slot name, or SELECT pg_drop_replication_slot('pgsync_slot'); "
            "if nothing else uses it",
        )
    ]


def test_pgoutput_slot_of_another_database() -> None:
    (problem,) = find_problems(_facts(slot_plugin="pgoutput", slot_database="crm"))
    assert problem.subject == "replication slot pgsync_slot"
    assert problem.problem == (
        "exists already with plugin 'pgoutput' in database 'crm'; pgsync needs a pgoutput slot in 'shop'"
    )


# ---- tables ------------------------------------------------------------------------------------


def test_missing_table() -> None:
    assert find_problems(_facts(tables=(TableFacts(ODD, exists=False),))) == [
        Problem(
            'table "Sales"."Odd ""T"""',
            "does not exist",
            "create it, or correct the name in the pipeline configuration "
            '(quoted names are case-sensitive: "MyTable" is not mytable)',
        )
    ]


@pytest.mark.parametrize(
    ("relkind", "kind"),
    [
        ("v", "view"),
        ("m", "materialized view"),
        ("f", "foreign table"),
        ("S", "sequence"),
        ("i", "index"),
        ("c", "relation of kind 'c'"),
    ],
)
def test_not_a_table(relkind: str, kind: str) -> None:
    assert find_problems(_facts(tables=(_table(relkind=relkind),))) == [
        Problem("table public.orders", f"is a {kind}, not a table", "replicate the underlying table")
    ]


def test_partitioned_table_is_fine() -> None:
    assert find_problems(_facts(tables=(_table(relkind="p"),))) == []


def test_replica_identity_nothing() -> None:
    assert find_problems(_facts(tables=(_table(ODD, replica_identity="n"),))) == [
        Problem(
            'table "Sales"."Odd ""T"""',
            "has REPLICA IDENTITY NOTHING, so updates and deletes cannot be replicated",
            'ALTER TABLE "Sales"."Odd ""T""" REPLICA IDENTITY FULL;  (or DEFAULT, if it has a primary key)',
        )
    ]


def test_no_key_and_replica_identity_default() -> None:
    assert find_problems(_facts(tables=(_table(has_primary_key=False),))) == [
        Problem(
            "table public.orders",
            "has no primary key and REPLICA IDENTITY DEFAULT, so updates and deletes cannot be replicated",
            "ALTER TABLE public.orders ADD PRIMARY KEY (<key columns>);  or  "
            "ALTER TABLE public.orders REPLICA IDENTITY FULL;",
        )
    ]


@pytest.mark.parametrize("identity", ["f", "i"])
def test_full_or_index_identity_without_a_key_is_fine(identity: str) -> None:
    table = _table(replica_identity=identity, has_primary_key=False)
    assert find_problems(_facts(tables=(table,))) == []


def test_table_the_role_may_not_read() -> None:
    assert find_problems(_facts(tables=(_table(can_select=False),))) == [
        Problem("table public.orders", "role etl may not read it", "GRANT SELECT ON public.orders TO etl;")
    ]


def test_table_the_role_does_not_own() -> None:
    assert find_problems(_facts(tables=(_table(is_owner=False),))) == [
        Problem(
            "table public.orders",
            "role etl does not own it, so it cannot add it to the publication",
            "ALTER TABLE public.orders OWNER TO etl;  or let the owner add it to the publication",
        )
    ]


# ---- everything at once ------------------------------------------------------------------------


def test_every_problem_is_reported_together_in_order() -> None:
    facts = _facts(
        server_version_num=130000,
        wal_level="replica",
        role_replication=False,
        can_create_in_database=False,
        slot_plugin="test_decoding",
        slot_database="shop",
        tables=(
            _table(TableRef("public", "a"), has_primary_key=False),
            TableFacts(TableRef("public", "gone"), exists=False),
            _table(TableRef("public", "v"), relkind="v"),
            _table(TableRef("public", "b"), replica_identity="n", can_select=False, is_owner=False),
        ),
    )
    problems = find_problems(facts)
    assert [(p.subject, p.fix.split(";")[0]) for p in problems] == [
        ("server", "upgrade the source server to PostgreSQL 14 or newer"),
        ("server setting wal_level", "ALTER SYSTEM SET wal_level = logical"),
        ("role etl", "ALTER ROLE etl WITH REPLICATION"),
        ("role etl", "GRANT CREATE ON DATABASE shop TO etl"),
        (
            "replication slot pgsync_slot",
            "choose another slot name, or SELECT pg_drop_replication_slot('pgsync_slot')",
        ),
        ("table public.a", "ALTER TABLE public.a ADD PRIMARY KEY (<key columns>)"),
        (
            "table public.gone",
            "create it, or correct the name in the pipeline configuration "
            '(quoted names are case-sensitive: "MyTable" is not mytable)',
        ),
        ("table public.v", "replicate the underlying table"),
        ("table public.b", "ALTER TABLE public.b REPLICA IDENTITY FULL"),
        ("table public.b", "GRANT SELECT ON public.b TO etl"),
        ("table public.b", "ALTER TABLE public.b OWNER TO etl"),
    ]

    error = PreflightError(problems)
    assert error.problems == tuple(problems)
    text = str(error)
    assert text.startswith("preflight found 11 problem(s):\n  - server: PostgreSQL 13 is too old")
    for problem in problems:
        assert f"  - {problem.subject}: {problem.problem}\n    fix: {problem.fix}" in text
