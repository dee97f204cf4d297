"""The parts of a pipeline config: defaults the operators share and mistakes in Python."""

from __future__ import annotations

import inspect
from datetime import timedelta
from typing import Any

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.operators.capture import PgCaptureOperator
from airflow_provider_pgsync.pipeline.config import PipelineConfig
from airflow_provider_pgsync.pipeline.parts import (
    SUBMIT_OPTIONS,
    BaselineConfig,
    BatchLimits,
    ChangelogConfig,
    SparkConfig,
    StateConfig,
    TableConfig,
)
from airflow_provider_pgsync.pipeline.problems import PipelineConfigError


def default_of(operator: type, name: str) -> Any:
    return inspect.signature(operator.__init__).parameters[name].default  # type: ignore[misc]


def test_defaults_are_the_operators_defaults() -> None:
    limits, baseline, state = BatchLimits(), BaselineConfig(), StateConfig()
    assert limits.max_changes == default_of(PgCaptureOperator, "max_changes")
    assert limits.batch_rows == default_of(PgApplyOperator, "batch_rows")
    assert limits.batch_bytes == default_of(PgApplyOperator, "batch_bytes")
    assert baseline.target_partition_mb == default_of(PgBaselineOperator, "target_partition_mb")
    assert baseline.fetch_size == default_of(PgBaselineOperator, "fetch_size")
    assert baseline.copy_path == default_of(PgBaselineOperator, "copy_path")
    assert state.backend == default_of(PgCaptureOperator, "state_backend")
    assert state.schema == default_of(PgCaptureOperator, "state_schema")
    assert SparkConfig().conn_id == default_of(PgBaselineOperator, "spark_conn_id")


def test_submit_options_are_spark_submit_hook_arguments_of_that_type() -> None:
    parameters = inspect.signature(SparkSubmitHook.__init__).parameters
    for name, kind in SUBMIT_OPTIONS.items():
        assert kind.__name__ in str(parameters[name].annotation), name


def test_python_api_mistakes_name_the_field() -> None:
    with pytest.raises(PipelineConfigError, match=r"- columns\[0\]: must be a column name"):
        TableConfig("orders", ("",))
    with pytest.raises(PipelineConfigError, match=r"- retention: must be a duration"):
        ChangelogConfig(retention=timedelta(hours=-1))


def test_the_peek_statement_timeout_reaches_capture_and_has_its_default() -> None:
    assert BatchLimits().peek_statement_timeout == timedelta(0)  # no limit
    assert default_of(PgCaptureOperator, "peek_statement_timeout") == 0
    limits = BatchLimits(peek_statement_timeout=timedelta(minutes=30))
    assert limits.to_mapping()["peek_statement_timeout"] == "30m"
    config = PipelineConfig.from_mapping(
        {"name": "shop", "source_conn_id": "db", "tables": ["t"], "limits": {"peek_statement_timeout": "30m"}}
    )
    kwargs = config.capture_kwargs()
    assert kwargs["peek_statement_timeout"] == timedelta(minutes=30)
    assert PgCaptureOperator(task_id="capture", **kwargs).peek_statement_timeout == 1800.0
    with pytest.raises(PipelineConfigError, match=r"- peek_statement_timeout: must be a duration"):
        BatchLimits(peek_statement_timeout=timedelta(seconds=-1))
    with pytest.raises(ConfigError, match=r"capture: peek_statement_timeout must be a number of seconds"):
        PgCaptureOperator(task_id="capture", **{**kwargs, "peek_statement_timeout": -1})


def test_a_mounted_password_file_is_an_absolute_path_passed_to_the_baseline() -> None:
    spark = SparkConfig(
        password_file="/etc/pgsync/pgpass",
        conf={
            "spark.kubernetes.driver.secrets.pgsync-pgpass": "/etc/pgsync",
            "spark.kubernetes.executor.secrets.pgsync-pgpass": "/etc/pgsync",
        },
    )
    assert spark.to_mapping()["password_file"] == "/etc/pgsync/pgpass"
    assert "spark.kubernetes.driver.secrets.pgsync-pgpass" in spark.conf  # a mount by name, no secret
    for bad in ("pgpass", "", "/etc/pg\x00pass", "/x" * 3000):
        with pytest.raises(ConfigError, match="password_file: must be the absolute path"):
            SparkConfig(password_file=bad)
    with pytest.raises(ConfigError, match="looks like a secret"):
        SparkConfig(conf={"spark.hadoop.fs.s3a.secret.key": "x"})


def test_the_baseline_takes_the_mounted_password_file() -> None:
    config = PipelineConfig.from_mapping(
        {"name": "shop", "source_conn_id": "db", "tables": ["t"],
         "spark": {"password_file": "/etc/pgsync/pgpass"}}
    )
    kwargs = config.baseline_kwargs(config.tables[0], rebaseline=False)
    assert kwargs["spark_password_file"] == "/etc/pgsync/pgpass"
    assert kwargs["spark_password_file"] == PgBaselineOperator(task_id="b", **kwargs).spark_password_file
