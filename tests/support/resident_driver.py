"""Test-only: the resident Spark driver of one pytest-xdist worker, run as a process of its own
by ``tests/support/resident_spark.py``.

One PySpark session (``local[2]``, Spark's Hive catalog on a PostgreSQL metastore in the
worker's test cluster: ``metastore: postgres``, many sessions at once) serves every Spark job
and lake check of the worker's tests, so that each does not start a JVM of its own. Requests
come over a Unix socket (``multiprocessing.connection``), one connection each, each in a thread
of its own with a session of its own (``SparkSession.newSession``: its own SQL settings and
catalog cache, the shared catalog and SparkContext):

- ``{"job": <file of the job>, "args": [...], "env": {...}, "conf": {...}}``: a pgsync job
  (``baseline_job.py``, ``compact_job.py``, ``reconcile_job.py``) as spark-submit would run it,
  through its ``main(argv, spark)``; the answer has its exit code and log lines;
- ``{"steps": [...], "lake": {...}}``: a test's look at a lake (``tests/support/lake_steps.py``);
- ``{"session": <script>, "lake": {...}}``: a session script of ``tests/spark/`` (``SESSIONS``).

Every lake a request names is kept in this driver's metastore: its settings are rewritten to
``metastore: postgres`` on that metastore (warehouse and database as they were). Each request
carries its test's id; the first request of another test drops the databases the previous test
left in the catalog (its files stay in that test's own folders).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any

from pyspark import SparkFiles
from pyspark.sql import SparkSession

from airflow_provider_pgsync.baseline.passfile import PASSFILE_NAME
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.hooks.lake_metastore import JDBC_DRIVER_JAR
from airflow_provider_pgsync.spark.metastore_postgres import open_metastore
from tests.support.lake_steps import run_steps

KEY_VARIABLE = "PGSYNC_TEST_RESIDENT_KEY"
"""The socket's authentication key (hex), given in the environment."""
JOBS = ("baseline_job", "compact_job", "reconcile_job")
SESSIONS = ("compact_session",)
"""The tests' session scripts (``tests/spark/``) that run here through their ``run(spark, lake)``."""
_LOG4J = Path(__file__).resolve().parents[2] / "airflow_provider_pgsync" / "spark" / "log4j2.properties"


def spec_lakes(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The lake settings in a job's spec (themselves, not copies): a baseline's lake
    ``destinations``, a compaction's or reconciliation's ``destination``."""
    lakes = [d for d in spec.get("destinations", []) if d.get("kind", "lake") == "lake"]
    return lakes + ([spec["destination"]] if "destination" in spec else [])


class ResidentDriver:
    """The session, the metastore every lake is kept in, and the test the catalog is for."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.metastore = {k: config[k] for k in ("metastore_url", "metastore_conninfo")}
        self.passfile = str(config["passfile"])  # the metastore's password
        self.work = Path(config["work"])
        lake = LakeDestination.from_config({"warehouse": config["warehouse"], **self._metastore()})
        builder = SparkSession.builder.master("local[*]").appName("pgsync tests' resident driver")
        settings = {
            **lake.spark_conf(),
            "spark.driver.memory": "2g",
            "spark.driver.extraClassPath": JDBC_DRIVER_JAR,
            "spark.jars": JDBC_DRIVER_JAR,
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_LOG4J}",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.hadoop.fs.permissions.umask-mode": "077",
        }
        for key, value in settings.items():
            builder = builder.config(key, value)
        os.environ["PGPASSFILE"] = self.passfile
        self.spark = builder.getOrCreate()
        self.spark.sparkContext.setLogLevel("ERROR")
        open_metastore(self.spark, lake)
        self.test = ""
        self._lines: list[str] = []  # the password file lines of the test's jobs
        self._lock = threading.Lock()  # the catalog's test, the passwords in use

    def _metastore(self) -> dict[str, str]:
        return {"metastore": "postgres", **self.metastore}

    def kept_here(self, config: dict[str, Any]) -> dict[str, Any]:
        """A lake's settings with its catalog in this driver's metastore."""
        lake = {k: v for k, v in config.items() if not k.startswith("metastore")}
        return {**lake, **self._metastore()}

    def for_test(self, test: str) -> None:
        """The catalog emptied of the previous test's databases when ``test`` is another."""
        with self._lock:
            if test == self.test:
                return
            for database in self.spark.catalog.listDatabases():
                if database.name != "default":
                    self.spark.sql(f"DROP DATABASE IF EXISTS `{database.name}` CASCADE")
            self.spark.catalog.clearCache()
            self.test, self._lines = test, []

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        self.for_test(str(request["test"]))
        spark = self.spark.newSession()
        if "job" in request:
            return self.job(spark, request)
        lake = LakeDestination.from_config(self.kept_here(request["lake"]))
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        if "steps" in request:
            return {"results": json.loads(json.dumps(run_steps(spark, lake, request["steps"]), default=str))}
        if request["session"] not in SESSIONS:
            raise ValueError(
                f"the resident driver runs the session scripts {SESSIONS}, not {request['session']!r}"
            )
        script = importlib.import_module(f"tests.spark.{request['session']}")
        return {"results": json.loads(json.dumps(script.run(spark, lake), default=str))}

    def job(self, spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
        """A job as spark-submit runs it: its spec's lakes kept here, its passwords found."""
        name = Path(str(request["job"])).stem
        if name not in JOBS:
            raise ValueError(f"the resident driver runs pgsync's jobs {JOBS}, not {name!r}")
        args = [str(a) for a in request["args"]]
        spec_path = Path(args[args.index("--spec") + 1])
        spec = json.loads(spec_path.read_text())
        for lake in spec_lakes(spec):
            kept = self.kept_here(lake)
            lake.clear()
            lake.update(kept)
        spec_path.write_text(json.dumps(spec))
        for key, value in dict(request.get("conf", {})).items():
            if spark.conf.isModifiable(key):
                spark.conf.set(key, str(value))
        module = importlib.import_module(f"airflow_provider_pgsync.spark.{name}")
        self._passwords(dict(request.get("env", {})))
        with _log_lines(module.LOG_PREFIX) as lines:
            try:
                code = int(module.main(args, spark=spark))
            except Exception:
                lines.extend(traceback.format_exc().splitlines())
                code = 1
        return {"code": code, "log": lines}

    def _passwords(self, env: dict[str, str]) -> None:
        """The password file of the test's jobs so far (``PGPASSFILE`` of each job's environment;
        the latest job's lines first) with the metastore's line, where a job and its tasks look
        for it (``PGPASSFILE``, Spark's copy of shipped files). Concurrent jobs of a test see
        each other's lines, never a file half written."""
        with self._lock:
            given = env.get("PGPASSFILE", "")
            lines = Path(given).read_text().splitlines() if given and Path(given).is_file() else []
            self._lines = list(dict.fromkeys([*lines, *self._lines]))
            text = "\n".join([*self._lines, *Path(self.passfile).read_text().splitlines()]) + "\n"
            for path in (self.work / "passfile", Path(SparkFiles.getRootDirectory(), PASSFILE_NAME)):
                written = path.with_name(f".{path.name}.new")
                written.write_text(text)
                written.chmod(0o600)
                written.replace(path)
            os.environ["PGPASSFILE"] = str(self.work / "passfile")


class _Lines(logging.Handler):
    """Keeps the lines it is given, formatted."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(f"{prefix}: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextlib.contextmanager
def _log_lines(prefix: str) -> Iterator[list[str]]:
    """The job's log lines (``pgsync.spark``), as its ``main`` prints them in a driver of its own."""
    handler = _Lines(prefix)
    logger = logging.getLogger("pgsync.spark")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


def serve(config: dict[str, Any]) -> None:
    threading.Thread(target=_exit_with, args=(os.getppid(),), daemon=True).start()
    driver = ResidentDriver(config)
    with Listener(
        str(config["socket"]), family="AF_UNIX", authkey=bytes.fromhex(os.environ[KEY_VARIABLE])
    ) as server:
        while True:
            conn = server.accept()
            threading.Thread(target=_answer, args=(driver, conn), daemon=True).start()


def _exit_with(worker: int) -> None:
    """End this driver, its JVM with it, once the pytest worker that started it is gone (killed
    without its fixtures' teardown)."""
    while os.getppid() == worker:
        time.sleep(1.0)  # watching for the parent's exit, not synchronising a test
    os._exit(0)


def _answer(driver: ResidentDriver, conn: Any) -> None:
    with conn:
        request = conn.recv()
        try:
            answer = driver.handle(request)
        except Exception:
            answer = {"error": traceback.format_exc()}
        conn.send(answer)


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
