"""Reading pipeline config files: the documented example, round trips, and every kind of
mistake named by its key path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pipeline import (
    LakeDestinationConfig,
    PipelineConfig,
    PipelineConfigError,
    PostgresDestinationConfig,
    StateConfig,
    TableConfig,
    load_pipelines,
    parse_pipelines,
    pipelines_from,
)
from tests.pipeline.helpers import MINIMAL, example_yaml, problem, write

# ---- round trips ----------------------------------------------------------------------------


def test_the_documented_example_loads_and_round_trips(tmp_path: Path) -> None:
    (config,) = load_pipelines(write(tmp_path, example_yaml()))

    assert config.table_keys == ("public.orders", "public.customers")
    assert config.table("customers") == TableConfig(
        "public.customers", ("id", "name", "country"), "country = 'NL'"
    )
    assert config.destinations == (
        LakeDestinationConfig("/data/lake", "pgsync", "derby"),
        PostgresDestinationConfig("replica_db", "replica", "pgsync", fillfactor=70),
    )
    assert config.state == StateConfig("postgres", "control_db", "pgsync")
    assert config.changelog_uri == "s3://bucket/pgsync/shop"
    assert config.spark.conf == {"spark.sql.shuffle.partitions": "8"}
    assert config.spark.submit_options == {"driver_memory": "4g"}

    assert PipelineConfig.from_mapping(config.to_mapping()) == config
    dumped = write(tmp_path, yaml.safe_dump({"pipelines": [config.to_mapping()]}), "dumped.yaml")
    assert load_pipelines(dumped) == (config,)


def test_a_file_may_hold_a_single_pipeline(tmp_path: Path) -> None:
    (config,) = load_pipelines(write(tmp_path, yaml.safe_dump(MINIMAL)))
    assert config.name == "shop"


# ---- mistakes -------------------------------------------------------------------------------

_DROP = object()

MISTAKES: list[tuple[dict[str, Any], str, list[str]]] = [
    ({"extra": 1}, "extra", ["unknown key", "source_conn_id", "limits"]),
    ({"name": "shop-eu"}, "name", ["'shop-eu'", "letters, digits or _"]),
    ({"name": "x" * 57}, "name", ["1-56"]),
    ({"source_conn_id": 5}, "source_conn_id", ["must be a string", "5"]),
    ({"tables": _DROP}, "tables", ["missing"]),
    ({"tables": "orders"}, "tables", ["must be a list"]),
    ({"tables": []}, "tables", ["at least one"]),
    ({"tables": ["a.b.c"]}, "tables[0]", ["3 dotted parts"]),
    ({"tables": ["orders", "public.orders"]}, "tables[1]", ["listed twice", "tables[0]"]),
    ({"tables": ["orders", {"table": "c", "row_filter": " "}]}, "tables[1].row_filter", ["non-empty"]),
    ({"tables": [{"table": "c", "columns": "id"}]}, "tables[0].columns", ["must be a list"]),
    ({"tables": [{"table": "c", "columns": []}]}, "tables[0].columns", ["publishes nothing"]),
    ({"tables": [{"table": "c", "columns": ["id", "id"]}]}, "tables[0].columns[1]", ["twice"]),
    ({"tables": [{"table": "c", "filter": "x"}]}, "tables[0].filter", ["unknown key", "row_filter"]),
    ({"tables": [{"columns": ["id"]}]}, "tables[0].table", ["missing"]),
    ({"slot_name": "Pgsync-Shop"}, "slot_name", ["lower-case"]),
    ({"publication_name": ""}, "publication_name", ["empty"]),
    ({"destinations": [{"kind": "warehouse"}]}, "destinations[0].kind", ["'warehouse'", "lake, postgres"]),
    ({"destinations": ["kafka"]}, "destinations[0]", ["'kafka'", "lake, postgres"]),
    ({"destinations": [5]}, "destinations[0]", ["mapping"]),
    ({"destinations": [{"kind": "postgres"}]}, "destinations[0].conn_id", ["missing"]),
    ({"destinations": [{"kind": "postgres", "conn_id": "r", "password": "x"}]}, "destinations[0].password",
     ["unknown key", "conn_id, name, control_schema, fillfactor"]),
    ({"destinations": [{"kind": "postgres", "conn_id": "r", "fillfactor": 101}]},
     "destinations[0].fillfactor", ["integer from 10 to 100", "101"]),
    ({"destinations": [{"kind": "postgres", "conn_id": "r", "fillfactor": "70"}]},
     "destinations[0].fillfactor", ["must be an integer", "the string '70'"]),
    ({"destinations": [{"kind": "lake", "name": "x"}]}, "destinations[0].name",
     ["warehouse, database, metastore"]),
    ({"destinations": [{"metastore": "glue"}]}, "destinations[0].metastore", ["derby, postgres, external"]),
    ({"destinations": [{"database": "Sales"}]}, "destinations[0].database", ["lower-case"]),
    ({"destinations": [{"warehouse": "s3://b/lake"}]}, "destinations[0].metastore", ["local", "external"]),
    ({"destinations": [{"warehouse": "lake"}]}, "destinations[0].warehouse", ["'lake' is relative"]),
    ({"destinations": ["lake", {"warehouse": "/other"}]}, "destinations[1]", ["'lake'", "destinations[0]"]),
    ({"destinations": [{"kind": "postgres", "conn_id": "a"}, {"kind": "postgres", "conn_id": "b"}]},
     "destinations[1]", ["'postgres'", "own name"]),
    ({"destinations": []}, "destinations", ["at least one"]),
    ({"state": {"backend": "redis"}}, "state.backend", ["'redis'", "variables, postgres"]),
    ({"state": {"schema": "s" * 64}}, "state.schema", ["63-byte"]),
    ({"state": {"conn_id": ""}}, "state.conn_id", ["connection"]),
    ({"state": "postgres"}, "state", ["must be a mapping"]),
    ({"changelog": {"retention": "a week"}}, "changelog.retention", ["36h, 7d"]),
    ({"changelog": {"uri": "~/changelog"}}, "changelog.uri", ["relative", "absolute folder or a URI"]),
    ({"changelog": {"uri": ""}}, "changelog.uri", ["absolute folder or a URI"]),
    ({"changelog": {"retention": 7}}, "changelog.retention", ["must be a string"]),
    ({"changelog": {"retention_days": 7}}, "changelog.retention_days", ["unknown key", "uri, retention"]),
    ({"spark": {"conf": {"spark.x": [1]}}}, "spark.conf.spark.x", ["string or number"]),
    ({"spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "k"}}},
     "spark.conf.spark.hadoop.fs.s3a.secret.key", ["secret"]),
    ({"spark": {"submit_options": {"conf": {}}}}, "spark.submit_options.conf", ["unknown", "driver_memory"]),
    ({"spark": {"submit_options": {"executor_cores": "2"}}}, "spark.submit_options.executor_cores",
     ["integer", "'2'"]),
    ({"baseline": {"copy_path": "adbc"}}, "baseline.copy_path", ["'adbc'", "auto, off"]),
    ({"baseline": {"target_partition_mb": 0}}, "baseline.target_partition_mb", ["positive"]),
    ({"schedules": {"cdc": "61 * * * *"}}, "schedules.cdc", ["cron", "@hourly"]),
    ({"schedules": {"compact": "@minutely"}}, "schedules.compact", ["'@minutely'", "@daily"]),
    ({"schedules": {"cdc": 5}}, "schedules.cdc", ["cron", "null"]),
    ({"limits": {"batch_rows": "1M"}}, "limits.batch_rows", ["integer"]),
    ({"limits": {"max_changes": -1}}, "limits.max_changes", ["positive integer"]),
    ({"limits": {"batch_bytes": True}}, "limits.batch_bytes", ["integer", "boolean"]),
    ({"limits": {"peek_statement_timeout": "soon"}}, "limits.peek_statement_timeout", ["36h, 7d"]),
    ({"limits": {"peek_statement_timeout": 30}}, "limits.peek_statement_timeout", ["must be a string"]),
]  # fmt: skip


@pytest.mark.parametrize(("change", "path", "fragments"), MISTAKES, ids=[m[1] for m in MISTAKES])
def test_each_mistake_is_named_by_its_key_path(
    tmp_path: Path, change: dict[str, Any], path: str, fragments: list[str]
) -> None:
    pipeline = {**MINIMAL, **change}
    pipeline = {k: v for k, v in pipeline.items() if v is not _DROP}
    file = write(tmp_path, yaml.safe_dump({"pipelines": [MINIMAL | {"name": "other"}, pipeline]}))

    with pytest.raises(ConfigError) as raised:
        load_pipelines(file)

    error = raised.value
    assert isinstance(error, PipelineConfigError)
    message = problem(error, f"pipelines[1].{path}")
    for fragment in fragments:
        assert fragment in message
    assert str(file) in str(error) and f"pipelines[1].{path}: " in str(error)
    assert not [p for p in error.problems if p.path.startswith("pipelines[0]")]


def test_every_problem_of_a_file_is_reported_at_once(tmp_path: Path) -> None:
    text = yaml.safe_dump(
        {
            "pipelines": [
                {**MINIMAL, "name": "a b", "tables": ["orders", {"table": "x", "row_filter": ""}]},
                {**MINIMAL, "name": "b", "state": {"backend": "redis"}, "limits": {"batch_rows": 0}},
                {"tables": ["t"]},
            ]
        }
    )
    with pytest.raises(PipelineConfigError) as raised:
        load_pipelines(write(tmp_path, text))
    assert {p.path for p in raised.value.problems} == {
        "pipelines[0].name",
        "pipelines[0].tables[1].row_filter",
        "pipelines[1].state.backend",
        "pipelines[1].limits.batch_rows",
        "pipelines[2].name",
        "pipelines[2].source_conn_id",
    }
    assert "has 6 problem(s)" in str(raised.value)


def test_pipeline_names_are_unique_in_a_file(tmp_path: Path) -> None:
    text = yaml.safe_dump({"pipelines": [MINIMAL, {**MINIMAL, "source_conn_id": "other_db"}]})
    with pytest.raises(PipelineConfigError) as raised:
        load_pipelines(write(tmp_path, text))
    assert "'shop' is used by pipelines[0] too" in problem(raised.value, "pipelines[1].name")


def test_slots_and_publications_are_unique_per_source(tmp_path: Path) -> None:
    second = {**MINIMAL, "name": "shop2", "slot_name": "pgsync_shop", "publication_name": "pgsync_shop"}
    with pytest.raises(PipelineConfigError) as raised:
        parse_pipelines({"pipelines": [MINIMAL, second]})
    assert "pgsync_shop" in problem(raised.value, "pipelines[1].slot_name")
    assert "pgsync_shop" in problem(raised.value, "pipelines[1].publication_name")
    # another source server may have a slot of the same name
    configs = parse_pipelines({"pipelines": [MINIMAL, {**second, "source_conn_id": "other_db"}]})
    assert [c.slot_name for c in configs] == ["pgsync_shop", "pgsync_shop"]


def test_pipelines_do_not_share_a_changelog() -> None:
    first = {**MINIMAL, "changelog": {"uri": "/data/changelog"}}
    second = {**first, "name": "other"}
    with pytest.raises(PipelineConfigError) as raised:
        parse_pipelines({"pipelines": [first, second]})
    assert "own changelog" in problem(raised.value, "pipelines[1].changelog.uri")


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    file = write(tmp_path, "pipelines:\n  - name: shop\n    tables: [orders\n    source_conn_id: db\n")
    with pytest.raises(ConfigError, match=r"pgsync\.yaml is not valid YAML: line 4, column \d+"):
        load_pipelines(file)


def test_a_key_given_twice_names_its_line(tmp_path: Path) -> None:
    file = write(tmp_path, "name: shop\nsource_conn_id: db\ntables: [a]\ntables: [b]\n")
    with pytest.raises(ConfigError, match=r"line 4, column 1: found the key 'tables' twice"):
        load_pipelines(file)


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        ("", "", "is empty"),
        ("pipelines: []\n", "pipelines", "at least one pipeline"),
        ("pipelines: {shop: 1}\n", "pipelines", "must be a list"),
        ("- name: shop\n", "", "must be a mapping"),
        ("pipelines: [shop]\n", "pipelines[0]", "must be a mapping"),
        ("pipelines: []\nname: x\n", "name", "unknown key; allowed: pipelines"),
    ],
)
def test_the_shape_of_a_file(tmp_path: Path, text: str, path: str, fragment: str) -> None:
    with pytest.raises(PipelineConfigError) as raised:
        load_pipelines(write(tmp_path, text))
    assert fragment in problem(raised.value, path)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read pipeline config .*nothing\.yaml"):
        load_pipelines(tmp_path / "nothing.yaml")


def test_pipelines_built_in_python_must_not_clash_either() -> None:
    with pytest.raises(PipelineConfigError) as raised:
        pipelines_from([PipelineConfig.from_mapping(MINIMAL)] * 2)
    assert "[1].name: 'shop' is used by [0] too" in str(raised.value)
    with pytest.raises(PipelineConfigError, match=r"- \[1\]: must be a PipelineConfig"):
        pipelines_from([PipelineConfig.from_mapping(MINIMAL), MINIMAL])  # type: ignore[list-item]
