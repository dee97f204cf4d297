"""A schema change's rebaseline survives a retried apply (real PostgreSQL, real Airflow
``dag.test()``, no Spark): the SQLite example destination of docs/writing-a-destination.md,
made unreachable for one table in apply's first try only.

The first try sends ``public.items`` back to Init (its column changed type), saves that, then
fails (the destination could not be reached for ``public.other``); the retry finds the table in
Init already and decides nothing about it. The request is in the state, so the retry lists it:
the rebaseline is triggered and the run fails naming the table (before the fix: a green run
with the table stuck in Init). A later run sends the same request again: it triggers no second
baseline run and fails again, naming the run triggered; the baseline then ends the request.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from airflow_provider_pgsync.dags.schema_changes import RUN_ID_PREFIX
from airflow_provider_pgsync.state.phases import Init
from tests.conftest import Database
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, PipelineDags, task_states, triggered_baselines
from tests.support.sqlite_destination import PAGE, source_text, sqlite_text

FLAKY = '''

from pathlib import Path as _Path

from airflow_provider_pgsync.errors import DestinationUnavailableError as _Unavailable


class FlakySqlite(SqliteDestination):
    """The example; unreachable for table public.other once while ``<path>.unavailable`` exists."""

    def __init__(self, path, name="sqlite"):
        super().__init__(path, name)
        self.armed = _Path(path + ".unavailable")

    def apply(self, table, columns, changes, upto):
        if str(table) == "public.other" and self.armed.exists():
            self.armed.unlink()
            raise _Unavailable(f"destination {self.name} could not be reached (the test's injected fault)")
        return super().apply(table, columns, changes, upto)
'''


@pytest.fixture
def flaky_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    block = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)[0]
    name = f"flaky_dest_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "modules"
    folder.mkdir()
    (folder / f"{name}.py").write_text(block + FLAKY)
    monkeypatch.syspath_prepend(str(folder))
    return name


def _pipeline(database: Database, make: MakePipelineDags, module: str, path: Path) -> PipelineDags:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, b int, note text)")
    database.execute("CREATE TABLE other (id int PRIMARY KEY, v text)")
    sqlite = {"kind": "custom", "class": f"{module}.FlakySqlite", "name": "sqlite", "path": str(path)}
    pipeline = make(["items", "other"], destinations=[sqlite], schedules={"retries": 1, "retry_delay": "0s"})
    assert str(pipeline.run("setup").state) == "success"
    conf = {"tables": ["public.items", "public.other"], "mode": "rebaseline"}
    assert str(pipeline.run("baseline", run_conf=conf).state) == "success"
    database.execute("INSERT INTO items SELECT g, g, 'n' || g FROM generate_series(1, 20) g")
    database.execute("INSERT INTO other SELECT g, 'v' || g FROM generate_series(1, 10) g")
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    return pipeline


def _apply_tries(run: object) -> int:
    return next(t.try_number for t in run.get_task_instances() if t.task_id == "apply")  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_retried_apply_still_triggers_the_rebaseline_once_and_fails_the_run(
    database: Database,
    make_pipeline_dags: MakePipelineDags,
    flaky_module: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "dest.sqlite"
    pipeline = _pipeline(database, make_pipeline_dags, flaky_module, path)
    name = pipeline.config.name
    before = triggered_baselines(pipeline)
    Path(str(path) + ".unavailable").touch()  # apply's first try cannot reach it for public.other
    capsys.readouterr()

    database.execute("ALTER TABLE items ALTER COLUMN b TYPE text")
    database.execute("UPDATE items SET b = 'x' || id WHERE id <= 3")
    database.execute("UPDATE other SET v = 'changed' WHERE id <= 4")
    cdc = pipeline.run("cdc")

    assert not Path(str(path) + ".unavailable").exists(), "the first try did not reach the fault"
    assert _apply_tries(cdc) == 2, "apply was not retried"
    # not green: the retry decided nothing about items, but its request is in the state
    assert str(cdc.state) == "failed"
    assert task_states(cdc) == {
        "capture": "success", "apply": "success", "rebaselines": "success",
        "trigger_rebaseline[0]": "success", "outcome": "failed",
    }, task_states(cdc)  # fmt: skip
    state = pipeline.state()
    phase = state.table("public.items").destination("sqlite").phase
    assert isinstance(phase, Init) and phase.pending
    assert "column b changed type from integer to text" in phase.reason
    assert state.table("public.other").destination("sqlite").phase.kind == "Ready"
    assert sqlite_text(path, "public.other") == source_text(database, "public.other")  # applied by the retry
    runs = triggered_baselines(pipeline)
    assert len(runs) == len(before) + 1, runs
    run_id, conf = runs[-1]
    assert run_id == f"{RUN_ID_PREFIX}{phase.request}"
    assert conf == {"tables": ["public.items"], "destinations": ["sqlite"], "mode": "rebaseline"}
    printed = capsys.readouterr().out
    assert "SchemaRebaselineError" in printed, printed[-3000:]
    assert (
        "  - table public.items changed its columns (column b changed type from integer to text); "
        "destination sqlite cannot follow it without a rebaseline; rebaseline triggered: "
        f"pgsync_{name}_baseline run {run_id}\n"
    ) in printed, printed[-3000:]

    # the next run sends the same request again: no second baseline run, and it fails again
    database.execute("UPDATE other SET v = 'again' WHERE id = 5")
    again = pipeline.run("cdc")
    assert str(again.state) == "failed"
    assert task_states(again) == {
        "capture": "success", "apply": "success", "rebaselines": "success",
        "trigger_rebaseline[0]": "skipped", "outcome": "failed",
    }, task_states(again)  # fmt: skip
    assert triggered_baselines(pipeline) == runs, "a second baseline run was triggered"
    printed = capsys.readouterr().out
    earlier = f"rebaseline triggered earlier: pgsync_{name}_baseline run {run_id} (queued)"
    assert earlier in printed, printed[-3000:]
    assert sqlite_text(path, "public.other") == source_text(database, "public.other")  # streams on

    # the requested baseline (its conf) ends the request; cdc brings the table back, green
    assert str(pipeline.run("baseline", run_conf=conf).state) == "success"
    database.execute("INSERT INTO items VALUES (21, 'after', 'the rebaseline')")
    cdc = pipeline.run("cdc")
    assert task_states(cdc) == CDC_GREEN, task_states(cdc)
    assert pipeline.state().table("public.items").destination("sqlite").phase.kind == "Ready"
    assert sqlite_text(path, "public.items") == source_text(database, "public.items")
    assert triggered_baselines(pipeline) == runs
