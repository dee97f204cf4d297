"""The baseline job's tasks as Spark ships them: no password in their serialized bytes, and the
password file they name is enough for them to connect (a server that requires the password)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.serializers import CloudPickleSerializer

from airflow_provider_pgsync.baseline.arrow_copy import copy_sql
from airflow_provider_pgsync.baseline.passfile import PASSFILE_NAME, PassEntry, write_passfile
from airflow_provider_pgsync.spark import baseline_job
from airflow_provider_pgsync.spark.baseline_tasks import ArrowCopy, Passfile
from airflow_provider_pgsync.typemap.spark import ColumnRead
from tests.baseline.secret_role import require_password, secret_role
from tests.conftest import Database
from tests.support.baseline_spec import make_spec

PASSWORD = "Sekr1t:pass\\word-7f3c9a"
REPLICA_PASSWORD = "R3plica-pass-e81d44"


class Rows:
    """A stand-in for the job's row accumulator (``add``), picklable by reference."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, count: int) -> None:
        self.value += count


def _replica() -> dict[str, Any]:
    return {
        "kind": "postgres",
        "name": "replica",
        "conninfo": "host=replica.example port=5432 dbname=copy user=writer",
        "staging": "public.pgsync_stage",
        "parts": "pgsync.baseline_parts",
        "columns": ["id"],
    }


@pytest.mark.parametrize("shipped", [True, False], ids=["shipped", "mounted"])
def test_serialized_tasks_hold_no_password(
    shipped: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the job's process holds (a password file, the environment variables that once
    carried the passwords), the tasks it parallelizes serialize to bytes without a password, and
    with the reference to the password file."""
    path = tmp_path / PASSFILE_NAME
    write_passfile(
        path,
        [
            PassEntry("db.example", "5432", "shop", "replicator", PASSWORD),
            PassEntry("replica.example", "5432", "copy", "writer", REPLICA_PASSWORD),
        ],
    )
    monkeypatch.setenv("PGPASSFILE", str(path))
    monkeypatch.setenv("PGSYNC_SOURCE_PASSWORD", PASSWORD)  # the old channel, still in the environment
    monkeypatch.setenv("PGSYNC_DEST_PASSWORD_1", REPLICA_PASSWORD)
    reference = PASSFILE_NAME if shipped else str(path)
    spec = make_spec(
        destinations=(make_spec().destinations[0], _replica()),
        arrow_query="(SELECT 1) AS b",
        pg_query="(SELECT 1) AS b",
        passfile=reference,
        passfile_shipped=shipped,
    )
    replicas = [(1, spec.destinations[1])]
    tasks = [baseline_job.arrow_task(spec, Rows()), baseline_job.postgres_task(spec, replicas, Rows())]

    for task in tasks:
        data = CloudPickleSerializer().dumps(task)  # what Spark sends to an executor
        for secret in (PASSWORD, REPLICA_PASSWORD, "Sekr1t", "R3plica"):
            assert secret.encode() not in data, f"{type(task).__name__} carries a password"
        assert reference.encode() in data
        assert dataclasses.replace(CloudPickleSerializer().loads(data), rows=task.rows) == task
    assert {t.passfile for t in tasks} == {Passfile(reference, shipped)}


def test_a_task_connects_through_the_password_file_alone(database: Database, tmp_path: Path) -> None:
    """The Arrow path's task, serialized and run as an executor would (a mounted password file
    that others may read: the task narrows it, else libpq would ignore it)."""
    database.execute("CREATE TABLE t (id int PRIMARY KEY)")
    database.execute("INSERT INTO t SELECT generate_series(1, 25)")
    with secret_role(database) as role:
        require_password(role, database.name)
        mounted = tmp_path / "mounted.pgpass"
        write_passfile(
            mounted, [PassEntry(role.host, str(role.port), database.name, role.name, role.password)]
        )
        mounted.chmod(0o644)
        reads = (ColumnRead("id", "{col}", "native", "int"),)
        task = ArrowCopy(
            conninfo=role.conninfo(database.name),
            passfile=Passfile(str(mounted), shipped=False),
            session=("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",),
            reads=reads,
            rows=Rows(),
        )
        data = CloudPickleSerializer().dumps(task)
        assert role.token.encode() not in data
        out = tmp_path / "part-00000.parquet"
        shipped = CloudPickleSerializer().loads(data)
        assert (
            shipped((str(out), copy_sql('(SELECT "id" FROM "public"."t") AS b', list(reads), "true"))) == 25
        )
        assert sorted(pq.read_table(out).column("id").to_pylist()) == list(range(1, 26))
        assert shipped.rows.value == 25
        broken = dataclasses.replace(task, passfile=Passfile())  # no password file: refused
        with pytest.raises(Exception, match="password"):
            broken((str(tmp_path / "x.parquet"), copy_sql("(SELECT 1 AS id) AS b", list(reads), "true")))
