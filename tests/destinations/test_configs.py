"""Destination configs of kind ``custom``: the class a dotted path names, built from the
config, refused with the remedy when the path, the class or the name is wrong."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_pgsync.apply.destination import Destination, SchemaAnswer
from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.destinations.configs import destination_kind, destination_name, open_destination
from airflow_provider_pgsync.errors import ConfigError, DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

HERE = __name__


class Memory(Destination):
    """A destination that keeps nothing, built from its options."""

    def __init__(self, name: str, size: int = 1) -> None:
        self.name = name
        self.size = size

    def open_table(self, table: TableRef, columns: Sequence[ColumnInfo], schema_version: int) -> None:
        return None

    def apply(
        self, table: TableRef, columns: Sequence[ColumnInfo], changes: pa.RecordBatch, upto: Key
    ) -> None:
        return None

    def watermark(self, table: TableRef) -> Key | None:
        return None

    def schema_changed(
        self, table: TableRef, old: Sequence[ColumnInfo], new: Sequence[ColumnInfo]
    ) -> SchemaAnswer:
        return SchemaAnswer.CONTINUE


class FromConfig(Memory):
    """Built by its from_config, which gets the whole config."""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> FromConfig:
        return cls(config["name"], size=len(config))


class NotADestination:
    def __init__(self, name: str) -> None:
        self.name = name


def custom(cls: str, **options: Any) -> dict[str, Any]:
    return {"kind": "custom", "class": cls, **options}


def test_a_custom_config_builds_its_class_from_the_options() -> None:
    config = custom(f"{HERE}.Memory", name="mem", size=3)
    assert destination_kind(config) == "custom" and destination_name(config) == "mem"
    destination = open_destination(config)
    assert isinstance(destination, Memory) and (destination.name, destination.size) == ("mem", 3)


def test_a_custom_class_with_from_config_gets_the_whole_config() -> None:
    destination = open_destination(custom(f"{HERE}.FromConfig", name="fc", extra=1))
    assert isinstance(destination, FromConfig) and destination.size == 4


def test_a_destination_without_load_baseline_refuses_a_baseline_by_default() -> None:
    destination = open_destination(custom(f"{HERE}.Memory", name="mem"))
    assert destination.lineage(TableRef("public", "t")) is None
    with pytest.raises(DestinationError, match=r"destination mem cannot take a baseline of public\.t"):
        destination.load_baseline(TableRef("public", "t"), [], iter(()), "v1")


def test_a_class_that_is_no_destination_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"NotADestination is not a subclass of .*Destination; point 'class'"
    ):
        open_destination(custom(f"{HERE}.NotADestination", name="x"))
    with pytest.raises(ConfigError, match="not a subclass"):
        open_destination(custom(f"{HERE}.HERE", name="x"))  # not even a class


@pytest.mark.parametrize(
    "path", ["Memory", "os; import this", "a..b", ".a.b", "a.b.", "a.b-c", "", None, 3, "a.b c"]
)
def test_a_class_path_that_is_no_dotted_identifier_path_is_refused(path: object) -> None:
    with pytest.raises(ConfigError, match="'class' must be the dotted path of a Destination subclass"):
        open_destination(custom(path, name="x"))  # type: ignore[arg-type]


def test_a_module_that_cannot_be_imported_is_named() -> None:
    with pytest.raises(ConfigError, match=r"cannot import module 'no_such_pkg\.mod'.*install the package"):
        open_destination(custom("no_such_pkg.mod.Cls", name="x"))


def test_a_custom_config_needs_a_name() -> None:
    for config in (custom(f"{HERE}.Memory"), custom(f"{HERE}.Memory", name="")):
        with pytest.raises(ConfigError, match="needs a 'name'"):
            destination_name(config)
        with pytest.raises(ConfigError, match="needs a 'name'"):
            open_destination(config)


@pytest.mark.parametrize(
    "name", ["../x", "a/b", "'; DROP TABLE x; --", "$(id)", "r\u202e", "r\x00", "é", "-r", "r" * 64]
)
def test_a_destination_name_outside_the_rule_is_refused_before_anything_opens(name: object) -> None:
    """Operators built without a pipeline config meet the same rule as the config's names."""
    for config in ({"kind": "postgres", "conn_id": "r", "name": name}, custom(f"{HERE}.Memory", name=name)):
        with pytest.raises(ConfigError, match=r"destination name .* is not allowed: use 1-63 ASCII"):
            destination_name(config)
    with pytest.raises(ConfigError, match=r"custom destination name .* is not allowed"):
        open_destination(custom(f"{HERE}.Memory", name=name))


def test_options_the_class_does_not_take_are_refused() -> None:
    with pytest.raises(ConfigError, match="does not take these options"):
        open_destination(custom(f"{HERE}.Memory", name="x", colour="red"))


def test_an_unknown_kind_names_the_kinds() -> None:
    with pytest.raises(ConfigError, match="use 'lake', 'postgres' or 'custom'"):
        destination_kind({"kind": "kafka"})
