"""A real local Airflow deployment: scheduler, dag-processor, triggerer and API server.

What production runs, on one machine: ``LocalExecutor`` (each task in its own process,
talking to the API server's execution API), the metadata database in PostgreSQL (a
database of the private cluster), and the four components as separate processes whose
output goes to ``<home>/logs/<component>.log`` (task logs: ``<home>/logs/dag_id=...``).

``make airflow`` starts one over the demo pipeline (``.dev/airflow``), ``make airflow-stop``
stops it; the tests of ``tests/deployment`` and ``dev/bench freshness`` start their own.
Passwords travel in the components' environment and a private file, never on a command
line; the JWT secret the components share is generated once per home (mode 0600).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import machine_settings
from pgcluster import REPO, Cluster, dev_cluster

COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")
HEALTHY = ("metadatabase", "scheduler", "triggerer", "dag_processor")
AIRFLOW = Path(sys.executable).with_name("airflow")  # of the environment running this
DEFAULT_HOME = REPO / ".dev" / "airflow"
DEFAULT_PORT = 8080
API_TIMEOUT_S = 60
API_PATIENCE_S = 300  # a busy 2-core machine (Spark jobs, task processes) answers slowly


class DeploymentError(RuntimeError):
    """A component did not start, died, or an API call failed."""


@dataclass
class Deployment:
    """One Airflow deployment in ``home`` on metadata database ``metadata_db`` of ``cluster``.

    :param env: extra environment of every component (connections, ``PGSYNC_CONFIG``, ...).
    :param parallelism: how many task processes LocalExecutor runs at once.
    """

    home: Path
    cluster: Cluster
    dags_folder: Path
    port: int = DEFAULT_PORT
    metadata_db: str = "airflow_meta"
    env: dict[str, str] = field(default_factory=dict)
    parallelism: int = 4
    _bearer: str | None = field(default=None, init=False, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def _pids(self) -> Path:
        return self.home / "components.json"

    def _secret(self, name: str) -> str:
        """A random secret kept in ``home`` (0600), the same for every component and restart."""
        path = self.home / name
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(32))
        return path.read_text().strip()

    def environment(self) -> dict[str, str]:
        """The environment of every component and CLI call (holds the metadata password)."""
        metadata = self.cluster.url(self.metadata_db, with_password=True).replace(
            "postgresql://", "postgresql+psycopg2://", 1
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
        env.update(
            AIRFLOW_HOME=str(self.home),
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=metadata,
            AIRFLOW__CORE__EXECUTOR="LocalExecutor",
            AIRFLOW__CORE__PARALLELISM=str(self.parallelism),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__CORE__DAGS_FOLDER=str(self.dags_folder),
            AIRFLOW__CORE__AUTH_MANAGER=(
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            # a development deployment on 127.0.0.1 only: everyone is admin
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.base_url}/execution/",
            # a task's calls to the execution API wait through a busy machine (default 5 s)
            AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="60",
            AIRFLOW__API__BASE_URL=self.base_url,
            AIRFLOW__API__SECRET_KEY=self._secret("api_secret_key"),
            AIRFLOW__API_AUTH__JWT_SECRET=self._secret("jwt_secret"),
            # pick up a changed DAG file within seconds, not minutes
            AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="10",
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="10",
            AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="2",
            AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC="2",
            PYTHONUNBUFFERED="1",
        )
        machine_settings.use(env)  # the quick JIT and the class archive for its Spark drivers
        env.update(self.env)
        return env

    def _airflow(self, *args: str) -> None:
        """Run one ``airflow`` CLI command; its output goes to ``logs/cli.log``."""
        with (self.logs / "cli.log").open("ab") as out:
            done = subprocess.run(
                [str(AIRFLOW), *args], env=self.environment(), stdout=out, stderr=subprocess.STDOUT
            )
        if done.returncode != 0:
            raise DeploymentError(f"airflow {' '.join(args)} failed; see {self.logs / 'cli.log'}")

    def start(self, timeout: float = 240.0) -> None:
        """Create the metadata database if missing, migrate it, start the four components and
        wait until the API server reports each of them healthy."""
        if self.running():
            raise DeploymentError(f"a deployment already runs in {self.home}: `make airflow-stop` first")
        self.logs.mkdir(parents=True, exist_ok=True)
        self.cluster.start()
        if not self.cluster.has_database(self.metadata_db):
            self.cluster.create_database(self.metadata_db)
        self._airflow("db", "migrate")
        pids = {}
        env = self.environment()
        for name in COMPONENTS:
            args = [str(AIRFLOW), name]
            if name == "api-server":
                args += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
            with (self.logs / f"{name}.log").open("ab") as out:
                process = subprocess.Popen(
                    args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            pids[name] = process.pid
        self._pids.write_text(json.dumps(pids))
        try:
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise

    def _components(self) -> dict[str, int]:
        if not self._pids.exists():
            return {}
        pids: dict[str, int] = json.loads(self._pids.read_text())
        return pids

    def running(self) -> bool:
        return any(_alive(pid) for pid in self._components().values())

    def check_alive(self) -> None:
        """Raise naming the component that died, with the end of its log."""
        for name, pid in self._components().items():
            if not _alive(pid):
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
                raise DeploymentError(f"airflow {name} (pid {pid}) is not running; its log ends:\n{tail}")

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.base_url}/api/v2/monitor/health", timeout=5) as response:
            health: dict[str, Any] = json.load(response)
        return health

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                last = health = self.health()
                if all(health.get(part, {}).get("status") == "healthy" for part in HEALTHY):
                    return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = exc
            time.sleep(1)  # a poll interval: the deadline bounds the wait
        raise DeploymentError(f"Airflow in {self.home} not healthy after {timeout:.0f} s: {last}")

    def stop(self, timeout: float = 60.0) -> None:
        """Stop every component (SIGTERM to its process group, SIGKILL after ``timeout``)."""
        pids = self._components()
        for pid in pids.values():
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(_alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in pids.values():
            _signal_group(pid, signal.SIGKILL)
        self._pids.unlink(missing_ok=True)

    # -- the REST API (what a user does in the UI) ------------------------------------------

    def _token(self) -> str:
        """A token of the all-admins login, fetched once (it lasts a day)."""
        if self._bearer is None:
            with urllib.request.urlopen(f"{self.base_url}/auth/token", timeout=API_TIMEOUT_S) as response:
                self._bearer = str(json.load(response)["access_token"])
        return self._bearer

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Call ``/api/v2/<path>``; the parsed JSON answer. A call the API server does not
        answer in time is made again for up to ``API_PATIENCE_S`` (a loaded 2-core machine is
        slow to answer), so every call here must be safe to repeat."""
        request = urllib.request.Request(
            f"{self.base_url}/api/v2/{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self._token()}", "Content-Type": "application/json"},
        )
        deadline = time.monotonic() + API_PATIENCE_S
        while True:
            try:
                with urllib.request.urlopen(request, timeout=API_TIMEOUT_S) as response:
                    return json.load(response)
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:2000]
                raise DeploymentError(f"{method} /api/v2/{path}: HTTP {exc.code}: {detail}") from exc
            except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
                if time.monotonic() > deadline:
                    late = f"{method} /api/v2/{path}: no answer in {API_PATIENCE_S} s"
                    raise DeploymentError(late) from exc
                self.check_alive()
                time.sleep(2)

    def wait_dag(self, dag_id: str, timeout: float = 180.0) -> None:
        """Wait until the dag-processor has parsed ``dag_id``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            found = self.api("GET", f"dags?dag_id_pattern={urllib.parse.quote(dag_id)}")
            if any(d["dag_id"] == dag_id for d in found["dags"]):
                return
            time.sleep(1)
        log = self.logs / "dag-processor.log"
        raise DeploymentError(f"DAG {dag_id} not parsed after {timeout:.0f} s; see {log}")

    def wait_schedule(self, dag_id: str, accept: Callable[[str], bool], timeout: float = 180.0) -> str:
        """Wait until the dag-processor has parsed ``dag_id`` with a schedule ``accept`` takes
        (its ``timetable_summary``, e.g. after the pipeline config changed); that summary."""
        deadline = time.monotonic() + timeout
        while True:
            summary = str(self.api("GET", f"dags/{dag_id}/details").get("timetable_summary"))
            if accept(summary):
                return summary
            if time.monotonic() > deadline:
                raise DeploymentError(f"{dag_id} still has schedule {summary} after {timeout:.0f} s")
            time.sleep(1)

    def unpause(self, dag_id: str, paused: bool = False) -> None:
        self.api("PATCH", f"dags/{dag_id}", {"is_paused": paused})

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Trigger a run of ``dag_id`` now; its run id (our own, so a repeated POST finds it
        taken instead of starting a second run)."""
        now = datetime.now(UTC)
        run_id = f"manual__{now.isoformat()}"
        body = {"dag_run_id": run_id, "logical_date": now.isoformat(), "conf": conf or {}}
        try:
            self.api("POST", f"dags/{dag_id}/dagRuns", body)
        except DeploymentError:
            if not any(r["dag_run_id"] == run_id for r in self.runs(dag_id)):
                raise
        return run_id

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Every run of ``dag_id``, oldest first."""
        found = self.api("GET", f"dags/{dag_id}/dagRuns?order_by=run_after&limit=1000")
        return list(found["dag_runs"])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        quoted = urllib.parse.quote(run_id, safe="")
        return list(self.api("GET", f"dags/{dag_id}/dagRuns/{quoted}/taskInstances")["task_instances"])

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 600.0) -> str:
        """Wait until the run ends; its state (``success`` or ``failed``)."""
        quoted = urllib.parse.quote(run_id, safe="")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            state = str(self.api("GET", f"dags/{dag_id}/dagRuns/{quoted}")["state"])
            if state in ("success", "failed"):
                return state
            time.sleep(1)
        raise DeploymentError(f"run {run_id} of {dag_id} not done after {timeout:.0f} s")


    def pause_between_runs(self, dag_id: str, timeout: float = 600.0) -> None:
        """Pause ``dag_id`` when none of its runs is queued or running: the scheduler does not go
        on with the runs of a paused DAG, so pausing in the middle of one would leave it hanging."""
        deadline = time.monotonic() + timeout

        def active() -> bool:
            return any(r["state"] in ("queued", "running") for r in self.runs(dag_id))

        while True:
            while active():
                if time.monotonic() > deadline:
                    raise DeploymentError(f"a run of {dag_id} still active after {timeout:.0f} s")
                time.sleep(1)
            self.unpause(dag_id, paused=True)
            if not active():
                return
            self.unpause(dag_id)  # a run started meanwhile: let it finish first

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie child of ours counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# -- make airflow / make airflow-stop -------------------------------------------------------


def demo_deployment() -> Deployment:
    """The deployment of ``make airflow``: the demo pipeline on the development cluster."""
    from demo import CONN_ID, DEMO, DEMO_DB

    cluster = dev_cluster()
    port = int(os.environ.get("PGSYNC_UI_PORT", DEFAULT_PORT))
    return Deployment(
        home=DEFAULT_HOME,
        cluster=cluster,
        dags_folder=REPO / "dags",
        port=port,
        env={
            "PGSYNC_CONFIG": str(DEFAULT_HOME / "pgsync.yaml"),
            f"AIRFLOW_CONN_{CONN_ID.upper()}": cluster.url(DEMO_DB, with_password=True),
            "PGSYNC_LAKE": str(DEMO / "lake"),
        },
    )


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "start"
    deployment = demo_deployment()
    if command == "stop":
        deployment.stop()
        print(f"airflow: stopped ({deployment.home})")
        return 0
    if command != "start":
        print("usage: deployment.py start|stop", file=sys.stderr)
        return 2
    from demo import prepare_demo_source, write_config

    deployment.home.mkdir(parents=True, exist_ok=True)
    prepare_demo_source(deployment.cluster, keep=True)
    write_config(deployment.home / "pgsync.yaml", cdc="{on_changes: 1000, max_wait: 60s}", compact="'@daily'")
    deployment.start()
    print(
        f"airflow: scheduler, dag-processor, triggerer and API server run ({deployment.logs}/*.log)\n"
        f"airflow: UI {deployment.base_url}/  (everyone is admin; a local development deployment)\n"
        "airflow: unpause pgsync_demo_baseline, unpause and trigger pgsync_demo_setup (it triggers the"
        " baseline), then unpause pgsync_demo_cdc; `make airflow-stop` stops it"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
