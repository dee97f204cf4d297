"""Test-only: one resident Spark driver per pytest-xdist worker (a pytest plugin).

Tests marked ``spark`` (tests/tiers.py) run their Spark jobs and lake checks in the worker's
resident driver (``tests/support/resident_driver.py``) instead of starting a driver JVM each:
``BaselineSubmitHook.submit`` hands the job (its arguments, environment and Spark settings, as
spark-submit would get them) to that driver, and ``tests.apply.lake.lake_session`` its steps.
The lakes' catalog is then the driver's PostgreSQL metastore (in the worker's test cluster).

The real ``spark-submit`` path stays the subject of the tests marked ``spark_submit`` (the
DEVELOPMENT.md's test section lists them: masters, the Derby metastore, password files, TLS, the
drivers' class archive, killed jobs). ``PGSYNC_TEST_SPARK=submit`` runs every test that way.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import pytest
from airflow.exceptions import AirflowException
from psycopg.conninfo import make_conninfo

from airflow_provider_pgsync.baseline.passfile import pass_entry, write_passfile
from airflow_provider_pgsync.hooks.spark_submit import BaselineSubmitHook, driver_environment
from pgcluster import SUPERUSER, Cluster, dev_password
from tests import spark_starts
from tests.support import resident_driver

REPO = Path(__file__).resolve().parents[2]
MODE_VARIABLE = "PGSYNC_TEST_SPARK"
_METASTORE = "resident_metastore"
_START_S = 300.0

current: ResidentSpark | None = None
"""The resident driver of the running test, None when it submits its jobs (``spark_submit``)."""


class ResidentSpark:
    """The client of a worker's resident driver: jobs and lake steps of the running test."""

    def __init__(self, socket: Path, key: bytes, log: Path) -> None:
        self.socket, self._key, self.log = socket, key, log
        self.test = ""
        self.jobs = 0
        self.submitted = False
        """Whether the running test submitted a job with spark-submit (``runs``: False)."""

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with Client(str(self.socket), family="AF_UNIX", authkey=self._key) as conn:
            conn.send({**request, "test": self.test})
            answer: dict[str, Any] = conn.recv()
        if "error" in answer:
            raise RuntimeError(f"the resident Spark driver failed (its log: {self.log}):\n{answer['error']}")
        return answer

    @staticmethod
    def runs(hook: BaselineSubmitHook, application: str) -> bool:
        """Whether this driver can run ``application`` as ``hook`` would submit it: one of
        pgsync's jobs, on a ``local`` master, with no environment of its own for the executors,
        whose lakes (if any) keep their catalog in an embedded Derby metastore (which this
        driver's metastore stands in for)."""
        if Path(application).stem not in resident_driver.JOBS or not re.fullmatch(
            r"local(\[(\*|\d+)\])?", hook.master
        ):
            return False
        if any(
            k.startswith("spark.executorEnv.") and k != "spark.executorEnv.PGPASSFILE" for k in hook.job_conf
        ):
            return False  # the executors' environment is this driver's
        args = hook.application_args
        spec = json.loads(Path(args[args.index("--spec") + 1]).read_text())
        return all(d.get("metastore", "derby") == "derby" for d in resident_driver.spec_lakes(spec))

    def submit(self, hook: BaselineSubmitHook, application: str) -> None:
        """Run ``application`` (a pgsync job) as ``hook`` would submit it; its log lines in the
        hook's log, and the provider's error when it fails."""
        self.jobs += 1
        hook.log.info("Spark-Submit cmd: %s", hook.shown_command(application))  # as the provider logs it
        answer = self.ask(
            {"job": application, "args": hook.application_args, "env": hook.job_env, "conf": hook.job_conf}
        )
        for line in answer["log"]:
            hook.log.info(line)
        if answer["code"] != 0:
            raise AirflowException(
                f"Cannot execute: {Path(application).name} in the resident driver. "
                f"Error code is: {answer['code']}."
            )

    def session(self, script: Path, warehouse: Path) -> Any:
        """What the session script ``script`` (of ``tests/spark/``) saw on the lake."""
        return self._look({"session": script.stem, "lake": {"warehouse": str(warehouse)}})

    def steps(self, warehouse: Path, steps: list[dict[str, Any]]) -> list[Any]:
        """The results of a lake session's ``steps`` (``tests/support/lake_steps.py``)."""
        results: list[Any] = self._look({"steps": steps, "lake": {"warehouse": str(warehouse)}})
        return results

    def _look(self, request: dict[str, Any]) -> Any:
        """The results of a look at a lake whose jobs all ran here."""
        if self.submitted:
            raise RuntimeError(
                f"{self.test} submitted a job with spark-submit (not on a local master, or with a lake "
                "whose metastore is not Derby) and looks at the lake in the resident driver, whose "
                "catalog does not have what that job wrote: mark the test spark_submit"
            )
        self.jobs += 1
        return self.ask(request)["results"]


@pytest.fixture(scope="session")
def resident_spark(
    session_pg_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, spark_drivers: None
) -> Iterator[ResidentSpark]:
    """This worker's resident driver, started once (a JVM that runs until the session ends)."""
    work = tmp_path_factory.mktemp("resident-spark")
    work.chmod(0o700)
    if not session_pg_cluster.has_database(_METASTORE):
        session_pg_cluster.create_database(_METASTORE)
    conninfo = make_conninfo(
        host="127.0.0.1", port=session_pg_cluster.port, user=SUPERUSER, dbname=_METASTORE
    )
    passfile = work / "metastore.pgpass"
    write_passfile(passfile, [pass_entry(conninfo, dev_password())])
    config = {
        "warehouse": str(work / "lake"),
        "metastore_url": f"jdbc:postgresql://127.0.0.1:{session_pg_cluster.port}/{_METASTORE}",
        "metastore_conninfo": conninfo,
        "passfile": str(passfile),
        "socket": str(work / "driver.sock"),
        "work": str(work),
    }
    key = secrets.token_bytes(16)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **os.environ,
        **driver_environment(),
        "PYTHONPATH": path,
        "PYTHONWARNINGS": "ignore",
        resident_driver.KEY_VARIABLE: key.hex(),
        # counted apart (``spark_starts.resident``): its uptime is the session's
        "SPARK_SUBMIT_OPTS": spark_starts.base_options(),
    }
    log = work / "driver.log"
    with open(log, "w") as out:  # the driver's output, Spark's included
        process = subprocess.Popen(
            [sys.executable, resident_driver.__file__, json.dumps(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=work,
            umask=0o077,
        )
    client = ResidentSpark(work / "driver.sock", key, log)
    try:
        _wait_ready(process, client.socket, log)
        yield client
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        spark_starts.resident(client.jobs)


def _wait_ready(process: subprocess.Popen[bytes], socket: Path, log: Path) -> None:
    """Until the driver listens on ``socket`` (failing with its log when it exits or takes too long)."""
    deadline = time.monotonic() + _START_S
    while time.monotonic() < deadline and process.poll() is None:
        if socket.exists():
            return
        time.sleep(0.2)  # polling a process's start, with a deadline
    process.kill()
    pytest.fail(f"the resident Spark driver did not start: {log.read_text()[-3000:]}", pytrace=False)


@pytest.fixture(autouse=True)
def _spark_in_resident_driver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests marked ``spark`` (and not ``spark_submit``) use the worker's resident driver.

    Tests of a deployment are left out: their jobs run in Airflow's task processes, and starting
    the driver there would write its metastore's schema, WAL of the cluster their slots hold."""
    node = request.node
    if (
        node.get_closest_marker("spark") is None
        or node.get_closest_marker("spark_submit") is not None
        or node.get_closest_marker("deployment") is not None
        or os.environ.get(MODE_VARIABLE) == "submit"
    ):
        return
    resident: ResidentSpark = request.getfixturevalue("resident_spark")
    resident.test, resident.submitted = node.nodeid, False

    submitted = BaselineSubmitHook.submit

    def submit(hook: BaselineSubmitHook, application: str = "", **kwargs: Any) -> str | None:
        if not resident.runs(hook, application):
            result = submitted(hook, application, **kwargs)
            resident.submitted = True
            return result
        resident.submit(hook, application)
        return None

    monkeypatch.setattr(BaselineSubmitHook, "submit", submit)
    monkeypatch.setattr(sys.modules[__name__], "current", resident)
