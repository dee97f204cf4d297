"""The baseline job's spec and result survive JSON (operator -> Spark job -> operator)."""

from __future__ import annotations

import json
from importlib import import_module

from airflow_provider_pgsync.baseline.spec import BaselineJobSpec, BaselineResult, summary
from tests.support.baseline_spec import make_spec


def test_job_spec_round_trip() -> None:
    spec = make_spec(fetch_size=500, rows_estimate=123_456, progress_seconds=2.5)
    text = spec.to_json()
    back = BaselineJobSpec.from_json(text)
    assert back == spec
    assert isinstance(back.columns, tuple)
    assert isinstance(back.destinations, tuple)
    assert back.columns[1].name == "Größe"
    assert back.to_json() == text


def test_job_spec_defaults_round_trip() -> None:
    spec = make_spec()
    back = BaselineJobSpec.from_json(spec.to_json())
    assert (back.fetch_size, back.rows_estimate, back.progress_seconds) == (10_000, 0, 10.0)
    assert back == spec


def test_job_spec_holds_no_password() -> None:
    data = json.loads(make_spec().to_json())
    assert "password" not in {k.lower() for k in data}
    assert not import_module("airflow_provider_pgsync.baseline.spec").__dict__.keys() & {
        "PASSWORD_ENV",
        "dest_password_env",
    }


def test_result_round_trip() -> None:
    result = BaselineResult(
        ok=True,
        rows=1_000_000,
        partitions=8,
        session_seconds=1.25,
        copy_seconds=42.5,
        written=({"kind": "lake", "table": "pgsync.public__orders__base", "location": "/tmp/lake/x"},),
    )
    back = BaselineResult.from_json(result.to_json())
    assert back == result
    assert isinstance(back.written, tuple)


def test_failed_result_round_trip() -> None:
    result = BaselineResult(ok=False, error="column 'amount' holds NaN, which decimal(10,2) cannot")
    back = BaselineResult.from_json(result.to_json())
    assert back == result
    assert back.written == () and back.rows == 0


def test_result_without_written_key() -> None:
    assert BaselineResult.from_json('{"ok": true, "rows": 3}') == BaselineResult(ok=True, rows=3)


def test_session_statements_join_into_jdbcs_session_init() -> None:
    spec = make_spec(session=("BEGIN", "SET TRANSACTION SNAPSHOT 'x'"))
    assert spec.session_init == "BEGIN; SET TRANSACTION SNAPSHOT 'x'"


def test_result_reports_each_destination() -> None:
    """Per destination: written (by its name) or its error; the job as a whole failing fails all."""
    result = BaselineResult(
        ok=False,
        rows=10,
        written=({"kind": "postgres", "destination": "replica", "staging": "pgsync.s", "rows": 10},),
        error="destination lake: beyond year 294000",
        failed={"lake": "beyond year 294000"},
    )
    back = BaselineResult.from_json(result.to_json())
    assert back == result and back.failed == {"lake": "beyond year 294000"}
    assert not back.failed_as_a_whole
    assert (back.error_of("lake"), back.error_of("replica")) == ("beyond year 294000", None)

    later = back.with_failure("replica", "RuntimeError: the swap failed")
    assert later.written == () and not later.ok and not later.failed_as_a_whole
    assert later.failed == {"lake": "beyond year 294000", "replica": "RuntimeError: the swap failed"}
    assert later.error == (
        "destination lake: beyond year 294000; destination replica: RuntimeError: the swap failed"
    )
    assert summary({"a": "down", "b": "down", "c": "full"}) == "destinations a, b: down; destination c: full"

    whole = BaselineResult(ok=False, error="the snapshot is gone")
    assert whole.failed_as_a_whole and whole.error_of("anyone") == "the snapshot is gone"
    assert BaselineResult(ok=True).error_of("lake") is None
    assert BaselineResult.from_json('{"ok": false, "error": "x"}').failed == {}
