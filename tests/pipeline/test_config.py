"""PipelineConfig: defaults, the Python API, and operator arguments the real operators accept
(no database needed)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from airflow.sdk import DAG

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.operators.capture import PgCaptureOperator
from airflow_provider_pgsync.operators.compact import PgCompactOperator
from airflow_provider_pgsync.operators.replication import (
    PgCreatePublicationOperator,
    PgCreateSlotOperator,
    PgDropSlotOperator,
    PgPreflightOperator,
)
from airflow_provider_pgsync.pipeline import (
    BaselineConfig,
    ChangelogConfig,
    LakeDestinationConfig,
    PipelineConfig,
    PipelineConfigError,
    PostgresDestinationConfig,
    Schedules,
    SparkConfig,
    StateConfig,
    TableConfig,
    load_pipelines,
    pipelines_from,
)
from tests.pipeline.helpers import MINIMAL, example_yaml, write

# ---- defaults -------------------------------------------------------------------------------


def test_a_minimal_config_gets_the_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PGSYNC_CHANGELOG", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    config = PipelineConfig.from_mapping(MINIMAL)

    assert config.tables == (TableConfig("public.orders"),)
    assert config.table_keys == ("public.orders",)
    assert config.slot_name == config.publication_name == "pgsync_shop"
    assert config.destinations == (LakeDestinationConfig(),)
    assert config.destinations[0].to_mapping() == {"kind": "lake", "database": "pgsync", "metastore": "derby"}
    assert config.state == StateConfig("variables", None, "pgsync")
    assert config.changelog == ChangelogConfig(None, timedelta(days=7))
    assert config.changelog_uri == str(tmp_path / "home" / "pgsync" / "changelog" / "shop")
    assert config.spark == SparkConfig("spark_default", {}, None, {})
    assert config.schedules == Schedules("*/5 * * * *", "@daily")
    assert config.baseline == BaselineConfig(256, "auto", 10_000)
    assert config == PipelineConfig("shop", "shop_db", (TableConfig("orders"),))


def test_the_changelog_root_can_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGSYNC_CHANGELOG", "s3://bucket/changelogs/")
    assert PipelineConfig.from_mapping(MINIMAL).changelog_uri == "s3://bucket/changelogs/shop"


# ---- the Python API -------------------------------------------------------------------------


def test_the_python_api_builds_the_same_config_as_yaml(tmp_path: Path) -> None:
    (from_yaml,) = load_pipelines(write(tmp_path, example_yaml()))
    built = PipelineConfig(
        name="shop",
        source_conn_id="shop_db",
        tables=(
            TableConfig("orders"),
            TableConfig("public.customers", ("id", "name", "country"), "country = 'NL'"),
        ),
        destinations=(
            LakeDestinationConfig(warehouse="/data/lake"),
            PostgresDestinationConfig(conn_id="replica_db", name="replica"),
        ),
        state=StateConfig(backend="postgres", conn_id="control_db"),
        changelog=ChangelogConfig(uri="s3://bucket/pgsync/shop", retention=timedelta(days=7)),
        spark=SparkConfig(
            conf={"spark.sql.shuffle.partitions": "8"},
            jars="/usr/share/java/postgresql.jar",
            submit_options={"driver_memory": "4g"},
        ),
    )
    assert built == from_yaml
    assert pipelines_from([built]) == (built,)
    assert pipelines_from(built) == (built,)
    assert pipelines_from(write(tmp_path, example_yaml(), "again.yaml")) == (built,)


def test_table_entries_normalise_like_postgresql() -> None:
    config = PipelineConfig.from_mapping({**MINIMAL, "tables": ["Orders", '"Sales"."Big Orders"', "s.t"]})
    assert config.table_keys == ("public.orders", '"Sales"."Big Orders"', "s.t")
    assert config.table('"Sales"."Big Orders"').ref.name == "Big Orders"
    with pytest.raises(ConfigError, match=r"no table public\.missing; its tables: public\.orders"):
        config.table("missing")


def test_python_api_mistakes_name_the_field() -> None:
    with pytest.raises(PipelineConfigError, match=r"- state: must be a StateConfig"):
        PipelineConfig("shop", "db", (TableConfig("orders"),), state={"backend": "postgres"})  # type: ignore[arg-type]
    with pytest.raises(PipelineConfigError, match=r"- name: 'a b' is not allowed"):
        PipelineConfig("a b", "db", (TableConfig("orders"),))
    with pytest.raises(PipelineConfigError, match=r"- tables\[0\]: must be a TableConfig"):
        PipelineConfig("shop", "db", ("orders",))  # type: ignore[arg-type]


# ---- the operators take the arguments as they are --------------------------------------------


def test_operator_kwargs_are_accepted_by_the_real_operators(tmp_path: Path) -> None:
    (config,) = load_pipelines(write(tmp_path, example_yaml()))

    with DAG("pgsync_config_kwargs", schedule=None):
        preflight = PgPreflightOperator(task_id="preflight", **config.preflight_kwargs())
        publication = PgCreatePublicationOperator(task_id="publication", **config.publication_kwargs())
        slot = PgCreateSlotOperator(task_id="slot", **config.slot_kwargs())
        drop = PgDropSlotOperator(task_id="drop_slot", **config.slot_kwargs())
        capture = PgCaptureOperator(task_id="capture", **config.capture_kwargs())
        apply = PgApplyOperator(task_id="apply", **config.apply_kwargs())
        baseline = PgBaselineOperator(
            task_id="baseline", **config.baseline_kwargs("public.customers", rebaseline=True)
        )
        compacts = [
            PgCompactOperator(task_id=f"compact_{name}", **kwargs)
            for name, kwargs in config.compact_kwargs().items()
        ]

    assert preflight.tables == publication.tables == config.operator_tables()
    assert preflight.slot_name == slot.slot_name == drop.slot_name == "pgsync_shop"
    assert publication.publication_name == "pgsync_shop"
    assert {slot.postgres_conn_id, capture.postgres_conn_id, apply.postgres_conn_id} == {"shop_db"}
    assert (capture.pipeline, capture.changelog_uri, capture.max_changes) == (
        "shop",
        "s3://bucket/pgsync/shop",
        1_000_000,
    )
    assert (capture.state_backend, capture.state_conn_id, capture.state_schema) == (
        "postgres",
        "control_db",
        "pgsync",
    )
    assert apply.destinations == [
        {"kind": "lake", "database": "pgsync", "metastore": "derby", "warehouse": "/data/lake"},
        {
            "kind": "postgres",
            "conn_id": "replica_db",
            "name": "replica",
            "control_schema": "pgsync",
            "fillfactor": 70,
        },
    ]
    assert (apply.batch_rows, apply.batch_bytes) == (1_000_000, 256 * 2**20)
    assert baseline.table == {"table": "public.customers", "columns": ["id", "name", "country"],
                              "row_filter": "country = 'NL'"}  # fmt: skip
    assert baseline.destinations == apply.destinations  # every destination takes the baseline
    assert config.backfill_destinations() == apply.destinations  # lakes and replicas take backfills
    assert baseline.rebaseline is True
    assert (baseline.spark_conn_id, baseline.spark_jars) == (
        "spark_default",
        "/usr/share/java/postgresql.jar",
    )
    assert baseline.spark_conf == {"spark.sql.shuffle.partitions": "8"}
    assert baseline.spark_submit_options == {"driver_memory": "4g"}
    assert [c.task_id for c in compacts] == ["compact_lake"]
    assert compacts[0].tables == ["public.orders", "public.customers"]
    assert compacts[0].destination == apply.destinations[0]


def test_minimal_kwargs_are_accepted_too() -> None:
    config = PipelineConfig.from_mapping(MINIMAL)
    with DAG("pgsync_config_minimal", schedule=None):
        capture = PgCaptureOperator(task_id="capture", **config.capture_kwargs())
        apply = PgApplyOperator(task_id="apply", **config.apply_kwargs())
        baseline = PgBaselineOperator(task_id="baseline", **config.baseline_kwargs("orders"))
        (compact,) = (
            PgCompactOperator(task_id=f"compact_{n}", **k) for n, k in config.compact_kwargs().items()
        )
    assert capture.state_conn_id is None and capture.state_backend == "variables"
    assert apply.destinations == [{"kind": "lake", "database": "pgsync", "metastore": "derby"}]
    assert baseline.table == "public.orders" and baseline.spark_jars is None
    assert compact.tables == ["public.orders"]


def test_a_pipeline_without_a_lake_has_a_baseline_and_backfills_but_no_compaction() -> None:
    config = PipelineConfig.from_mapping({**MINIMAL, "destinations": [{"kind": "postgres", "conn_id": "r"}]})
    assert config.compact_kwargs() == {}
    assert config.baseline_kwargs("orders")["destinations"] == [
        {"kind": "postgres", "conn_id": "r", "name": "postgres", "control_schema": "pgsync", "fillfactor": 70}
    ]
    assert config.backfill_destinations() == config.baseline_kwargs("orders")["destinations"]
