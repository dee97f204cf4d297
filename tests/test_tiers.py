"""The suite's tiers (tests/tiers.py): marks come from fixtures, and the fast tier refuses a
test that starts a Spark driver without saying so."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import tiers


@dataclass
class _Item:
    """The parts of a pytest item the tiers use."""

    nodeid: str
    fixturenames: list[str]
    marks: list[str] = field(default_factory=list)

    def add_marker(self, marker: Any) -> None:
        self.marks.append(marker.name)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None

    def iter_markers(self) -> list[Any]:
        return [getattr(pytest.mark, m) for m in self.marks]


def test_marks_come_from_the_fixtures_a_test_uses() -> None:
    items = [
        _Item("a", ["database"]),
        _Item("b", ["lake", "empty_metastore", "spark_drivers", "airflow_db", "run_dag"]),
        _Item("c", ["scheduled", "airflow_deployment", "spark_drivers"]),
    ]
    tiers.mark(items)  # type: ignore[arg-type]
    assert [i.marks for i in items] == [[], ["spark", "dag"], ["spark", "deployment"]]


def test_the_fast_tier_fails_a_test_that_starts_a_driver_unmarked(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = [Path("jvm-1-x.log")]
    unmarked, marked = _Item("t::u", ["database"]), _Item("t::m", ["spark_drivers"], ["spark"])
    monkeypatch.setenv(tiers.TIER_VARIABLE, tiers.FAST)
    with pytest.raises(pytest.fail.Exception, match=r"t::u started 1 Spark driver.*spark_drivers"):
        tiers.check_no_driver(unmarked, driver)  # type: ignore[arg-type]
    tiers.check_no_driver(marked, driver)  # type: ignore[arg-type]
    tiers.check_no_driver(unmarked, [])  # type: ignore[arg-type]
    monkeypatch.delenv(tiers.TIER_VARIABLE)
    tiers.check_no_driver(unmarked, driver)  # type: ignore[arg-type]  (the whole suite: no check)


def test_the_slowest_tiers_files_go_first_and_each_file_keeps_its_order() -> None:
    items = [
        _Item("a.py::1", []),
        _Item("b.py::1", [], ["dag"]),
        _Item("c.py::1", []),
        _Item("c.py::2", [], ["spark", "dag"]),  # the file ranks by its slowest test
        _Item("d.py::1", [], ["deployment"]),
        _Item("e.py::1", [], ["spark"]),
    ]
    tiers.order(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["d.py::1", "c.py::1", "c.py::2", "e.py::1", "b.py::1", "a.py::1"]
