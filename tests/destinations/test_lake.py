"""The lake destination's configuration, naming and Spark settings (pure logic)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from airflow_provider_pgsync.destinations.lake import (
    METASTORES,
    LakeDestination,
    catalog_name,
    default_warehouse,
)
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import TableRef

# ---- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize("database", ["", "Sales", "1lake", "my-lake", "my lake", "lake.db", "lakë"])
def test_bad_database_name(database: str) -> None:
    with pytest.raises(ConfigError, match="lower-case name") as info:
        LakeDestination("/srv/lake", database=database)
    assert repr(database) in str(info.value)


@pytest.mark.parametrize("database", ["pgsync", "_x", "lake_2"])
def test_good_database_name(database: str) -> None:
    assert LakeDestination("/srv/lake", database=database).database == database


def test_unknown_metastore() -> None:
    with pytest.raises(ConfigError) as info:
        LakeDestination("/srv/lake", metastore="glue")
    message = str(info.value)
    assert "'glue'" in message
    assert all(m in message for m in METASTORES)


@pytest.mark.parametrize("warehouse", ["s3://bucket/lake", "s3a://bucket/lake", "hdfs://nn:8020/lake"])
def test_derby_needs_a_local_warehouse(warehouse: str) -> None:
    with pytest.raises(ConfigError) as info:
        LakeDestination(warehouse)
    message = str(info.value)
    assert warehouse in message
    assert "metastore='postgres'" in message and "'external'" in message
    assert "Derby" in message


def test_external_metastore_accepts_a_uri() -> None:
    lake = LakeDestination("s3a://bucket/lake", metastore="external")
    assert lake.local_path is None
    assert lake.spark_conf() == {"spark.sql.catalogImplementation": "hive"}
    assert lake.table_dir(TableRef("public", "orders")) == "s3a://bucket/lake/pgsync/public__orders"


def test_external_metastore_accepts_a_local_warehouse() -> None:
    lake = LakeDestination("/srv/lake", metastore="external")
    assert lake.spark_conf() == {"spark.sql.catalogImplementation": "hive"}


# ---- warehouse paths --------------------------------------------------------------------------


def test_relative_warehouse_becomes_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lake = LakeDestination.from_config({"warehouse": "data/lake"})
    assert lake.warehouse == str((tmp_path / "data" / "lake").resolve())
    assert Path(lake.warehouse).is_absolute()
    assert lake.local_path == lake.warehouse


def test_absolute_warehouse_and_uris_are_kept() -> None:
    assert LakeDestination.from_config({"warehouse": "/srv/lake"}).warehouse == "/srv/lake"
    lake = LakeDestination.from_config({"warehouse": "s3://b/lake", "metastore": "external"})
    assert lake.warehouse == "s3://b/lake"


def test_file_uri_is_a_local_warehouse() -> None:
    lake = LakeDestination.from_config({"warehouse": "file:///srv/lake"})
    assert lake.warehouse == "file:///srv/lake"
    assert lake.local_path == "/srv/lake"
    conf = lake.spark_conf()
    assert conf["spark.sql.warehouse.dir"] == "/srv/lake/warehouse"
    assert conf["spark.hadoop.javax.jdo.option.ConnectionURL"] == (
        "jdbc:derby:;databaseName=/srv/lake/metastore_db;create=true"
    )
    assert lake.table_dir(TableRef("public", "t")) == "file:///srv/lake/pgsync/public__t"


def test_from_config_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PGSYNC_LAKE", str(tmp_path / "lake"))
    lake = LakeDestination.from_config({"kind": "lake"})
    assert lake == LakeDestination(str(tmp_path / "lake"))
    assert (lake.database, lake.metastore, lake.kind) == ("pgsync", "derby", "lake")
    assert LakeDestination.from_config() == lake
    assert LakeDestination.from_config(None) == lake


def test_config_round_trip() -> None:
    lake = LakeDestination("s3://bucket/lake", database="analytics", metastore="external")
    config = lake.to_config()
    assert config == {
        "warehouse": "s3://bucket/lake",
        "database": "analytics",
        "metastore": "external",
        "kind": "lake",
    }
    assert LakeDestination.from_config(config) == lake


def test_home_in_warehouse_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    lake = LakeDestination.from_config({"warehouse": "~/lake"})
    assert lake.warehouse == str((tmp_path / "lake").resolve())
    assert lake.local_path == lake.warehouse
    assert lake.spark_conf()["spark.sql.warehouse.dir"] == f"{lake.warehouse}/warehouse"


def test_hadoop_file_path_is_a_local_warehouse(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    lake = LakeDestination.from_config({"warehouse": f"file:{root}/lake"})
    assert lake.warehouse == f"{root}/lake"
    assert lake.local_path == f"{root}/lake"
    assert lake.spark_conf()["spark.hadoop.javax.jdo.option.ConnectionURL"] == (
        f"jdbc:derby:;databaseName={root}/lake/metastore_db;create=true"
    )
    assert lake.table_dir(TableRef("public", "t")) == f"{root}/lake/pgsync/public__t"


@pytest.mark.parametrize(
    ("config", "unknown"),
    [
        ({"warehouse": "/srv/lake", "datbase": "x"}, "datbase"),
        ({"warehouse_dir": "/srv/lake", "metastore": "derby", "path": "/x"}, "path, warehouse_dir"),
        ({"kind": "lake", "Database": "x"}, "Database"),
    ],
)
def test_from_config_rejects_unknown_options(config: dict[str, str], unknown: str) -> None:
    with pytest.raises(ConfigError) as info:
        LakeDestination.from_config(config)
    message = str(info.value)
    assert f"option(s) {unknown} unknown" in message
    assert "use warehouse, database, metastore" in message


def test_from_config_does_not_modify_its_argument(tmp_path: Path) -> None:
    config = {"kind": "lake", "warehouse": str(tmp_path)}
    LakeDestination.from_config(config)
    assert config == {"kind": "lake", "warehouse": str(tmp_path)}


# ---- naming -----------------------------------------------------------------------------------


def hashed(folded: str, schema: str, name: str) -> str:
    """The documented name of a table whose parts are not both simple."""
    exact = f"{schema}\0{name}".encode()
    return f"{folded}_{hashlib.sha256(exact).hexdigest()[:8]}"


@pytest.mark.parametrize(
    ("schema", "name"),
    [("public", "orders"), ("s1", "order_items_2"), ("a", "b"), ("sales", "v2_x9")],
)
def test_catalog_name_of_simple_parts(schema: str, name: str) -> None:
    assert catalog_name(TableRef(schema, name)) == f"{schema}__{name}"


@pytest.mark.parametrize(
    ("schema", "name", "folded"),
    [
        ("public", "Orders", "public_orders"),
        ("Sales Data", "Odd-Name", "sales_data_odd_name"),
        ("sales", 'Odd "Name"; DROP TABLE x;--', "sales_odd_name_drop_table_x"),
        ("s", "café.v2", "s_caf_v2"),
        ("1st", "$x", "1st_x"),
        ("public", "1orders", "public_1orders"),  # a simple part starts with a letter
        ("a_", "b", "a_b"),  # no trailing _
        ("a", "_b", "a_b"),  # no leading _
        ("a", "b__c", "a_b_c"),  # no double _
        ("_", "_", "t"),  # nothing left after folding
        ("é", "ü", "t"),
    ],
)
def test_catalog_name_of_other_parts(schema: str, name: str, folded: str) -> None:
    got = catalog_name(TableRef(schema, name))
    assert got == hashed(folded, schema, name)
    assert all(c.isascii() and (c.isalnum() or c == "_") for c in got)
    assert got == got.lower()


def test_catalog_name_exact_strings() -> None:
    assert catalog_name(TableRef("public", "orders")) == "public__orders"
    assert catalog_name(TableRef("public", "Orders")) == "public_orders_eff3f5f2"
    assert catalog_name(TableRef("a_", "b")) == "a_b_a00766a3"
    assert catalog_name(TableRef("a", "_b")) == "a_b_ee647d3b"


PARTS = st.text(alphabet="abAB_ -1", min_size=1, max_size=4)


@given(st.lists(st.tuples(PARTS, PARTS), unique=True, max_size=20))
@example([("a_", "b"), ("a", "_b"), ("a", "b"), ("a", "B")])
@example([("public", "Orders"), ("public", "orders"), ("Public", "orders")])
@example(
    [
        ("a-", "b"),
        ("a ", "b"),
        ("a", "-b"),
        ("a", "b "),
        ("a__", "b"),
        ("a", "__b"),
        ("a_b", "c"),
        ("a", "b_c"),
    ]
)
def test_catalog_names_never_collide(pairs: list[tuple[str, str]]) -> None:
    names = [catalog_name(TableRef(schema, name)) for schema, name in pairs]
    assert len(set(names)) == len(pairs)
    assert all(re.fullmatch(r"[a-z0-9_]+", n) for n in names)


def test_base_table_and_table_dir() -> None:
    table = TableRef("Sales Data", "Odd-Name")
    lake = LakeDestination("/srv/lake/")
    assert lake.base_table(table) == "pgsync.sales_data_odd_name_6a3c60cb__base"
    assert lake.table_dir(table) == "/srv/lake/pgsync/sales_data_odd_name_6a3c60cb"
    other = LakeDestination("/srv/lake", database="analytics")
    assert other.base_table(table) == "analytics.sales_data_odd_name_6a3c60cb__base"
    assert other.table_dir(table) == "/srv/lake/analytics/sales_data_odd_name_6a3c60cb"
    simple = TableRef("public", "orders")
    assert lake.base_table(simple) == "pgsync.public__orders__base"
    assert lake.table_dir(simple) == "/srv/lake/pgsync/public__orders"


def test_spark_conf_for_derby() -> None:
    lake = LakeDestination("/srv/lake")
    assert lake.spark_conf() == {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": "/srv/lake/warehouse",
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            "jdbc:derby:;databaseName=/srv/lake/metastore_db;create=true"
        ),
    }


# ---- default_warehouse ------------------------------------------------------------------------


def test_default_warehouse_prefers_pgsync_lake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGSYNC_LAKE", "/data/lake")
    monkeypatch.setenv("AIRFLOW_HOME", "/opt/airflow")
    assert default_warehouse() == "/data/lake"


def test_default_warehouse_under_airflow_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGSYNC_LAKE", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", "/opt/airflow")
    assert default_warehouse() == "/opt/airflow/pgsync/lake"


@pytest.mark.parametrize("airflow_home", [None, ""])
def test_default_warehouse_without_airflow_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, airflow_home: str | None
) -> None:
    monkeypatch.setenv("PGSYNC_LAKE", "")  # empty counts as unset
    if airflow_home is None:
        monkeypatch.delenv("AIRFLOW_HOME", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW_HOME", airflow_home)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_warehouse() == str(tmp_path / "airflow" / "pgsync" / "lake")


@pytest.mark.parametrize(
    "table",
    [
        TableRef("..", ".."),
        TableRef("../../etc", "passwd"),
        TableRef("/", "\\"),
        TableRef("a/../b", "$(touch x)"),
        TableRef("x" * 63, "y" * 63),
        TableRef("é" * 31, "😀" * 15),
        TableRef("Ü" * 31 + "z", "z" * 63),
    ],
)
def test_catalog_names_stay_one_folder_in_the_lake_and_fit_the_metastore(table: TableRef) -> None:
    """A catalog name is one folder name under the lake's database folder (no separator, no
    ``..``), and the longest (its changes tables add 36 characters) fits Hive's 256 characters."""
    name = catalog_name(table)
    assert name.isascii() and all(c.isalnum() or c == "_" for c in name) and name.strip("_") == name
    assert len(name) + len("__changes_v20261124T102654Z-823fc1d2") <= 256
    lake = LakeDestination.from_config({"warehouse": "/data/lake"})
    assert lake.table_dir(table) == f"/data/lake/pgsync/{name}"


def test_spark_conf_for_a_postgres_metastore_has_no_password_and_no_auto_creation() -> None:
    lake = LakeDestination(
        "s3a://bucket/lake",
        metastore="postgres",
        metastore_conn_id="lake_catalog",
        metastore_url="jdbc:postgresql://db:5432/catalog",
        metastore_conninfo="host=db port=5432 dbname=catalog user=lake",
    )
    assert lake.spark_conf() == {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": "s3a://bucket/lake/warehouse",
        "spark.hadoop.datanucleus.schema.autoCreateAll": "false",
        "spark.hadoop.hive.metastore.schema.verification": "true",
        "spark.hadoop.javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:postgresql://db:5432/catalog",
    }
    assert LakeDestination.from_config(lake.to_config()) == lake


def test_a_postgres_metastore_needs_its_connection_and_only_it_takes_one() -> None:
    with pytest.raises(ConfigError, match="metastore 'postgres' needs metastore_conn_id"):
        LakeDestination("/srv/lake", metastore="postgres")
    with pytest.raises(ConfigError, match="metastore_conn_id is for metastore 'postgres', not 'derby'"):
        LakeDestination("/srv/lake", metastore_conn_id="catalog")
    # a lake without one keeps its config as before (no empty metastore options)
    assert LakeDestination("/srv/lake").to_config() == {
        "warehouse": "/srv/lake",
        "database": "pgsync",
        "metastore": "derby",
        "kind": "lake",
    }
