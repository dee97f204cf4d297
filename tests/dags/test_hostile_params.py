"""Hostile values in the trigger forms of the baseline and teardown DAGs (``tables``,
``destinations``, ``mode``, ``confirm``, the teardown's ``tables`` and ``drop_tables``): each is
refused by the form's schema and by the first task's check, with an error naming the param,
short whatever the value's size, with control and bidi characters escaped; a table whose real
name is hostile is chosen exactly. The checks run no SQL and no shell, so these tests need no
server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import ParamValidationError

from airflow_provider_pgsync.dags import build_dags
from airflow_provider_pgsync.dags.params import check_confirmation, chosen_tables, teardown_tables
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pipeline import PipelineConfig
from airflow_provider_pgsync.source.names import TableRef

CANARY = Path("/tmp/pwn_hostile_params")  # must never appear
HOSTILE = [
    "'; DROP TABLE x; --",
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"x | touch {CANARY} && echo",
    "'\"`",
    "\u202epublic.orders",  # right-to-left override
    "public.orders\u0301",  # combining acute accent
    "public.😀",
    "public.\u043erders",  # Cyrillic o
    "public.orders\x00",
    "../../etc/passwd",
    "x" * 100_000,
    "",
]
ODD = TableRef("Sales", "Robert'); DROP TABLE x;--")
CONFIG = PipelineConfig.from_mapping(
    {
        "name": "shop",
        "source_conn_id": "shop_db",
        "tables": ["orders", str(ODD)],
        "destinations": [{"kind": "lake"}, {"kind": "postgres", "conn_id": "replica_db", "name": "replica"}],
    }
)
DAGS = build_dags(CONFIG)
ORDERS = {"tables": ["orders"], "mode": "rebaseline"}


def _refused(call: Any, param: str) -> str:
    with pytest.raises(ConfigError) as excinfo:
        call()
    message = str(excinfo.value)
    assert f"param '{param}'" in message
    assert len(message) < 1000, f"the message echoes the whole value ({len(message)} characters)"
    assert not any(c in message for c in "\x00\u202e"), "control or bidi characters are shown raw"
    return message


@pytest.fixture(autouse=True)
def _no_canary() -> Any:
    CANARY.unlink(missing_ok=True)
    yield
    assert not CANARY.exists(), "a param value ran as a shell command"


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_table_is_refused_naming_the_param(value: str) -> None:
    message = _refused(
        lambda: chosen_tables(CONFIG, {"tables": ["orders", value], "mode": "rebaseline"}), "tables"
    )
    assert 'its tables: public.orders, "Sales"' in message
    with pytest.raises(ParamValidationError):
        DAGS["pgsync_shop_baseline"].params.get_param("tables").resolve([value])


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_destination_is_refused_naming_the_param(value: str) -> None:
    message = _refused(lambda: chosen_tables(CONFIG, {**ORDERS, "destinations": [value]}), "destinations")
    assert "its destinations: lake, replica" in message
    with pytest.raises(ParamValidationError):
        DAGS["pgsync_shop_baseline"].params.get_param("destinations").resolve([value])


@pytest.mark.parametrize("value", [*HOSTILE, "Rebaseline", "rebaseline ", ["rebaseline"], {"a": 1}, 1])
def test_a_hostile_mode_is_refused_naming_the_param(value: Any) -> None:
    _refused(lambda: chosen_tables(CONFIG, {"mode": value}), "mode")
    with pytest.raises(ParamValidationError):
        DAGS["pgsync_shop_baseline"].params.get_param("mode").resolve(value)


@pytest.mark.parametrize("value", [*HOSTILE, "shop\x00", "\u0455hop", "shop\u200b", "SHOP", ["shop"], None])
def test_a_hostile_confirmation_is_refused_and_drops_nothing(value: Any) -> None:
    message = _refused(lambda: check_confirmation(CONFIG, {"confirm": value}), "confirm")
    assert "nothing was dropped" in message


@pytest.mark.parametrize("value", [[1], [None], [["orders"]], [{"table": "orders"}], "orders", {}, 7])
def test_tables_and_destinations_of_other_types_are_refused(value: Any) -> None:
    _refused(lambda: chosen_tables(CONFIG, {"tables": value, "mode": "backfill"}), "tables")
    _refused(lambda: chosen_tables(CONFIG, {**ORDERS, "destinations": value}), "destinations")


def test_a_table_whose_real_name_is_hostile_is_chosen_exactly() -> None:
    # its name as the form lists it, and spelled otherwise the way PostgreSQL reads names
    for spelling in (str(ODD), ' "Sales" . "Robert\'); DROP TABLE x;--" '):
        [chosen] = chosen_tables(CONFIG, {"tables": [spelling], "mode": "rebaseline"})["rebaseline"]
        assert TableRef.parse(chosen["table"]) == ODD
    # folded to lower case, sales is another schema
    wrong = {"tables": ['sales."Robert\'); DROP TABLE x;--"'], "mode": "rebaseline"}
    _refused(lambda: chosen_tables(CONFIG, wrong), "tables")
    odd = {"tables": [str(ODD)], "destinations": ["replica"], "mode": "rebaseline"}
    [chosen] = chosen_tables(CONFIG, odd)["rebaseline"]
    assert chosen["destinations"] == [CONFIG.destinations[1].to_mapping()]
    assert DAGS["pgsync_shop_baseline"].params.get_param("tables").resolve([str(ODD)]) == [str(ODD)]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_table_to_tear_down_is_refused_naming_the_param(value: str) -> None:
    message = _refused(lambda: teardown_tables(CONFIG, {"tables": ["public.gone", value]}), "tables")
    assert "nothing was dropped" in message
    if len(value) > 300 or not value:
        with pytest.raises(ParamValidationError):
            DAGS["pgsync_shop_teardown"].params.get_param("tables").resolve([value])


@pytest.mark.parametrize("value", [[1], [None], [["gone"]], [{"table": "gone"}], "gone", {"a": 1}, 7])
def test_tables_to_tear_down_of_other_types_are_refused(value: Any) -> None:
    _refused(lambda: teardown_tables(CONFIG, {"tables": value}), "tables")


@pytest.mark.parametrize("value", ["true", 1, "yes", [True], {"a": 1}])
def test_drop_tables_must_be_a_boolean(value: Any) -> None:
    params = {"tables": ["public.gone"], "drop_tables": value}
    _refused(lambda: teardown_tables(CONFIG, params), "drop_tables")
    with pytest.raises(ParamValidationError):
        DAGS["pgsync_shop_teardown"].params.get_param("drop_tables").resolve(value)


def test_a_table_still_in_the_config_is_not_torn_down_whatever_its_spelling() -> None:
    for spelling in ("orders", "public.orders", ' "public" . "orders" ', str(ODD)):
        message = _refused(lambda: teardown_tables(CONFIG, {"tables": [spelling]}), "tables")  # noqa: B023
        assert "still in pipeline 'shop'" in message and "nothing was dropped" in message
    # no tables: the whole pipeline, which keeps the destinations' tables
    assert teardown_tables(CONFIG, {}) == ([], False)
    _refused(lambda: teardown_tables(CONFIG, {"drop_tables": True}), "drop_tables")
    assert teardown_tables(CONFIG, {"tables": ["gone", "public.gone"], "drop_tables": True}) == (
        ["public.gone"],
        True,
    )
