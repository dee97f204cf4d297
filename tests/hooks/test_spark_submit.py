"""BaselineSubmitHook's choice of master and deploy mode: a standalone master (``spark://``) in
client mode is submitted to as given; cluster mode there, which Spark refuses for Python
applications only after starting spark-submit, is refused before, naming the connection and
the remedy."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.spark_submit import BaselineSubmitHook
from airflow_provider_pgsync.operators.compact import PgCompactOperator


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
