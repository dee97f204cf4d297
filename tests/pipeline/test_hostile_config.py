"""Hostile pipeline config files and values: YAML tags that build Python objects, alias bombs,
duplicate keys, NUL characters, 100 kB values, and SQL or shell text, quotes and look-alike
Unicode in every name. Each is refused with its key path and a message of bounded size, or read
exactly; nothing runs (the canary file never appears)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_pgsync.dags import build_dags
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pipeline import (
    PipelineConfig,
    PipelineConfigError,
    load_pipelines,
    parse_pipelines,
)
from airflow_provider_pgsync.pipeline.reading import MAX_YAML_VALUES
from airflow_provider_pgsync.source.names import TableRef
from tests.pipeline.helpers import MINIMAL, problem, write

CANARY = Path("/tmp/pwn_hostile_config")  # must never appear
BIG = "x" * 100_000
SHELL_AND_SQL = [
    "'; DROP TABLE x; --",
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"a | touch {CANARY} && b",
    "a'b",
    'a"b',
    "a`b",
    "../../etc",
    "a/b",
    "shop\u202e",  # right-to-left override
    "shop\u0301",  # combining accent
    "shop😀",
    "\u0455hop",  # Cyrillic s
    "shop\n",
    " shop",
    "",
    BIG,
]


@pytest.fixture(autouse=True)
def _no_canary() -> Any:
    CANARY.unlink(missing_ok=True)
    yield
    assert not CANARY.exists(), "a config value ran as a shell command"


def _refused(data: Any, path: str) -> str:
    with pytest.raises(PipelineConfigError) as raised:
        parse_pipelines(data)
    message = problem(raised.value, path)
    assert len(str(raised.value)) < 2000, "the error echoes a huge value in full"
    return message


# ---- the YAML loader -------------------------------------------------------------------------

TAGS = [
    f"!!python/object/apply:os.system ['touch {CANARY}']",
    f"!!python/object/new:subprocess.Popen [['touch', '{CANARY}']]",
    "!!python/name:os.system",
    "!!python/module:os",
    "!!binary aGVsbG8=",
    "!!set {a: null}",
]


@pytest.mark.parametrize("tag", TAGS)
def test_yaml_tags_are_plain_data_or_refused(tmp_path: Path, tag: str) -> None:
    file = write(tmp_path, f"name: {tag}\nsource_conn_id: db\ntables: [a]\n")
    with pytest.raises(ConfigError, match=r"pgsync\.yaml (is not valid YAML: line 1|has 1 problem)"):
        load_pipelines(file)


def test_a_billion_laughs_is_refused_quickly_naming_the_line(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    file = write(tmp_path, "\n".join([*lines, "name: shop", "source_conn_id: db", "tables: *a8", ""]))
    started = time.monotonic()
    with pytest.raises(ConfigError, match=rf"line \d+, column \d+: .*more than {MAX_YAML_VALUES} values"):
        load_pipelines(file)
    assert time.monotonic() - started < 5


def test_a_recursive_anchor_and_deep_nesting_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"line 3, column \d+: an alias refers to a list or mapping"):
        load_pipelines(write(tmp_path, "name: shop\nsource_conn_id: db\ntables: &t [a, *t]\n"))
    deep = "name: shop\nsource_conn_id: db\ntables: " + "[" * 20_000 + "]" * 20_000 + "\n"
    with pytest.raises(ConfigError, match=r"pgsync\.yaml is nested too deeply"):
        load_pipelines(write(tmp_path, deep))


def test_anchors_and_merge_keys_of_an_ordinary_file_work(tmp_path: Path) -> None:
    first = {"name": "shop", "source_conn_id": "shop_db", "tables": ["orders"]}
    text = f"pipelines:\n  - &shop {yaml.safe_dump(first, default_flow_style=True)}"
    text += "  - {<<: *shop, name: crm, slot_name: crm_slot, publication_name: crm_pub,"
    text += " changelog: {uri: /data/crm}}\n"
    shop, crm = load_pipelines(write(tmp_path, text))
    assert (shop.name, crm.name, crm.source_conn_id, crm.table_keys) == (
        "shop",
        "crm",
        "shop_db",
        ("public.orders",),
    )


def test_a_key_given_twice_is_refused_in_any_mapping(tmp_path: Path) -> None:
    text = "name: shop\nsource_conn_id: db\ntables: [a]\nstate: {backend: postgres, backend: variables}\n"
    with pytest.raises(ConfigError, match=r"line 4, column \d+: found the key 'backend' twice"):
        load_pipelines(write(tmp_path, text))


def test_a_raw_nul_byte_is_refused_by_position(tmp_path: Path) -> None:
    file = tmp_path / "pgsync.yaml"
    file.write_bytes(b"name: shop\x00\nsource_conn_id: db\ntables: [a]\n")
    with pytest.raises(ConfigError, match=r"pgsync\.yaml is not valid YAML: .*#x0000"):
        load_pipelines(file)


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({"name": "shop\0"}, "name"),
        ({"tables": ["orders", "a\0b"]}, "tables[1]"),
        ({"tables": [{"table": "a", "columns": ["id", "n\0"]}]}, "tables[0].columns[1]"),
        ({"tables": [{"table": "a", "row_filter": "id > 0\0"}]}, "tables[0].row_filter"),
        ({"spark": {"conf": {"spark.x": "1\0"}}}, "spark.conf.spark.x"),
        ({"spark": {"submit_options": {"driver_memory": "1g\0"}}}, "spark.submit_options.driver_memory"),
        (
            {"destinations": [{"kind": "custom", "class": "a.B", "name": "c", "path": "/x\0"}]},
            "destinations[0].path",
        ),
        ({"changelog": {"uri": "/data/\0"}}, "changelog.uri"),
    ],
)
def test_a_nul_character_anywhere_is_refused_naming_its_key_path(extra: dict[str, Any], path: str) -> None:
    assert "contains a NUL character" in _refused({**MINIMAL, **extra}, path)


# ---- very long values --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({"name": BIG}, "name"),
        ({"source_conn_id": BIG}, "source_conn_id"),
        ({"slot_name": BIG}, "slot_name"),
        ({"tables": [BIG]}, "tables[0]"),
        ({"tables": [{"table": "a", "columns": [BIG]}]}, "tables[0].columns[0]"),
        ({"destinations": [{"kind": "lake", "database": BIG}]}, "destinations[0].database"),
        ({"destinations": [{"kind": "lake", "warehouse": "/" + BIG}]}, "destinations[0].warehouse"),
        ({"destinations": [{"kind": BIG}]}, "destinations[0].kind"),
        ({"destinations": [{"kind": "postgres", "conn_id": "r", "name": BIG}]}, "destinations[0].name"),
        ({"destinations": [{"kind": "custom", "class": BIG, "name": "c"}]}, "destinations[0].class"),
        ({"state": {"schema": BIG}}, "state.schema"),
        ({"changelog": {"uri": "/" + BIG}}, "changelog.uri"),
        ({"changelog": {"retention": BIG}}, "changelog.retention"),
        ({"schedules": {"cdc": BIG}}, "schedules.cdc"),
        ({BIG: 1}, BIG),
    ],
)
def test_a_100_kb_value_is_refused_with_a_short_message(extra: dict[str, Any], path: str) -> None:
    _refused({**MINIMAL, **extra}, path)


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        ("limits: {max_changes: 99999999999999999999}", "limits.max_changes", "up to 2147483647"),
        ("limits: {batch_bytes: 99999999999999999999}", "limits.batch_bytes", "up to 9223372036854775807"),
        ("baseline: {fetch_size: 2147483648}", "baseline.fetch_size", "up to 2147483647"),
        ("baseline: {target_partition_mb: .inf}", "baseline.target_partition_mb", "not inf"),
        ("baseline: {target_partition_mb: .nan}", "baseline.target_partition_mb", "not nan"),
        ("changelog: {retention: 99999999999999999999d}", "changelog.retention", "too long a duration"),
        ("limits: {batch_rows: true}", "limits.batch_rows", "not the boolean True"),
        (
            "destinations: [{kind: postgres, conn_id: 2024-01-01}]",
            "destinations[0].conn_id",
            "must be a string",
        ),
    ],
)
def test_numbers_and_other_types_out_of_range_are_refused(
    tmp_path: Path, text: str, path: str, fragment: str
) -> None:
    with pytest.raises(PipelineConfigError) as raised:
        load_pipelines(write(tmp_path, f"name: shop\nsource_conn_id: db\ntables: [a]\n{text}\n"))
    assert fragment in problem(raised.value, path)


def test_long_values_that_are_valid_are_kept_exactly() -> None:
    long_filter = " OR ".join(f"id = {i}" for i in range(10_000))
    config = PipelineConfig.from_mapping(
        {
            **MINIMAL,
            "tables": [{"table": "orders", "row_filter": long_filter}],
            "spark": {"conf": {"spark.x": BIG}},
            "destinations": [{"kind": "custom", "class": "a.B", "name": "c", "note": BIG}],
        }
    )
    assert config.table("orders").row_filter == long_filter
    assert config.spark.conf["spark.x"] == BIG
    assert PipelineConfig.from_mapping(config.to_mapping()) == config


# ---- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*SHELL_AND_SQL, "a" * 57, "a-b", "a.b", "a b"])
def test_hostile_pipeline_names_are_refused_with_the_rule(name: str) -> None:
    assert "is not allowed: use 1-56 ASCII letters, digits or _" in _refused(
        {**MINIMAL, "name": name}, "name"
    )


def test_the_longest_pipeline_name_gives_valid_dag_ids_slot_and_publication() -> None:
    name = "Ab_9" * 14
    config = PipelineConfig.from_mapping({**MINIMAL, "name": name})
    assert config.slot_name == config.publication_name == f"pgsync_{name.lower()}"
    assert set(build_dags(config)) == {
        f"pgsync_{name}_{k}" for k in ("setup", "baseline", "cdc", "compact", "reconcile", "teardown")
    }


def test_pipeline_names_that_differ_only_in_case_are_refused() -> None:
    data = {"pipelines": [MINIMAL, {**MINIMAL, "name": "Shop", "source_conn_id": "other_db"}]}
    assert "'Shop' is used by pipelines[0] too; pipeline names must be unique, ignoring case" in _refused(
        data, "pipelines[1].name"
    )


@pytest.mark.parametrize("name", [*SHELL_AND_SQL, "a" * 64, "-replica"])
@pytest.mark.parametrize("kind", ["postgres", "custom"])
def test_hostile_destination_names_are_refused_with_the_rule(kind: str, name: str) -> None:
    entry = {"kind": kind, "name": name, **({"conn_id": "r"} if kind == "postgres" else {"class": "a.B"})}
    message = _refused({**MINIMAL, "destinations": [entry]}, "destinations[0].name")
    assert f"{kind} destination name" in message and "1-63 ASCII letters, digits, _ or -" in message


def test_destination_names_that_fit_the_rule_are_kept() -> None:
    destinations = [
        {"kind": "postgres", "conn_id": "r", "name": "replica-eu_1"},
        {"kind": "custom", "class": "a.B", "name": "R" * 63},
        {"kind": "lake", "database": "l" * 58},
    ]
    config = PipelineConfig.from_mapping({**MINIMAL, "destinations": destinations})
    assert [d.name for d in config.destinations] == ["replica-eu_1", "R" * 63, "lake_" + "l" * 58]
    assert "is not allowed: use 1-58 lower-case letters" in _refused(
        {**MINIMAL, "destinations": [{"kind": "lake", "database": "l" * 59}]}, "destinations[0].database"
    )


# Airflow's own rule for connection ids (letters of any script, digits, _ . -): a look-alike
# id is a valid id of another connection
@pytest.mark.parametrize(
    "conn_id", [c for c in SHELL_AND_SQL if c not in ("a/b", "../../etc", "\u0455hop")] + ["c" * 201]
)
def test_hostile_connection_ids_are_refused(conn_id: str) -> None:
    assert "must name an Airflow connection" in _refused(
        {**MINIMAL, "source_conn_id": conn_id}, "source_conn_id"
    )
    assert "must name an Airflow connection" in _refused(
        {**MINIMAL, "destinations": [{"kind": "postgres", "conn_id": conn_id}]}, "destinations[0].conn_id"
    )


HOSTILE_TABLES = [
    TableRef("public", "Robert'); DROP TABLE x;--"),
    TableRef("../../etc", "passwd"),
    TableRef("$(touch /tmp/pwn_hostile_config)", "`touch /tmp/pwn_hostile_config` | x && y"),
    TableRef("public", 'a""b\'c`d'),
    TableRef("public", "\u202eorders"),
    TableRef("public", "\u043erders"),  # Cyrillic o: another table than orders
    TableRef("public", "é" * 31 + "x"),  # 63 bytes
    TableRef("public", "😀" * 15 + "abc"),
]


def test_hostile_table_and_column_names_postgresql_accepts_are_read_exactly() -> None:
    tables = [{"table": str(t), "columns": ['a"b', "`c`", "d; --", "é" * 31]} for t in HOSTILE_TABLES]
    config = PipelineConfig.from_mapping({**MINIMAL, "tables": ["orders", *tables]})
    assert [TableRef.parse(t.key) for t in config.tables] == [TableRef("public", "orders"), *HOSTILE_TABLES]
    assert all(t.columns == ('a"b', "`c`", "d; --", "é" * 31) for t in config.tables[1:])
    assert PipelineConfig.from_mapping(config.to_mapping()) == config


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ('"' + "é" * 32 + '"', "is 64 bytes, longer than PostgreSQL's 63-byte identifier limit"),
        ('"a\0b"', "contains a NUL character"),
        ("orders; DROP TABLE x", "has unexpected ';'"),
        ("$(touch /tmp/pwn_hostile_config)", "is not a valid identifier"),
        ("public.orders.x", "has 3 dotted parts"),
        ('"unterminated', "unterminated quoted identifier"),
    ],
)
def test_table_names_postgresql_cannot_take_are_refused(table: str, fragment: str) -> None:
    assert fragment in _refused({**MINIMAL, "tables": ["orders", table]}, "tables[1]")


def test_column_names_postgresql_cannot_take_are_refused() -> None:
    data = {**MINIMAL, "tables": [{"table": "orders", "columns": ["id", "é" * 32, ""]}]}
    with pytest.raises(PipelineConfigError) as raised:
        parse_pipelines(data)
    assert "63-byte identifier limit" in problem(raised.value, "tables[0].columns[1]")
    assert "must be a column name" in problem(raised.value, "tables[0].columns[2]")
