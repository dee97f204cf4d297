"""BaselineSubmitHook's choice of master and deploy mode: a standalone master (``spark://``) in
client mode is submitted to as given; cluster mode there, which Spark refuses for Python
applications only after starting spark-submit, is refused before, naming the connection and
the remedy. A driver that runs here keeps the JVM's JIT unless the machine's settings or the job
choose one, and by default leaves nothing behind its task."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

import machine_settings
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.spark_class_archive import DIR_VARIABLE
from airflow_provider_pgsync.hooks.spark_submit import BaselineSubmitHook, driver_environment
from airflow_provider_pgsync.operators.compact import PgCompactOperator
from tests import spark_starts

# the subject is spark-submit itself:
# not the worker's resident driver (tests/support/resident_spark.py)
pytestmark = pytest.mark.spark_submit


def _connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "spark", **fields}))


@pytest.mark.parametrize(
    "fields",
    [
        {"host": "spark://10.0.0.5", "port": 7077},
        {"host": "spark://10.0.0.5:7077"},
        {"host": "spark://10.0.0.5", "port": 7077, "extra": {"deploy-mode": "client"}},
    ],
    ids=["host-and-port", "url-in-host", "client-mode"],
)
def test_a_standalone_master_in_client_mode_is_used_as_given(
    fields: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _connection(monkeypatch, "standalone", **fields)
    hook = BaselineSubmitHook(conn_id="standalone")
    assert hook.master == "spark://10.0.0.5:7077"
    assert not hook.cluster_mode


def test_cluster_mode_on_a_standalone_master_is_refused_naming_connection_and_remedy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _connection(
        monkeypatch, "standalone", host="spark://10.0.0.5", port=7077, extra={"deploy-mode": "cluster"}
    )
    with pytest.raises(ConfigError) as refused:
        BaselineSubmitHook(conn_id="standalone")
    message = str(refused.value)
    assert "'standalone'" in message and "spark://10.0.0.5:7077" in message
    assert "remove 'deploy-mode'" in message
    # an operator reports it before any job is submitted
    compact = PgCompactOperator(task_id="compact", tables=["public.items"], spark_conn_id="standalone")
    with pytest.raises(ConfigError, match="client mode only"):
        compact.execute({})  # type: ignore[arg-type]


def test_cluster_mode_on_other_masters_is_left_to_them(monkeypatch: pytest.MonkeyPatch) -> None:
    _connection(monkeypatch, "yarn_cluster", host="yarn", extra={"deploy-mode": "cluster"})
    assert BaselineSubmitHook(conn_id="yarn_cluster").cluster_mode


_JIT_APP = """
import sys
from pyspark import SparkContext

jvm = SparkContext.getOrCreate()._jvm
bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
    jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
)
open(sys.argv[1], "w").write(bean.getVMOption("TieredStopAtLevel").getValue())
"""


def _no_jit_options() -> str:
    """The tests' SPARK_SUBMIT_OPTS (tests/conftest.py) without their JIT option."""
    options = os.environ.get("SPARK_SUBMIT_OPTS", "").split()
    return " ".join(w for w in options if not w.startswith("-XX:Tiered"))


def _processes_with(marker: str) -> list[int]:
    """The live processes whose environment holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # gone, or not ours to read
                pass
    return found


@pytest.mark.usefixtures("spark_drivers")
@pytest.mark.parametrize(
    ("quick_jit", "conf", "level"),
    [
        (False, {}, "4"),
        (True, {}, "1"),
        (True, {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4"}, "4"),
    ],
    ids=["production", "machine-settings", "the-job-s-own"],
)
def test_a_driver_that_runs_here_keeps_the_jvm_s_jit_and_leaves_nothing_behind(
    quick_jit: bool, conf: dict[str, str], level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spark-submit through the hook on a local master, as the operators do: the driver JVM's
    effective TieredStopAtLevel (read in the driver itself) is the JVM's own unless the
    machine's settings chose the quick tier (dev/machine_settings.py) and the job did not
    choose again. Without those settings (production) the task writes nothing under the home
    folder's cache and no process it started outlives it."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv(DIR_VARIABLE, raising=False)
    if quick_jit:
        monkeypatch.setenv("SPARK_SUBMIT_OPTS", _no_jit_options())
        machine_settings.use()
    else:  # a production worker's: none of the tests' options but the log that counts the driver
        monkeypatch.setenv("SPARK_SUBMIT_OPTS", spark_starts.count_option())
    marker = f"submit-{uuid.uuid4().hex}"
    app, out = tmp_path / "app.py", tmp_path / "level.txt"
    app.write_text(_JIT_APP)
    hook = BaselineSubmitHook(
        conf={"spark.ui.enabled": "false", **conf},
        application_args=[str(out)],
        env_vars={"PYSPARK_PYTHON": sys.executable, **driver_environment(), "PGSYNC_TEST_MARKER": marker},
    )
    hook.submit(str(app))
    assert out.read_text() == level
    if not quick_jit:
        assert not (home / ".cache").exists(), sorted(str(p) for p in (home / ".cache").rglob("*"))
        assert _processes_with(f"PGSYNC_TEST_MARKER={marker}") == [], "a process of the job outlived it"


def test_the_hook_adds_no_submit_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's JVM options are the machine's (``SPARK_SUBMIT_OPTS``) and the job's: the
    hook adds none, on any master."""
    seen: list[dict[str, Any] | None] = []
    monkeypatch.setattr(SparkSubmitHook, "submit", lambda self, *a, **k: seen.append(self._env_vars))
    monkeypatch.setenv(DIR_VARIABLE, "off")  # no class archive written after the fake job
    for master in ("yarn", "local[2]"):
        _connection(monkeypatch, "m", host=master)
        monkeypatch.setenv("SPARK_SUBMIT_OPTS", "")
        BaselineSubmitHook(conn_id="m", env_vars={"A": "b"}).submit("app.py")
    assert seen == [{"A": "b"}, {"A": "b"}]
