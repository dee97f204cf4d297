"""A PostgreSQL metastore's first use (``spark/metastore_postgres.py``) by two jobs at once, with
real PostgreSQL and Spark: one of them creates the whole schema under the advisory lock, the
other waits and uses it, and both reach the catalog with the password from the password file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_pgsync.baseline.passfile import write_passfile
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.hooks.lake_metastore import metastore_passwords, resolved
from airflow_provider_pgsync.hooks.spark_submit import driver_environment
from tests.conftest import REPO, Database, MakeReplica

# the subject is Spark sessions of their own, each a new metastore's first user:
# not the worker's resident driver (tests/support/resident_spark.py)
pytestmark = pytest.mark.spark_submit

SESSION = Path(__file__).with_name("metastore_session.py")


@pytest.mark.usefixtures("spark_drivers")
def test_two_jobs_on_a_new_metastore_create_its_schema_once(
    make_replica: MakeReplica, tmp_path: Path
) -> None:
    catalog: Database = make_replica("catalog")  # Airflow connection pgsync_catalog
    # resolved and given its password as the operators do (hooks/lake_metastore.py)
    lake = resolved(
        LakeDestination(str(tmp_path / "lake"), metastore="postgres", metastore_conn_id="pgsync_catalog")
    )
    passfile = tmp_path / "pgsync.pgpass"
    write_passfile(passfile, metastore_passwords([lake]))
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, **driver_environment(), "PYTHONPATH": path, "PGPASSFILE": str(passfile)}
    env.pop("PGPASSWORD", None)  # the password file alone
    jobs = [
        subprocess.Popen(
            [sys.executable, str(SESSION), json.dumps(lake.to_config()), f"job_{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in (1, 2)
    ]
    results = []
    for job in jobs:
        out, err = job.communicate(timeout=600)
        assert job.returncode == 0, err[-3000:]
        results.append(json.loads([x for x in out.splitlines() if x.startswith("RESULT ")][-1][7:]))
    assert sorted(r["created"] for r in results) == [False, True], results
    for r in results:
        assert {"job_1", "job_2"} & set(r["databases"]), r
    assert catalog.execute('SELECT "SCHEMA_VERSION", "VERSION_COMMENT" FROM "VERSION"') == [
        ("2.3.0", "Set by pgsync")
    ]
    tables = catalog.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
    assert tables[0][0] > 40  # Hive's whole schema, not the few tables a first session touches
