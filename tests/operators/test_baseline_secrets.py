"""Passwords never by value on any Spark master (issue 16): the spark-submit command, Spark
configuration, driver environment and job spec the operator builds for each kind of master
hold no password, only the password file's reference; and a real baseline on ``local-cluster``
(JDBC and Arrow paths, a PostgreSQL destination) shows no password in any process's command
line while it runs, nor in Spark's event log or the task's log.

The source and the replica are reached as a role with a distinctive password, which the test
cluster requires over TCP (scram-sha-256): the baselines succeed only through the password file.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.hooks import spark_submit as provider_spark_submit

from airflow_provider_pgsync.baseline.passfile import PASSFILE_NAME, PassEntry, write_passfile
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.spark_submit import BaselineSubmitHook
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator, _lake
from airflow_provider_pgsync.operators.baseline_destinations import ReplicaBaselines
from airflow_provider_pgsync.source.publication import published_table
from tests.baseline.secret_role import SecretRole, require_password, secret_role
from tests.conftest import Database, MakeReplica

# the subject is the password file spark-submit ships, and what its command line and logs hold:
# not the worker's resident driver (tests/support/resident_spark.py)
pytestmark = pytest.mark.spark_submit

TABLE = "public.items"
MOUNTED = "/etc/pgsync/pgpass"
SPARK_CONN = "spark_under_test"
SLOT = "pgsync_secrets_test"  # the pipeline's slot, which a baseline needs (dropped with the database)


@pytest.fixture
def role(
    database: Database, make_replica: MakeReplica, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SecretRole]:
    """The source (connection ``secret_source``, table ``items``) and a PostgreSQL destination
    (``secret_replica``), both reached as a role with a distinctive password."""
    database.execute("CREATE TABLE items (id int PRIMARY KEY, payload text NOT NULL)")
    database.execute("INSERT INTO items SELECT g, repeat('x', mod(g, 50)) FROM generate_series(1, 3000) g")
    database.execute("ANALYZE items")
    database.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))
    replica = make_replica("secrets")
    with secret_role(database, replica) as role:
        require_password(role, database.name)
        monkeypatch.setenv("AIRFLOW_CONN_SECRET_SOURCE", role.airflow_conn(database.name))
        monkeypatch.setenv("AIRFLOW_CONN_SECRET_REPLICA", role.airflow_conn(replica.name))
        yield role


def _operator(**kwargs: Any) -> PgBaselineOperator:
    kwargs.setdefault(
        "destinations",
        [{"kind": "lake"}, {"kind": "postgres", "conn_id": "secret_replica", "name": "replica"}],
    )
    return PgBaselineOperator(
        task_id="baseline",
        pipeline="by_reference",
        table=TABLE,
        slot_name=SLOT,
        postgres_conn_id="secret_source",
        state_backend="postgres",
        progress_seconds=2,
        target_partition_mb=0.05,
        **kwargs,
    )


# ---- the command line of every master ------------------------------------------------------

MASTERS = {
    "local": ("local[*]", None),
    "local-cluster": ("local-cluster[2,1,1024]", None),
    "standalone": ("spark://spark.example:7077", None),
    "yarn-client": ("yarn", "client"),
    "yarn-cluster": ("yarn", "cluster"),
    "k8s-client": ("k8s://https://k8s.example:443", "client"),
    "k8s-cluster": ("k8s://https://k8s.example:443", "cluster"),
}


def _conf(command: list[str]) -> dict[str, str]:
    """The ``--conf key=value`` pairs of a spark-submit command."""
    pairs = [command[i + 1] for i, arg in enumerate(command[:-1]) if arg == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


@pytest.mark.parametrize("name", list(MASTERS))
def test_no_master_gets_a_password(
    name: str, role: SecretRole, lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, deploy_mode = MASTERS[name]
    extra = {"deploy-mode": deploy_mode} if deploy_mode else {}
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{SPARK_CONN.upper()}",
        json.dumps({"conn_type": "spark", "host": master, "extra": extra}),
    )
    kubernetes = master.startswith("k8s://")
    if kubernetes:  # the provider refuses a k8s master without its Kubernetes client; not used here
        monkeypatch.setattr(provider_spark_submit, "kube_client", object(), raising=False)
    mounted = name == "k8s-cluster"
    op = _operator(spark_conn_id=SPARK_CONN, spark_password_file=MOUNTED if mounted else None)
    work = tmp_path / "work"
    work.mkdir(mode=0o700)

    # the operator's own steps up to the submission, in a real snapshot of the real tables
    hook = PgReplicationHook(postgres_conn_id="secret_source")
    table = published_table(TABLE)
    with hook.baseline_snapshot(table.table) as (snapshot, conn):
        spec = op._job_spec(hook, conn, table, snapshot, [_lake({"kind": "lake"})], lineage="l1")
        op._replicas = ReplicaBaselines(op.destinations, op.log)
        try:
            spec = op._replicas.prepare(conn, table, column_infos(conn, table.table, None), spec)
            if mounted:  # without a password file the cluster manager mounts: refused, nothing written
                refused = tmp_path / "refused"
                refused.mkdir()
                with pytest.raises(ConfigError, match="spark_password_file"):
                    _operator(spark_conn_id=SPARK_CONN)._submit_hook(spec, refused)
                assert not list(refused.iterdir())
            submit = op._submit_hook(spec, work)
            command = submit._build_spark_submit_command("baseline_job.py")
        finally:
            op._replicas.discard()
    assert submit.master == master and submit.cluster_mode == (deploy_mode == "cluster")

    job_spec = (work / "spec.json").read_text()
    carried = {
        "the command line": " ".join(command),
        "the Spark configuration": json.dumps(submit._conf),
        "the driver's environment": json.dumps(submit._env_vars),
        "the spark-submit process's environment": json.dumps(submit._env or {}),
        "the job spec": job_spec,
    }
    for where, text in carried.items():
        assert role.token not in text, f"the password is in {where} ({name})"
    conf, spec_data = _conf(command), json.loads(job_spec)
    if mounted:
        assert "--files" not in command and not (work / PASSFILE_NAME).exists()
        assert conf["spark.executorEnv.PGPASSFILE"] == MOUNTED
        assert conf["spark.kubernetes.driverEnv.PGPASSFILE"] == MOUNTED
        assert (spec_data["passfile"], spec_data["passfile_shipped"]) == (MOUNTED, False)
        return
    passfile = work / PASSFILE_NAME
    assert command[command.index("--files") + 1] == str(passfile)
    assert stat.S_IMODE(passfile.stat().st_mode) == 0o600
    lines = passfile.read_text().splitlines()
    assert len(lines) == 2 and all(role.token in line for line in lines)  # the source, the replica
    assert conf["spark.executorEnv.PGPASSFILE"] == PASSFILE_NAME
    assert (spec_data["passfile"], spec_data["passfile_shipped"]) == (PASSFILE_NAME, True)
    driver = PASSFILE_NAME if deploy_mode == "cluster" else str(passfile)
    assert submit._env_vars["PGPASSFILE"] == driver
    if master == "yarn":
        assert conf["spark.yarn.appMasterEnv.PGPASSFILE"] == driver
    if kubernetes:
        assert conf["spark.kubernetes.driverEnv.PGPASSFILE"] == driver


# ---- a real baseline, watched ----------------------------------------------------------------

LOCAL_CLUSTER = "local-cluster[2,1,1024]"


class CommandLines(threading.Thread):
    """Reads every process's command line (``/proc/*/cmdline`` and ``ps -eo args``) every 50 ms
    until stopped: which held ``needle``, and which Spark processes were seen."""

    def __init__(self, needle: str) -> None:
        super().__init__(daemon=True)
        self.needle = needle.encode()
        self.found: list[str] = []
        self.seen: set[str] = set()
        self.scans = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            lines = [line.replace(b"\0", b" ") for line in _read_cmdlines()]
            lines += subprocess.run(
                ["ps", "-eo", "args"], capture_output=True, check=True
            ).stdout.splitlines()
            for line in lines:
                if self.needle in line:
                    self.found.append(line.decode(errors="replace")[:300])
                for mark in ("org.apache.spark.deploy.SparkSubmit", "CoarseGrainedExecutorBackend"):
                    if mark.encode() in line:
                        self.seen.add(mark)
            self.scans += 1
            self._halt.wait(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)


def _cmdline_files() -> Iterator[Path]:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            path = proc / "cmdline"
            try:
                path.stat()
            except OSError:  # gone meanwhile
                continue
            yield path


def _read_cmdlines() -> list[bytes]:
    out = []
    for path in _cmdline_files():
        try:
            out.append(path.read_bytes())
        except OSError:
            continue
    return out


def _wait_until(what: str, done: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_baseline_shows_no_password_anywhere(
    role: SecretRole,
    database: Database,
    lake: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two baselines on ``local-cluster`` (executors in their own JVMs and Python workers): JDBC
    into the lake plus the PostgreSQL destination, then the Arrow path; the password is needed
    by every connection, and no process's command line, event log line or log line shows it."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_LOCAL_CLUSTER", json.dumps({"conn_type": "spark", "host": LOCAL_CLUSTER})
    )
    events = tmp_path / "events"
    events.mkdir()
    spark_conf = {  # uncompressed: the test reads it
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
    }
    scanner = CommandLines(role.token)

    # the scanner finds a password on a command line (it can fail) ...
    planted = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", role.password])
    try:
        scanner.start()
        _wait_until("the scanner to see the planted password", lambda: scanner.found)
    finally:
        planted.kill()
        planted.wait()
    _wait_until(
        "the planted process to be gone", lambda: not any(role.token.encode() in c for c in _read_cmdlines())
    )
    scanner.found.clear()

    # ... and finds none while the baselines run
    try:
        jdbc = _operator(spark_conn_id="spark_local_cluster", copy_path="off", spark_conf=spark_conf).execute(
            {"ti": None}  # type: ignore[typeddict-item]
        )
        arrow = _operator(
            spark_conn_id="spark_local_cluster",
            copy_path="auto",
            rebaseline=True,
            destinations=[{"kind": "lake"}],
            spark_conf=spark_conf,
        ).execute({"ti": None})  # type: ignore[typeddict-item]
    finally:
        scanner.stop()

    assert jdbc["rows"] == arrow["rows"] == 3000
    assert [w["kind"] for w in jdbc["written"]] == ["lake", "postgres"]
    assert scanner.found == [], "a command line showed the password"
    assert scanner.seen == {"org.apache.spark.deploy.SparkSubmit", "CoarseGrainedExecutorBackend"}
    assert scanner.scans > 20
    jobs = list(events.iterdir())
    assert len(jobs) == 2  # one event log (a folder of rolled files) per job
    for job in jobs:
        text = "".join(p.read_text(errors="replace") for p in job.rglob("*") if p.is_file())
        assert f'"spark.executorEnv.PGPASSFILE":"{PASSFILE_NAME}"' in text, f"{job} is not the job's log"
        assert role.token not in text, f"the event log {job.name} shows the password"
    out, err = capfd.readouterr()
    assert "CoarseGrainedExecutorBackend" in out + err or "pgsync baseline" in out + err
    for text in (out, err, caplog.text):
        assert role.token not in text, "a log shows the password"


@pytest.mark.slow
def test_a_mounted_password_file_serves_the_job(
    role: SecretRole, database: Database, lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``spark_password_file``: a file the cluster manager provides (here: readable by all, as a
    Kubernetes secret volume is) serves the driver, the JDBC tasks and the PostgreSQL
    destination's tasks; the operator ships nothing."""
    source = PgReplicationHook(postgres_conn_id="secret_source").connection
    replica = PgReplicationHook(postgres_conn_id="secret_replica").connection
    mounted = tmp_path / "mounted" / "pgpass"
    mounted.parent.mkdir()
    write_passfile(
        mounted,
        [
            PassEntry(role.host, str(role.port), str(c.schema), role.name, role.password)
            for c in (source, replica)
        ],
    )
    mounted.chmod(0o644)
    shipped: list[str] = []
    monkeypatch.setattr(BaselineSubmitHook, "add_file", lambda self, path: shipped.append(path), raising=True)

    result = _operator(copy_path="off", spark_password_file=str(mounted)).execute(
        {"ti": None}  # type: ignore[typeddict-item]
    )

    assert result["rows"] == 3000
    assert [w["kind"] for w in result["written"]] == ["lake", "postgres"]
    assert shipped == []
    assert stat.S_IMODE(mounted.stat().st_mode) == 0o600  # narrowed for libpq (ours to change here)
