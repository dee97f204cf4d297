"""`make ui`: the Airflow UI on http://127.0.0.1:8080 over what `make demo` left behind.

Starts the development PostgreSQL cluster (the demo's source), then the Airflow API server
with the demo's Airflow home, the drop-in DAG folder and its pipeline config, and the
simple auth manager letting everyone in as admin (a local development server only). The
source connection travels in the environment, never on a command line.
"""

from __future__ import annotations

import os
import sys

from demo import AIRFLOW_HOME, CONN_ID, DEMO, DEMO_DB

from pgcluster import REPO, dev_cluster

PORT = int(os.environ.get("PGSYNC_UI_PORT", "8080"))


def main() -> int:
    if not (AIRFLOW_HOME / "airflow.db").exists():
        print("ui: run `make demo` first: it makes the Airflow home this UI shows", file=sys.stderr)
        return 1
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
    print(f"ui: http://127.0.0.1:{PORT}/  (Browse > pgsync status; DAGs pgsync_demo_*); Ctrl-C stops it")
    airflow = str(REPO / ".venv" / "bin" / "airflow")
    os.execve(airflow, [airflow, "api-server", "--host", "127.0.0.1", "--port", str(PORT)], env)


if __name__ == "__main__":
    sys.exit(main())
