"""The lake's catalog in a PostgreSQL database (``metastore: postgres``), with real PostgreSQL,
Spark and Airflow: the first job creates the metastore's schema once, and a user's ``spark-sql``
(docs/capture-and-baseline.md's command) keeps querying a table's view while a compaction and a
rebaseline of that table run. Every answer is the table's rows (the old version or the new, which
hold the same rows here), never an error and never a part of them; nobody waits for the reader."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.hooks.lake_metastore import JDBC_DRIVER_JAR, resolved
from airflow_provider_pgsync.hooks.spark_submit import driver_environment
from airflow_provider_pgsync.operators.compact import PgCompactOperator
from pgcluster import SUPERUSER, dev_password
from tests.conftest import Database, MakeReplica
from tests.dags.conftest import CDC_GREEN, MakePipelineDags, task_states

# the subject is a PostgreSQL metastore of the lake's own, read by spark-sql meanwhile:
# not the worker's resident driver (tests/support/resident_spark.py)
pytestmark = pytest.mark.spark_submit

TABLE = "public.items"
DEADLINE_S = 300
QUERY = (
    "SELECT unix_millis(current_timestamp()), count(*), sum(id), sum(length(v)) FROM pgsync.public__items;\n"
)


def _reader_properties(path: Path, lake: Path) -> Path:
    """The reader's Spark settings as docs/capture-and-baseline.md gives them, in a private properties
    file (the password is in no command line)."""
    conf = resolved(
        LakeDestination.from_config(
            {"warehouse": str(lake), "metastore": "postgres", "metastore_conn_id": "pgsync_metastore"}
        )
    ).spark_conf()  # the URL of connection pgsync_metastore, as the jobs get it
    conf |= {
        "spark.hadoop.javax.jdo.option.ConnectionUserName": SUPERUSER,
        "spark.hadoop.javax.jdo.option.ConnectionPassword": dev_password(),
        "spark.driver.extraClassPath": JDBC_DRIVER_JAR,
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.writelines(f"{k}={v}\n" for k, v in conf.items())
    return path


class Reader:
    """``spark-sql -f`` running ``QUERY`` over and over, each answer with its time."""

    def __init__(self, properties: Path, work: Path, queries: int) -> None:
        script = work / "reader.sql"
        script.write_text(QUERY * queries)
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "spark-sql"),
                "--properties-file",
                str(properties),
                "-S",
                "-f",
                str(script),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **driver_environment()},
            cwd=work,
        )
        self.answers: list[tuple[float, tuple[str, ...]]] = []
        self.errors: list[str] = []
        self.log: list[str] = []  # its stderr
        self._threads = [
            threading.Thread(target=self._read_answers, daemon=True),
            threading.Thread(target=self._read_errors, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read_answers(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            fields = line.split()
            if len(fields) == 4 and fields[0].isdigit():
                self.answers.append((int(fields[0]) / 1000, tuple(fields[1:])))

    def _read_errors(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line.rstrip())
            if "error" in line.lower() or "exception" in line.lower():
                self.errors.append(line.rstrip())

    def wait_answers(self, count: int) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while len(self.answers) < count:
            assert self.process.poll() is None, "the reader ended:\n" + "\n".join(self.log[-40:])
            assert time.monotonic() < deadline, "the reader answered nothing"
            time.sleep(0.1)

    def stop(self) -> tuple[int | None, list[str]]:
        """Stop the reader: its exit code if it had ended by itself (None: it was still reading),
        and the errors it logged until then (not those of its shutdown)."""
        ended, errors = self.process.poll(), list(self.errors)
        self.process.terminate()
        self.process.wait(timeout=60)
        for thread in self._threads:
            thread.join(timeout=60)
        return ended, errors


def _expected(database: Database) -> tuple[str, ...]:
    ((count, ids, lengths),) = database.execute("SELECT count(*), sum(id), sum(length(v)) FROM items")
    return (str(count), str(ids), str(lengths))


def _compact(pipeline: Any) -> tuple[float, float]:
    kwargs = pipeline.config.compact_kwargs()["lake"]
    started = time.time()
    (result,) = PgCompactOperator(task_id="compact", **kwargs).execute({})  # type: ignore[arg-type]
    assert result["segments"] > 0, result
    return started, time.time()


@pytest.mark.slow
def test_a_reader_sees_whole_versions_during_a_compaction_and_a_rebaseline(
    database: Database,
    make_replica: MakeReplica,
    make_pipeline_dags: MakePipelineDags,
    tmp_path: Path,
    spark_drivers: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lake = tmp_path / "lake"
    monkeypatch.setenv("PGSYNC_LAKE", str(lake))
    metastore = make_replica("metastore")  # a new database, connection pgsync_metastore
    database.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
    database.execute("INSERT INTO items SELECT g, 'r' || g FROM generate_series(1, 60000) g")
    config = {"kind": "lake", "metastore": "postgres", "metastore_conn_id": "pgsync_metastore"}
    pipeline = make_pipeline_dags(["items"], destinations=[config])
    assert str(pipeline.run("setup").state) == "success"
    run = pipeline.run("baseline", run_conf=pipeline.every_table())
    assert str(run.state) == "success", task_states(run)
    # the first job made the schema, deliberately, and Hive's version is recorded
    assert metastore.execute('SELECT "VERSION_COMMENT" FROM "VERSION"') == [("Set by pgsync",)]
    assert not (lake / "metastore_db").exists()
    for i in range(3):  # segments for the compaction to fold
        database.execute("UPDATE items SET v = v || %s WHERE id %% 7 = %s", (f"-{i}", i))
        database.execute("DELETE FROM items WHERE id %% 11 = %s", (i,))
        assert task_states(pipeline.run("cdc")) == CDC_GREEN
    expected = _expected(database)

    reader = Reader(_reader_properties(tmp_path / "reader.properties", lake), tmp_path, 100_000)
    try:
        reader.wait_answers(1)
        compacted = _compact(pipeline)
        started = time.time()
        run = pipeline.run("baseline", run_conf={"tables": [TABLE], "mode": "rebaseline"})
        rebaselined = (started, time.time())
        assert str(run.state) == "success", task_states(run)
        during = len(reader.answers)
        reader.wait_answers(during + 1)  # an answer after the new base's swap
    finally:
        ended, errors = reader.stop()
    assert ended is None, f"the reader failed: {errors[-5:]}"
    assert not errors, errors[-5:]
    wrong = [(t, a) for t, a in reader.answers if a != expected]
    assert not wrong, f"answers other than the table's {expected}: {wrong[:5]}"
    for what, (start, end) in (("compaction", compacted), ("rebaseline", rebaselined)):
        assert any(start <= t <= end for t, _ in reader.answers), f"no answer during the {what}"
    assert task_states(pipeline.run("cdc")) == CDC_GREEN
    assert pipeline.state().table(TABLE).phase.kind == "Ready"
