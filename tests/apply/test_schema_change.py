"""What apply says and records after a Rebaseline or Error answer to a schema change (pure)."""

from __future__ import annotations

import pytest

from airflow_provider_pgsync.apply.destination import SchemaAnswer, SchemaDecision, schema_decision
from airflow_provider_pgsync.apply.schema_change import (
    check_on_schema_change,
    rebaseline_remedy,
    schema_phase,
    type_text,
)
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.state.model import ColumnInfo, SchemaChange
from airflow_provider_pgsync.state.phases import Errored, Init, Ready
from airflow_provider_pgsync.state.schema_diff import diff_columns

ID = ColumnInfo("id", 23, -1, True)
B = ColumnInfo("b", 23, -1, False)


@pytest.mark.parametrize(
    ("oid", "typmod", "text"),
    [
        (23, -1, "integer"),
        (25, -1, "text"),
        (20, -1, "bigint"),
        (1043, 14, "character varying(10)"),
        (1043, -1, "character varying"),
        (1042, 9, "character(5)"),
        (1700, (12 << 16 | 2) + 4, "numeric(12,2)"),
        (1700, -1, "numeric"),
        (1009, -1, "text[]"),
        (1007, -1, "integer[]"),
        (1184, -1, "timestamp with time zone"),
        (16385, -1, "type OID 16385"),
    ],
)
def test_type_text_names_types_as_format_type_does(oid: int, typmod: int, text: str) -> None:
    assert type_text(oid, typmod) == text


def describe(old: list[ColumnInfo], new: list[ColumnInfo]) -> str:
    return diff_columns(old, new, SchemaChange()).describe(type_text)


def numbered(name: str, type_oid: int, is_key: bool, attnum: int, type_modifier: int = -1) -> ColumnInfo:
    return ColumnInfo(name, type_oid, type_modifier, is_key, attnum=attnum)


def test_a_diff_says_what_changed_with_type_names() -> None:
    old = [numbered("id", 23, True, 1), numbered("b", 23, False, 2)]
    retyped = [old[0], numbered("b", 25, False, 2)]
    assert describe(old, retyped) == "column b changed type from integer to text"
    assert describe(old, [old[0]]) == "column b (integer) dropped"
    added = [*old, numbered("c", 1043, False, 3, 24)]
    assert describe(old, added) == "column c (character varying(20)) added"
    whole_row = [old[0], numbered("b", 23, True, 2)]
    assert describe(old, whole_row) == "key changed from (id) to the whole row (id, b)"
    assert describe(old, old) == "the table's DDL changed no column"
    assert describe(old, [old[0], numbered("b_renamed", 23, False, 2)]) == "column b renamed to b_renamed"
    replaced = [old[0], numbered("c", 23, False, 3)]  # dropped + added
    assert describe(old, replaced) == "column c (integer) added; column b (integer) dropped"
    # without attnums nothing is told apart: the names, and why
    unknown = describe([ID, B], [ID, ColumnInfo("c", 23, -1, False)])
    assert unknown == (
        "column c (integer) added; column b (integer) dropped; columns not matched by identity: the columns' "
        "identities are unknown (no active DDL trigger when they changed)"
    )


def test_rebaseline_goes_to_init_and_fail_to_errored_with_the_remedy() -> None:
    decision = SchemaDecision(SchemaAnswer.REBASELINE)
    change = "column b changed type from integer to text"
    phase, reason = schema_phase("public.t", "lake", decision, change, Ready(), on_schema_change="rebaseline")
    assert phase == Init()
    assert reason == (
        "table public.t changed its columns (column b changed type from integer to text); "
        "destination lake cannot follow it without a rebaseline"
    )
    phase, reason = schema_phase(
        "public.t",
        "lake",
        decision,
        change,
        Ready(),
        on_schema_change="fail",
        baseline_dag_id="pgsync_p_baseline",
    )
    assert isinstance(phase, Errored) and phase.retry == "none" and phase.previous == "Ready"
    assert phase.reason == reason and reason.endswith("(on_schema_change: fail)") and change in reason
    assert phase.solution == (
        'rebaseline public.t in lake: trigger pgsync_p_baseline with tables=["public.t"], '
        'destinations=["lake"], mode=rebaseline'
    )


def test_an_error_answer_is_errored_for_a_manual_retry_and_keeps_the_destinations_reason() -> None:
    decision = SchemaAnswer.ERROR.because("the column is referenced by a view")
    phase, reason = schema_phase(
        "public.t", "dw", decision, "column b (integer) dropped", Ready(), on_schema_change="rebaseline"
    )
    assert isinstance(phase, Errored) and phase.retry == "manual"
    assert "destination dw: the column is referenced by a view" in reason
    assert "change table public.t in destination dw by hand" in phase.solution
    assert "rebaseline public.t in dw" in phase.solution


def test_a_destination_may_answer_with_or_without_a_reason() -> None:
    assert schema_decision(SchemaAnswer.CONTINUE) == SchemaDecision(SchemaAnswer.CONTINUE, "")
    because = SchemaAnswer.REBASELINE.because("the lake cannot re-type a column")
    assert schema_decision(because) is because and because.answer is SchemaAnswer.REBASELINE
    with pytest.raises(TypeError, match="must return a SchemaAnswer"):
        schema_decision("Rebaseline")  # type: ignore[arg-type]


def test_remedy_without_a_baseline_dag_names_the_operator() -> None:
    assert "PgBaselineOperator" in rebaseline_remedy("public.t", "lake", None)


@pytest.mark.parametrize(
    "value", [None, 5, True, "", "FAIL", "rebaseline ", "fail\x00", "x" * 10_000, ["fail"]]
)
def test_on_schema_change_refuses_anything_else_naming_the_option(value: object) -> None:
    with pytest.raises(
        ConfigError, match=r"^on_schema_change must be one of rebaseline, fail, not "
    ) as caught:
        check_on_schema_change(value)
    assert len(str(caught.value)) < 300
    assert check_on_schema_change("fail") == "fail"
