"""The worker's resident Spark driver (tests/support/resident_spark.py): which jobs it runs in
place of spark-submit, and that a job failing there fails as a submitted one does, its log and
exit code with it (real Spark in the resident driver)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.exceptions import AirflowException

from airflow_provider_pgsync.hooks.spark_submit import BaselineSubmitHook
from tests.support import resident_spark


def _hook(tmp_path: Path, spec: dict[str, Any], **kwargs: Any) -> BaselineSubmitHook:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    args = ["--spec", str(path), "--result", str(tmp_path / "result.json")]
    return BaselineSubmitHook(conn_id="pgsync_no_such_spark", application_args=args, **kwargs)


def _spark(monkeypatch: pytest.MonkeyPatch, host: str) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_PGSYNC_SPARK", json.dumps({"conn_type": "spark", "host": host}))
    return "pgsync_spark"


def test_only_pgsync_jobs_on_a_local_master_with_derby_lakes_run_in_the_resident_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    derby = {"destination": {"kind": "lake", "warehouse": str(tmp_path)}, "tables": ["public.t"]}
    runs = resident_spark.ResidentSpark.runs
    assert runs(_hook(tmp_path, derby), "/x/compact_job.py")
    assert not runs(_hook(tmp_path, derby), "/x/some_other_job.py")
    monkeypatch.setattr(BaselineSubmitHook, "master", property(lambda _: "local-cluster[2,1,1024]"))
    assert not runs(_hook(tmp_path, derby), "/x/compact_job.py"), "a local-cluster master"
    monkeypatch.undo()
    env = {"spark.executorEnv.PYTHONPATH": "/elsewhere"}
    assert not runs(_hook(tmp_path, derby, conf=env), "/x/compact_job.py"), "the executors' own environment"
    passfile = {"spark.executorEnv.PGPASSFILE": "pgsync.pgpass"}
    assert runs(_hook(tmp_path, derby, conf=passfile), "/x/compact_job.py"), "the password file is found"
    shared = {**derby, "destination": {**derby["destination"], "metastore": "external"}}
    assert not runs(_hook(tmp_path, shared), "/x/compact_job.py"), "a metastore of the lake's own"
    baseline = {"destinations": [{"kind": "postgres"}, {"kind": "lake", "metastore": "derby"}]}
    assert runs(_hook(tmp_path, baseline), "/x/baseline_job.py")


@pytest.mark.usefixtures("spark_drivers")
def test_a_job_failing_in_the_resident_driver_fails_as_a_submitted_one(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    resident = resident_spark.current
    assert resident is not None, "a test marked spark runs its jobs in the resident driver"
    lake = {"kind": "lake", "warehouse": str(tmp_path / "lake")}
    hook = _hook(tmp_path, {"destination": lake, "tables": ["public.none"]})
    with pytest.raises(AirflowException, match=r"compact_job.py .* Error code is: 1"):
        resident.submit(hook, "/x/compact_job.py")
    out, err = capfd.readouterr()
    log = "\n".join([out, err, caplog.text])
    assert "Spark-Submit cmd" in log, "the command spark-submit would run, as the provider logs it"
    assert "pgsync compaction: public.none: compaction failed: lake table public.none has no base" in log
    [result] = json.loads((tmp_path / "result.json").read_text())
    assert result["table"] == "public.none" and "has no base yet" in result["error"]
