"""Schema versions from Relation messages and DDL trigger reports, and the diffs apply takes
from them (pure; the real trigger runs in tests/apply/test_schema_changes.py)."""

from __future__ import annotations

import json

import pytest

from airflow_provider_pgsync.errors import DecodeError
from airflow_provider_pgsync.source.ddl import parse_columns, parse_rewrite
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.columns import REWRITE_COLUMN, REWRITE_DEFAULT
from airflow_provider_pgsync.state.model import ColumnInfo, PipelineState, SchemaChange, TableState
from airflow_provider_pgsync.state.schema_diff import diff_columns

ID = ColumnInfo("id", 23, -1, True)
B = ColumnInfo("b", 25, -1, False)


def known(column: ColumnInfo, attnum: int, missing: str | None = None) -> ColumnInfo:
    return ColumnInfo(column.name, column.type_oid, column.type_modifier, column.is_key, attnum, missing)


def test_a_relation_takes_attnums_from_the_trigger_and_a_drop_and_add_is_a_new_version() -> None:
    ts = TableState(TableRef("public", "t")).with_relation((ID, B), catalog=(known(ID, 1), known(B, 2)))[0]
    assert ts.columns == (known(ID, 1), known(B, 2)) and ts.schema_version == 0
    # the same Relation again: nothing changes
    assert ts.with_relation((ID, B))[0] is ts
    # b dropped and added again: the Relation looks the same, the trigger says attnum 3
    reported = ts.with_ddl(SchemaChange((known(ID, 1), known(B, 3))))
    again, change = reported.with_relation((ID, B))
    assert again.schema_version == 1 and again.columns == (known(ID, 1), known(B, 3)) and again.ddl is None
    diff = diff_columns(ts.columns, again.columns, change)
    assert [c.name for c in diff.dropped] == ["b"] and [c.name for c in diff.added] == ["b"]
    assert not diff.renamed and not diff.unproven


def test_a_rewrite_without_column_change_is_a_new_version() -> None:
    ts = TableState(TableRef("public", "t"), columns=(known(ID, 1), known(B, 2)))
    rewritten, change = ts.with_ddl(SchemaChange(ts.columns, REWRITE_COLUMN, using=True)).with_relation(
        (ID, B)
    )
    assert rewritten.schema_version == 1 and change.rewrite == REWRITE_COLUMN and change.using
    assert diff_columns(ts.columns, rewritten.columns, change).rows_rewritten


def test_a_report_that_does_not_match_the_relation_is_unproven() -> None:
    ts = TableState(TableRef("public", "t"), columns=(known(ID, 1), known(B, 2)))
    other = ColumnInfo("c", 25, -1, False)
    moved, change = ts.with_ddl(SchemaChange((known(ID, 1), known(B, 2)))).with_relation((ID, other))
    assert moved.schema_version == 1 and change.unproven
    assert diff_columns(ts.columns, moved.columns, change).unproven


def test_diffs_tell_renames_defaults_widenings_and_keys_apart() -> None:
    old = (known(ID, 1), known(B, 2), ColumnInfo("n", 23, -1, False, 3))
    renamed = (known(ID, 1), ColumnInfo("b2", 25, -1, False, 2), ColumnInfo("n", 20, -1, False, 3))
    diff = diff_columns(
        old, (*renamed, ColumnInfo("c", 25, -1, False, 4, "x")), SchemaChange(rewrite=REWRITE_COLUMN)
    )
    assert [(a.name, b.name) for a, b in diff.renamed] == [("b", "b2")]
    assert [(c.name, c.missing) for c in diff.added] == [("c", "x")]
    assert diff.widenings_only and not diff.rows_rewritten and not diff.key_changed
    assert "renamed to b2" in diff.describe() and "'x'" in diff.describe()
    assert not diff_columns(old, renamed, SchemaChange(rewrite=REWRITE_COLUMN, using=True)).widenings_only
    narrowed = (known(ID, 1), known(B, 2), ColumnInfo("n", 21, -1, False, 3))
    assert not diff_columns(old, narrowed, SchemaChange()).widenings_only
    volatile = diff_columns(
        old, (*old, ColumnInfo("d", 1184, -1, False, 4)), SchemaChange(rewrite=REWRITE_DEFAULT)
    )
    assert "volatile" in volatile.rows_rewritten
    # a stored generated column added rewrites the table, but adds no replicated column
    assert not diff_columns(old, old, SchemaChange(rewrite=REWRITE_DEFAULT)).rows_rewritten
    rekeyed = (ColumnInfo("id", 23, -1, False, 1), ColumnInfo("b", 25, -1, True, 2), old[2])
    assert diff_columns(old, rekeyed, SchemaChange()).key_changed
    assert diff_columns((ID, B), (ID, B, ColumnInfo("c", 25, -1, False)), SchemaChange()).unproven


def test_the_key_is_what_identifies_a_row_and_the_whole_row_stays_the_whole_row() -> None:
    def col(name: str, attnum: int, key: bool) -> ColumnInfo:
        return ColumnInfo(name, 23, -1, key, attnum)

    full = (col("id", 1, True), col("v", 2, True))  # REPLICA IDENTITY FULL
    keyed = (col("id", 1, True), col("v", 2, False))  # the primary key
    # a column added, dropped or renamed under REPLICA IDENTITY FULL: still the whole row
    for new in [(*full, col("c", 3, True)), full[:1], (full[0], ColumnInfo("w", 23, -1, True, 2))]:
        assert not diff_columns(full, new, SchemaChange()).key_changed, new
    # the whole row to a key, a key to the whole row, a key to other columns, to none
    changes = {
        keyed: "key changed from the whole row (id, v) to (id)",
        (col("id", 1, False), col("v", 2, True)): "key changed from the whole row (id, v) to (v)",
        (col("id", 1, False), col("v", 2, False)): "key changed from the whole row (id, v) to none",
    }
    for new, text in changes.items():
        diff = diff_columns(full, new, SchemaChange())
        assert diff.key_changed and text in diff.describe(), diff.describe()
    back = diff_columns(keyed, full, SchemaChange())
    assert "key changed from (id) to the whole row (id, v)" in back.describe()
    # a key of one column stays that key when other columns come or go
    single = (col("id", 1, True),)
    assert not diff_columns(single, keyed, SchemaChange()).key_changed
    assert not diff_columns(keyed, single, SchemaChange()).key_changed


def test_numeric_and_varchar_widenings_by_type_modifier() -> None:
    def widens(old_oid: int, old_mod: int, new_oid: int, new_mod: int) -> bool:
        a, b = ColumnInfo("v", old_oid, old_mod, False, 2), ColumnInfo("v", new_oid, new_mod, False, 2)
        return diff_columns((a,), (b,), SchemaChange()).widenings_only

    numeric = lambda p, s: (p << 16 | s) + 4  # noqa: E731 - PostgreSQL's numeric typmod
    assert widens(1700, numeric(10, 2), 1700, numeric(12, 2)) and widens(1700, numeric(10, 2), 1700, -1)
    assert not widens(1700, numeric(10, 2), 1700, numeric(12, 3)) and not widens(
        1700, numeric(10, 2), 1700, numeric(8, 2)
    )
    assert widens(1043, 24, 1043, 54) and widens(1043, 24, 25, -1) and not widens(1043, 54, 1043, 24)
    assert not widens(25, -1, 23, -1)


def test_trigger_messages_parse_and_malformed_ones_are_named() -> None:
    message = {
        "oid": 16390,
        "schema": "public",
        "name": "t",
        "using": False,
        "columns": [
            [1, "id", 23, -1, True, False, None],
            [2, "g", 23, -1, False, True, None],
            [3, "c", 25, -1, False, False, "x"],
        ],
    }
    parsed = parse_columns(json.dumps(message))
    assert parsed.table == TableRef("public", "t") and parsed.generated == ("g",)
    assert parsed.columns == (known(ID, 1), ColumnInfo("c", 25, -1, False, 3, "x"))
    assert parse_rewrite('{"oid": 5, "reason": 4}').values_changed
    assert not parse_rewrite('{"oid": 5, "reason": 1}').values_changed
    with pytest.raises(DecodeError, match=r"pgsync\.ddl"):
        parse_columns('{"oid": 1}')
    with pytest.raises(DecodeError, match="not JSON"):
        parse_rewrite("{")


def test_pending_ddl_and_attnums_survive_the_state_json() -> None:
    ts = TableState(TableRef("public", "t"), columns=(known(ID, 1), known(B, 2, "x")))
    ts = ts.with_ddl(SchemaChange((known(ID, 1),), REWRITE_DEFAULT, True, "why"))
    state = PipelineState("p", tables={ts.key: ts})
    assert PipelineState.from_json(state.to_json()).table("public.t") == ts
