"""A Spark standalone cluster for tests: one Master and one Worker started from the installed
pyspark distribution (``bin/spark-class``), bound to loopback on free ports, logging into a
folder of the test, stopped (process groups: SIGTERM, then SIGKILL) when the block ends.

The Worker inherits this process's environment, and so do the executors it starts: with
``PYTHONPATH`` set to the tree under test, their Python workers import that tree, as the
``local-cluster`` tests' executors do. The JDBC driver reaches them with the job (``--jars``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# Short-lived daemons: the JIT's optimising tier and the parallel collector cost more CPU than
# they save on a small machine (the tests set the same for spark-submit in tests/conftest.py).
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@dataclass(frozen=True)
class StandaloneCluster:
    """A running Master (``master_url``, web UI on ``webui_port``) with one Worker whose
    executors work in ``work_dir``; daemon logs in ``log_dir``."""

    host: str
    port: int
    webui_port: int
    work_dir: Path
    log_dir: Path

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def status(self) -> dict[str, Any]:
        """The Master's state as its web UI serves it (``/json/``): workers, applications."""
        url = f"http://{self.host}:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=10) as response:
            return dict(json.load(response))

    def logs(self) -> str:
        """The tails of the daemons' logs, for a failure message."""
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.log_dir.glob("*.log")
        )


def wait_until(what: str, done: Callable[[], bool], timeout: float, *, detail: Callable[[], str]) -> None:
    """Poll ``done`` every 0.2 s until it is true; fail naming ``what`` (and ``detail()``) after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{detail()}")
        time.sleep(0.2)


@contextmanager
def standalone_cluster(
    base: Path, *, ports: Callable[[], int], cores: int = 2, memory: str = "2g", timeout: float = 120
) -> Iterator[StandaloneCluster]:
    """Start a Master and a Worker (``cores``, ``memory``) under ``base``, wait until the Master
    lists the Worker ALIVE, yield the cluster; stop both at the end whatever happened."""
    log_dir, work_dir = base / "logs", base / "work"
    log_dir.mkdir(parents=True)
    work_dir.mkdir()
    # no REST submission server (it would take the fixed port 6066); nothing listens beyond loopback
    properties = base / "spark-daemons.conf"
    properties.write_text("spark.master.rest.enabled false\n")
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",  # the web UIs bind to it instead of 0.0.0.0
        "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS,
    }
    cluster = StandaloneCluster("127.0.0.1", ports(), ports(), work_dir, log_dir)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    with ExitStack() as stack:
        stack.enter_context(
            _daemon(
                [spark_class, MASTER_CLASS, "--host", cluster.host, "--port", str(cluster.port),
                 "--webui-port", str(cluster.webui_port), "--properties-file", str(properties)],
                log_dir / "master.log", env, base,
            )
        )  # fmt: skip
        stack.enter_context(
            _daemon(
                [spark_class, WORKER_CLASS, cluster.master_url, "--host", cluster.host,
                 "--webui-port", str(ports()), "--cores", str(cores), "--memory", memory,
                 "--work-dir", str(work_dir), "--properties-file", str(properties)],
                log_dir / "worker.log", env, base,
            )
        )  # fmt: skip
        wait_until(
            f"a worker to register with the Spark master {cluster.master_url}",
            lambda: _alive_workers(cluster) >= 1,
            timeout,
            detail=cluster.logs,
        )
        yield cluster


def _alive_workers(cluster: StandaloneCluster) -> int:
    try:
        workers = cluster.status()["workers"]
    except (OSError, urllib.error.URLError, ValueError):  # not listening yet
        return 0
    return sum(1 for w in workers if w.get("state") == "ALIVE")


@contextmanager
def _daemon(
    command: list[str], log: Path, env: dict[str, str], cwd: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` in a process group of its own, output to ``log``; stop the group at the end
    (the Worker's executors are in it too)."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
    try:
        yield process
    finally:
        _stop_group(process)


def _stop_group(process: subprocess.Popen[bytes], grace: float = 20) -> None:
    """SIGTERM to the process's group, SIGKILL after ``grace`` seconds if it still runs."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with suppress(ProcessLookupError):  # also whatever of the group outlived its leader
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
