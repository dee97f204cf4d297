"""The destination configs: names, metastores and fillfactors the destinations themselves take."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from airflow_provider_pgsync.destinations.lake import METASTORES
from airflow_provider_pgsync.destinations.lake_changes import LakeChanges
from airflow_provider_pgsync.destinations.postgres import DEFAULT_FILLFACTOR, PostgresDestination
from airflow_provider_pgsync.hooks import replication as replication_module
from airflow_provider_pgsync.pipeline.config import PipelineConfig
from airflow_provider_pgsync.pipeline.destination_configs import (
    CustomDestinationConfig,
    LakeDestinationConfig,
    PostgresDestinationConfig,
)
from airflow_provider_pgsync.pipeline.problems import PipelineConfigError
from tests.pipeline.helpers import MINIMAL, problem


def test_lake_destination_names_are_the_names_apply_keeps_watermarks_under(tmp_path: Path) -> None:
    for database, name in (("pgsync", "lake"), ("sales", "lake_sales")):
        lake = LakeDestinationConfig(warehouse=str(tmp_path), database=database)
        assert lake.name == name == LakeChanges.from_config(lake.to_mapping()).name


def test_metastores_are_the_lake_s() -> None:
    for metastore in METASTORES:
        warehouse = None if metastore == "derby" else "s3://bucket/lake"
        conn_id = "lake_catalog" if metastore == "postgres" else None
        config = LakeDestinationConfig(warehouse=warehouse, metastore=metastore, metastore_conn_id=conn_id)
        assert config.metastore == metastore


def test_a_postgres_metastore_names_its_connection() -> None:
    with pytest.raises(PipelineConfigError, match="metastore_conn_id: must name an Airflow connection"):
        LakeDestinationConfig(metastore="postgres")
    with pytest.raises(PipelineConfigError, match="metastore_conn_id: must name an Airflow connection"):
        LakeDestinationConfig(metastore="postgres", metastore_conn_id="x y; DROP")
    with pytest.raises(PipelineConfigError, match="metastore_conn_id: is for metastore 'postgres'"):
        LakeDestinationConfig(metastore="derby", metastore_conn_id="lake_catalog")
    config = LakeDestinationConfig(metastore="postgres", metastore_conn_id="lake_catalog")
    assert config.to_mapping()["metastore_conn_id"] == "lake_catalog"


def test_the_fillfactor_defaults_to_the_postgres_destination_s() -> None:
    replica = PostgresDestinationConfig("replica_db")
    default = inspect.signature(PostgresDestination.__init__).parameters["fillfactor"].default
    assert replica.fillfactor == DEFAULT_FILLFACTOR == default
    assert replica.to_mapping() == {"kind": "postgres", "conn_id": "replica_db", "name": "postgres",
                                    "control_schema": "pgsync", "fillfactor": DEFAULT_FILLFACTOR}  # fmt: skip


@pytest.mark.parametrize("fillfactor", [10, 55, 100])
def test_a_fillfactor_round_trips(fillfactor: int) -> None:
    entry = {"kind": "postgres", "conn_id": "replica_db", "fillfactor": fillfactor}
    config = PipelineConfig.from_mapping({**MINIMAL, "destinations": [entry]})
    assert config.destinations == (PostgresDestinationConfig("replica_db", fillfactor=fillfactor),)
    assert config.destinations[0].to_mapping()["fillfactor"] == fillfactor
    assert PipelineConfig.from_mapping(config.to_mapping()) == config


@pytest.mark.parametrize("fillfactor", [9, 101, 0, -70, 70.0, True, "70", None])
def test_a_fillfactor_is_an_integer_from_10_to_100(fillfactor: object) -> None:
    with pytest.raises(PipelineConfigError, match=r"- fillfactor: must be an integer from 10 to 100, not "):
        PostgresDestinationConfig("replica_db", fillfactor=fillfactor)  # type: ignore[arg-type]


def test_the_postgres_destination_takes_its_config(monkeypatch: pytest.MonkeyPatch) -> None:
    class Hook:
        connection = SimpleNamespace(password=None, extra_dejson={"keepalives_idle": 5})

        def __init__(self, postgres_conn_id: str) -> None:
            assert postgres_conn_id == "replica_db"

        def libpq_target(self) -> str:
            return "host=replica dbname=shop"

    class Recorded(PostgresDestination):
        def __init__(self, conninfo: str, **kwargs: Any) -> None:  # no connection
            self.conninfo = conninfo
            self.kwargs = kwargs

    monkeypatch.setattr(replication_module, "PgReplicationHook", Hook)
    config = PostgresDestinationConfig("replica_db", name="replica", control_schema="ctl", fillfactor=100)
    destination = Recorded.from_config(config.to_mapping())
    assert destination.kwargs == {
        "name": "replica",
        "control_schema": "ctl",
        "fillfactor": 100,
        "source": None,
    }
    # TCP keepalives: pgsync's defaults, except where the connection's extras set their own
    assert conninfo_to_dict(destination.conninfo) == {
        "host": "replica",
        "dbname": "shop",
        "keepalives": "1",
        "keepalives_idle": "5",
        "keepalives_interval": "10",
        "keepalives_count": "6",
    }


CUSTOM = {"kind": "custom", "class": "my_pkg.dest.SqliteDestination", "name": "sqlite", "path": "/data/x.db"}


def test_a_custom_destination_round_trips_with_its_options() -> None:
    config = PipelineConfig.from_mapping({**MINIMAL, "destinations": [CUSTOM, "lake"]})
    custom = config.destinations[0]
    assert custom == CustomDestinationConfig(
        "my_pkg.dest.SqliteDestination", "sqlite", {"path": "/data/x.db"}
    )
    assert custom.to_mapping() == CUSTOM
    assert PipelineConfig.from_mapping(config.to_mapping()) == config
    assert [d.name for d in config.destinations] == ["sqlite", "lake"]


@pytest.mark.parametrize(
    ("entry", "path", "message"),
    [
        ({"kind": "custom", "name": "x"}, "destinations[0].class", "missing (required)"),
        ({"kind": "custom", "class": "a.B"}, "destinations[0].name", "missing (required)"),
        ({**CUSTOM, "class": "a..B"}, "destinations[0].class", "must be the dotted path of a Destination"),
        ({**CUSTOM, "class": "B"}, "destinations[0].class", "must be the dotted path of a Destination"),
        ({**CUSTOM, "name": ""}, "destinations[0].name", "custom destination name '' is not allowed"),
        ({**CUSTOM, "class": 3}, "destinations[0].class", "must be "),
    ],
)
def test_a_custom_destination_needs_a_class_path_and_a_name(
    entry: dict[str, object], path: str, message: str
) -> None:
    with pytest.raises(PipelineConfigError) as caught:
        PipelineConfig.from_mapping({**MINIMAL, "destinations": [entry]})
    assert message in problem(caught.value, path)


def test_two_custom_destinations_need_their_own_names() -> None:
    with pytest.raises(PipelineConfigError, match="destination name 'sqlite' is taken by destinations"):
        PipelineConfig.from_mapping({**MINIMAL, "destinations": [CUSTOM, {**CUSTOM, "path": "/y"}]})
