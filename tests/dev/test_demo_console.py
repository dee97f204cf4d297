"""`make demo`'s console: pgsync's lines on the terminal, all output in the log file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from demo_console import shown

DEV = Path(__file__).resolve().parents[2] / "dev"
PGSYNC = "[airflow.task.operators.airflow_provider_pgsync.operators.baseline.PgBaselineOperator] loc=b.py:1"
HOOK = "[airflow.task.hooks.airflow_provider_pgsync.hooks.spark_submit.BaselineSubmitHook] loc=s.py:9"


def _line(level: str, message: str, logger: str) -> str:
    return f"2026-11-25T00:20:11.908601Z [{level:<9}] {message} {logger}\n"


def test_pgsync_messages_are_shown_and_airflow_chatter_is_not() -> None:
    assert shown(_line("info", "baseline public.orders: 5 columns, 2.4 MB", PGSYNC)) == (
        "  baseline public.orders: 5 columns, 2.4 MB"
    )
    assert shown(_line("info", "Task instance state updated", "[airflow.api_fastapi.routes] x=1")) is None
    assert shown(_line("info", "[DAG TEST] starting task_id=x", "[airflow.sdk.definitions.dag]")) is None
    assert shown("26/11/25 00:23:22 WARN Utils: Your hostname resolves to a loopback address\n") is None


def test_spark_jobs_show_only_their_pgsync_lines() -> None:
    progress = "pgsync baseline: public.orders: 1/1 partitions (100%), 24,987 rows, 1,626 rows/s"
    assert shown(_line("info", progress, HOOK)) == f"  {progress}"
    assert shown(_line("info", "WARNING: Using incubator modules: jdk.incubator.vector", HOOK)) is None
    assert shown(_line("info", "Spark-Submit cmd: /venv/bin/spark-submit --master local[*]", HOOK)) is None


def test_errors_are_shown_from_any_logger_and_pgsync_warnings_are_marked() -> None:
    assert shown(_line("error", "Task failed with exception", "[task] loc=x.py:1")) == (
        "  ERROR: Task failed with exception"
    )
    assert shown(_line("warning", "column c is created as text", PGSYNC)) == (
        "  WARNING: column c is created as text"
    )
    assert shown(_line("warning", "deprecated thing", "[py.warnings] category=X")) is None


def test_routine_pgsync_lines_stay_in_the_log() -> None:
    capture = "[airflow_provider_pgsync.capture.run] loc=run.py:229"
    assert shown(_line("info", "wrote segment public.t/v0000/0-1-0000.parquet (5 rows)", capture)) is None
    assert shown(_line("info", "capture done in 0.2 s: 1,276 changes", capture)) == (
        "  capture done in 0.2 s: 1,276 changes"
    )


def test_a_compaction_shows_its_progress_and_summary_not_each_step() -> None:
    step = "pgsync compaction: public.orders: 8 of 8 bucket(s) rewritten (38,315 rows in 8 file(s))"
    progress = "pgsync compaction: public.orders: 3/8 tasks (37%), 14,000 rows"
    assert shown(_line("info", step, HOOK)) is None
    assert shown(_line("info", progress, HOOK)) == f"  {progress}"


def test_a_child_process_output_goes_to_the_log_and_only_picked_lines_to_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / "demo.log"
    chatter = _line("info", "Filling up the DagBag", "[airflow.dag_processing.dagbag.DagBag]")
    picked = _line("info", "created replication slot pgsync_demo at 0/FC33DE0", PGSYNC)
    script = textwrap.dedent(
        f"""
        import subprocess, sys
        from pathlib import Path
        sys.path.insert(0, {str(DEV)!r})
        from demo_console import QuietConsole
        with QuietConsole(Path({str(log)!r})) as console:
            console.say("demo: [1/2] step one")
            print({chatter!r}, end="")
            child = "import sys; sys.stderr.write(" + repr({picked!r}) + ")"
            subprocess.run([sys.executable, "-c", child], check=True)
            console.say("demo: [2/2] step two")
        print("after: " + str(console.lines))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.splitlines() == [
        "demo: [1/2] step one",
        "  created replication slot pgsync_demo at 0/FC33DE0",
        "demo: [2/2] step two",
        "after: 4",
    ]
    assert out.stderr == ""
    assert log.read_text() == f"demo: [1/2] step one\n{chatter}{picked}demo: [2/2] step two\n"
