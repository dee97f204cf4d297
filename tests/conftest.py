"""Shared fixtures: a real PostgreSQL server for the session, a fresh database per test.

The server is a private cluster with ``wal_level=logical`` in ``.dev/test-<pid>`` (or a
folder under /var/tmp when the repository is not reachable by the server's OS user),
on a free port. It runs as an unprivileged OS user when the tests run as root, and is
stopped and removed at the end of the session even when tests fail.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "dev"))

import machine_settings  # noqa: E402
from pgcluster import Cluster, default_base_dir, free_port, server_user  # noqa: E402

# Airflow reads its home at import time: keep the tests' Airflow out of ~/airflow.
_AIRFLOW_HOME = REPO / ".dev" / f"airflow-test-{os.getpid()}"
if os.environ.get("AIRFLOW_HOME", "").startswith(str(REPO / ".dev" / "airflow-test-")):
    # a pytest-xdist worker inherits its controller's environment: each worker has its own home
    os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW_HOME", str(_AIRFLOW_HOME))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
# The tests' Spark applications are short and read little data: in such JVMs the JIT's
# optimising tier and the parallel collector cost more CPU than they save (measured on a
# 2-core machine: a baseline test 70-77 s instead of 101-119 s). spark-submit passes this to
# every driver JVM (spark-submit, pyspark sessions, spark-sql). pgsync itself adds neither:
# the collector is the tests' choice; the quick JIT and the operators' own driver archive
# (hooks/spark_class_archive.py, in the checkout; the tests' own archive below comes first)
# are the machine's settings (dev/machine_settings.py), as in make demo, off in production.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:+UseSerialGC")
machine_settings.use()


from tests import spark_starts, tiers  # noqa: E402

# fixtures of tests/support that many folders use
pytest_plugins = [
    "tests.support.apply_lifecycle",
    "tests.support.backfill",
    "tests.support.dag_test_polling",
    "tests.support.resident_spark",
    "tests.support.sqlite_destination",
]

_SPARK_STARTS = spark_starts.run_folder(REPO)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The Spark drivers started from here to the next test are counted as this test's."""
    if _SPARK_STARTS is not None:
        spark_starts.enter(_SPARK_STARTS, item.nodeid)
    yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's tier marks (``spark``, ``dag``, ``deployment``) from its fixtures, and the
    slowest tiers' files first (tests/tiers.py)."""
    tiers.mark(items)
    tiers.order(items)


@pytest.fixture(scope="session")
def spark_drivers() -> None:
    """Says that a test (or a fixture) starts Spark drivers: its tests are marked ``spark``,
    and ``make test-fast`` leaves them out (tests/tiers.py)."""


@pytest.fixture(scope="session")
def airflow_deployment() -> None:
    """Says that a test runs against a real Airflow deployment (mark ``deployment``)."""


@pytest.fixture(autouse=True)
def _fast_tier_starts_no_spark(request: pytest.FixtureRequest) -> Iterator[None]:
    """In ``make test-fast``, a test that started a Spark driver without saying so fails."""
    yield
    if _SPARK_STARTS is not None and tiers.fast_tier():
        tiers.check_no_driver(request.node, spark_starts.logs_of(_SPARK_STARTS, request.node.nodeid))


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """After ``--durations``: how many Spark drivers the run started, and their seconds."""
    if _SPARK_STARTS is None or hasattr(config, "workerinput") or config.option.collectonly:
        return
    terminalreporter.section("Spark driver starts")
    for line in spark_starts.finish(_SPARK_STARTS, REPO / ".dev" / "spark-starts.json"):
        terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    """Spark drivers map the classes they load from an archive made once (tests/spark_cds.py)."""
    from tests.spark_cds import spark_class_archive, use_archive

    archive = spark_class_archive(REPO / ".dev" / "spark-cds")
    if archive is not None:
        use_archive(archive)


def _remove_stale_clusters(base: Path) -> None:
    """Stop and remove test clusters left by pytest processes that no longer run."""
    for folder in base.glob("test-pg-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            Cluster(root=folder).destroy()


@pytest.fixture(scope="session")
def pg_cluster(session_pg_cluster: Cluster) -> Cluster:
    """The test's PostgreSQL cluster: the session's (a module may have one of its own)."""
    return session_pg_cluster


@pytest.fixture(scope="session")
def session_pg_cluster() -> Iterator[Cluster]:
    """A private PostgreSQL cluster with wal_level=logical, for the whole session."""
    base = default_base_dir(server_user())
    _remove_stale_clusters(base)
    cluster = Cluster(root=base / f"test-pg-{os.getpid()}", port=free_port(), quick_auth=True)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove this session's Airflow home (metadata DB, logs) whatever happened."""
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


@dataclass
class Database:
    """A fresh database in the test cluster."""

    cluster: Cluster
    name: str

    @property
    def conninfo(self) -> str:
        return self.cluster.conninfo(self.name)

    def connect(self, *, autocommit: bool = True) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.conninfo, autocommit=autocommit)

    def transaction(self, *statements: str | sql.Composable, commit: bool = True) -> int:
        """Run ``statements`` in one transaction (committed, or rolled back); return its xid."""
        with self.connect(autocommit=False) as conn:
            row = conn.execute("SELECT txid_current()").fetchone()
            assert row is not None
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]
            if commit:
                conn.commit()
            else:
                conn.rollback()
        return int(row[0])  # type: ignore[call-overload]

    def execute(self, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """Run one statement in its own transaction and return its rows (if any)."""
        with self.connect() as conn:
            cur = conn.execute(query, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []


@pytest.fixture
def database(pg_cluster: Cluster) -> Iterator[Database]:
    """A new, empty database for one test; dropped afterwards with its replication slots."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    pg_cluster.create_database(name)
    try:
        yield Database(pg_cluster, name)
    finally:
        pg_cluster.drop_database(name)


@pytest.fixture
def replica(pg_cluster: Cluster) -> Iterator[Database]:
    """A second new database in the test cluster, for the PostgreSQL destination."""
    name = f"r_{uuid.uuid4().hex[:12]}"
    pg_cluster.create_database(name)
    try:
        yield Database(pg_cluster, name)
    finally:
        pg_cluster.drop_database(name)


def airflow_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, database: Database) -> str:
    """Airflow connection ``conn_id`` (through AIRFLOW_CONN_*) to ``database``, with the password."""
    url = database.cluster.url(database.name, with_password=True)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", url)
    return conn_id


@pytest.fixture
def replica_conn_id(replica: Database, monkeypatch: pytest.MonkeyPatch) -> str:
    """An Airflow connection id (through AIRFLOW_CONN_*) pointing at ``replica``."""
    return airflow_connection(monkeypatch, "pgsync_replica", replica)


MakeReplica = Callable[[str], Database]


@pytest.fixture
def make_replica(pg_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[MakeReplica]:
    """``make_replica(name)``: a new database in the test cluster for a PostgreSQL destination,
    reachable as Airflow connection ``pgsync_<name>``; dropped after the test."""
    made: list[str] = []

    def make(name: str) -> Database:
        db = Database(pg_cluster, f"r_{name}_{uuid.uuid4().hex[:8]}")
        pg_cluster.create_database(db.name)
        made.append(db.name)
        airflow_connection(monkeypatch, f"pgsync_{name}", db)
        return db

    yield make
    for name in made:
        pg_cluster.drop_database(name)


@contextmanager
def login_role(
    database: Database, monkeypatch: pytest.MonkeyPatch, conn_id: str, attributes: str = ""
) -> Iterator[str]:
    """A new LOGIN role (with ``attributes``, pgsync's own SQL: e.g. ``REPLICATION``) reachable as
    Airflow connection ``conn_id``; what it owns and the role are dropped after the block."""
    role, password = f"etl_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    database.execute(
        sql.SQL("CREATE ROLE {} LOGIN {} PASSWORD {}")
        .format(sql.Identifier(role), sql.SQL(attributes), sql.Literal(password))
        .as_string(None)
    )
    url = database.cluster.url(database.name).replace("pgsync@", f"{role}:{password}@")
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", url)
    try:
        yield role
    finally:
        database.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)).as_string(None))
        database.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)).as_string(None))


@pytest.fixture
def source_conn_id(database: Database, monkeypatch: pytest.MonkeyPatch) -> str:
    """An Airflow connection id (through AIRFLOW_CONN_*) pointing at the test database."""
    return airflow_connection(monkeypatch, "pgsync_source", database)


# ---- real Airflow ---------------------------------------------------------------------------
#
# AIRFLOW_HOME points at a fresh folder of this session (above), so the metadata database
# is a new SQLite file there. ``initdb()`` creates its tables straight from the ORM models
# (about a second, much faster than replaying the migrations). ``dag.test()`` in Airflow 3
# only runs a DAG whose serialized form is in the metadata database, so ``run_dag`` stores
# the in-memory DAG the way the DAG processor does, then runs it.


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """Create the tables of the tests' own (fresh, per-session) Airflow metadata database."""
    from airflow import settings
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.utils.db import initdb

    if f"sqlite:///{_AIRFLOW_HOME}/airflow.db" != settings.SQL_ALCHEMY_CONN:
        pytest.fail(
            f"the Airflow metadata database is {settings.SQL_ALCHEMY_CONN}, not the tests' own in "
            f"{_AIRFLOW_HOME}: unset AIRFLOW_HOME and AIRFLOW__DATABASE__SQL_ALCHEMY_CONN to run these tests"
        )
    initdb()
    DagBundlesManager().sync_bundles_to_db()


RunDag = Callable[..., Any]


@pytest.fixture
def run_dag(airflow_db: None) -> RunDag:
    """``run_dag(dag, **test_kwargs)``: store the DAG like the DAG processor, then ``dag.test()``."""
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    def run(dag: Any, **kwargs: Any) -> Any:
        bag = DagBag(dag_folder=os.devnull, collect_dags=False)
        bag.bag_dag(dag)
        sync_bag_to_db(bag, "dags-folder", None)
        return dag.test(**kwargs)

    return run


# ---- the lake destination -------------------------------------------------------------------
#
# A new embedded Derby metastore takes Spark 5-20 s to create its schema. The session creates
# one empty metastore once and each test's lake starts from a copy of it (Derby databases are
# plain folders; nothing holds this one open).

_METASTORE_SCRIPT = """
import sys
from pyspark.sql import SparkSession
from airflow_provider_pgsync.destinations.lake import LakeDestination
builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
for key, value in LakeDestination.from_config({"warehouse": sys.argv[1]}).spark_conf().items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext._jvm.java.lang.System.setProperty("derby.stream.error.file", sys.argv[1] + "/derby.log")
spark.catalog.listDatabases()
spark.stop()
"""


@pytest.fixture(scope="session")
def empty_metastore(tmp_path_factory: pytest.TempPathFactory, spark_drivers: None) -> Path:
    """An empty Derby metastore folder made once per session."""
    import subprocess

    warehouse = tmp_path_factory.mktemp("metastore-template")
    subprocess.run(
        [sys.executable, "-c", _METASTORE_SCRIPT, str(warehouse)],
        check=True,
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        umask=0o077,  # private, as a pgsync job makes it (hooks/spark_submit.py)
    )
    metastore = warehouse / "metastore_db"
    assert metastore.is_dir(), f"no Derby metastore was created in {warehouse}"
    return metastore


@pytest.fixture
def lake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, spark_drivers: None
) -> Path:
    """A lake warehouse for one test (PGSYNC_LAKE): no tables, and a ready empty Derby metastore
    unless the worker's resident driver keeps its catalog (``tests/support/resident_spark.py``)."""
    warehouse = tmp_path / "lake"
    warehouse.mkdir(mode=0o700)  # as pgsync makes a warehouse (Hive's folders take its permissions)
    from tests.support import resident_spark  # a plugin: imported after pytest registers it

    if resident_spark.current is None:
        shutil.copytree(request.getfixturevalue("empty_metastore"), warehouse / "metastore_db")
    monkeypatch.setenv("PGSYNC_LAKE", str(warehouse))
    return warehouse
