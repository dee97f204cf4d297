"""`make ui`: the Airflow UI on http://127.0.0.1:8080 over what `make demo` left behind.

The port is ``$PGSYNC_UI_PORT`` when set (and must be free), else 8080, else, when 8080 is
taken, a free port the system picks; the line printed before the server starts names it.

Starts the development PostgreSQL cluster (the demo's source), then the Airflow API server
with the demo's Airflow home, the drop-in DAG folder and its pipeline config, and the
simple auth manager letting everyone in as admin (a local development server only). The
source connection travels in the environment, never on a command line.
"""

from __future__ import annotations

import os
import socket
import sys

from demo import AIRFLOW_HOME, CONN_ID, DEMO, DEMO_DB

from pgcluster import REPO, dev_cluster

PORT_ENV = "PGSYNC_UI_PORT"
DEFAULT_PORT = 8080


def is_free(port: int) -> bool:
    """Whether a server can listen on 127.0.0.1:``port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def choose_port(environ: dict[str, str]) -> int:
    """The UI's port (see the module's docstring); SystemExit naming the remedy when the port
    asked for cannot be used."""
    asked = environ.get(PORT_ENV, "").strip()
    if asked:
        if not asked.isdigit() or not 0 < int(asked) < 65536:
            raise SystemExit(f"ui: {PORT_ENV}={asked!r} is not a port number; set it to one from 1 to 65535")
        if not is_free(int(asked)):
            raise SystemExit(
                f"ui: port {asked} ({PORT_ENV}) is in use; stop what listens there or set {PORT_ENV} "
                f"to a free port, e.g. `make ui {PORT_ENV}={free_port()}`"
            )
        return int(asked)
    if is_free(DEFAULT_PORT):
        return DEFAULT_PORT
    port = free_port()
    print(f"ui: port {DEFAULT_PORT} is in use, so the UI listens on {port} (set {PORT_ENV} to choose)")
    return port


def main() -> int:
    if not (AIRFLOW_HOME / "airflow.db").exists():
        print("ui: run `make demo` first: it makes the Airflow home this UI shows", file=sys.stderr)
        return 1
    port = choose_port(dict(os.environ))
    cluster = dev_cluster()
    cluster.start()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "PGSYNC_CONFIG": str(DEMO / "pgsync.yaml"),
        f"AIRFLOW_CONN_{CONN_ID.upper()}": cluster.url(DEMO_DB, with_password=True),
    }
    print(f"ui: http://127.0.0.1:{port}/  (Browse > pgsync status; DAGs pgsync_demo_*); Ctrl-C stops it")
    airflow = str(REPO / ".venv" / "bin" / "airflow")
    os.execve(airflow, [airflow, "api-server", "--host", "127.0.0.1", "--port", str(port)], env)


if __name__ == "__main__":
    sys.exit(main())
