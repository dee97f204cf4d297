"""The count of Spark driver starts (tests/spark_starts.py): a real driver is counted with its
test and seconds, and the summary adds them up."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from airflow_provider_pgsync.hooks.spark_submit import driver_environment
from tests import spark_starts


def test_a_real_driver_is_counted_with_its_test_and_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", os.environ.get("SPARK_SUBMIT_OPTS", ""))  # restored after
    spark_home = driver_environment().get("SPARK_HOME") or os.environ["SPARK_HOME"]
    folder = tmp_path / "run"
    spark_starts.enter(folder, "tests/x/test_one.py::test_a")
    env = {**os.environ, **driver_environment()}
    subprocess.run(
        [f"{spark_home}/bin/spark-submit", "--version"], check=True, capture_output=True, timeout=120, env=env
    )
    spark_starts.enter(folder, "tests/x/test_one.py::test_b")  # starts nothing

    starts = spark_starts.driver_starts(folder)
    assert [(s.test, s.exited) for s in starts] == [("tests/x/test_one.py::test_a", True)]
    assert 0 < starts[0].seconds < 120

    out = tmp_path / "spark-starts.json"
    lines = spark_starts.finish(folder, out)
    assert lines[0].startswith("Spark driver JVMs: 1 started, ")
    assert "tests/x/test_one.py" in lines[1]
    written = json.loads(out.read_text())
    assert written["starts"] == 1 and written["drivers"][0]["pid"] == starts[0].pid
    assert not folder.exists(), "the logs are removed once counted"


def test_a_driver_killed_before_its_exit_is_counted_and_said(tmp_path: Path) -> None:
    test_folder = tmp_path / "t"
    test_folder.mkdir()
    (test_folder / "test.txt").write_text("tests/y.py::test_k")
    (test_folder / "jvm-4242-2026-11-28_10-00-00.log").write_text(
        "[2026-11-28T10:00:00.100+0000][0.004s] Version: 17\n"
        "[2026-11-28T10:00:00.100+0000][0.004s] CPUs: 2 total, 2 available\n"
    )
    (test_folder / "jvm-4343-2026-11-28_10-00-01.log").write_text("")  # failed to start: not counted
    starts = spark_starts.driver_starts(tmp_path)
    assert [(s.test, s.pid, s.exited) for s in starts] == [("tests/y.py::test_k", 4242, False)]
    assert spark_starts.summary(starts)[-1] == "  (1 ended without exit: seconds to their last log line)"


def test_a_path_the_jvm_would_split_turns_counting_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(spark_starts.RUN_VARIABLE, str(tmp_path / "a,b"))
    assert spark_starts.run_folder(tmp_path) is None


def test_resident_drivers_are_counted_apart_with_their_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    monkeypatch.setenv(spark_starts.RUN_VARIABLE, str(folder))
    spark_starts.resident(7)  # a worker's, at its end
    out = tmp_path / "spark-starts.json"
    lines = spark_starts.finish(folder, out)
    assert lines[0] == "Spark driver JVMs: 0 started, 0 s in all"
    assert lines[1].startswith("  and 1 resident driver(s) (one per worker) that ran 7 job(s)")
    assert json.loads(out.read_text())["resident_jobs"] == 7
