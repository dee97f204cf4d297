"""The suite's tiers by resource, marked from the fixtures each test uses (test-only).

- ``spark``: the test starts Spark drivers. Its fixtures include ``spark_drivers`` (a fixture
  that does nothing but say so; the lake's ``empty_metastore`` and the fixtures and modules that
  start Spark depend on it or use it);
- ``dag``: it runs DAGs in-process (``airflow_db``, which ``run_dag`` and the pipeline builders
  need);
- ``deployment``: it runs against a real Airflow deployment (``airflow_deployment``).

The files of the slowest tiers run first (``order``). ``make test`` runs every tier;
``make test-fast`` (``PGSYNC_TEST_TIER=fast``) leaves out ``spark`` and ``deployment``. So that
the marks cannot drift, the fast tier fails a test that starts a Spark driver all the same
(``tests/spark_starts.py`` sees each one), naming the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TIER_VARIABLE = "PGSYNC_TEST_TIER"
FAST = "fast"
MARKS = {"spark": "spark_drivers", "dag": "airflow_db", "deployment": "airflow_deployment"}
"""Each tier's mark and the fixture whose use gives it."""
FAST_EXPRESSION = "not spark and not deployment"


def mark(items: list[pytest.Item]) -> None:
    """Give each test the marks of the fixtures it uses (directly or through other fixtures)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for tier, fixture in MARKS.items():
            if fixture in names:
                item.add_marker(getattr(pytest.mark, tier))


_RANK = {"deployment": 0, "spark": 1, "dag": 2}
"""Which files start first: the slowest tiers, so that the quick files fill the workers' ends."""


def order(items: list[pytest.Item]) -> None:
    """Sort ``items`` file by file, the files of the slowest tier first (a file ranks by its
    slowest test); files of one rank, and the tests of a file, keep their order. pytest-xdist
    hands out the files in this order with ``--no-loadscope-reorder``."""
    rank: dict[str, int] = {}
    for item in items:
        tier = min((_RANK[m.name] for m in item.iter_markers() if m.name in _RANK), default=len(_RANK))
        file = item.nodeid.split("::")[0]
        rank[file] = min(rank.get(file, tier), tier)
    first = {file: i for i, file in enumerate(dict.fromkeys(i.nodeid.split("::")[0] for i in items))}
    items.sort(key=lambda i: (rank[i.nodeid.split("::")[0]], first[i.nodeid.split("::")[0]]))


def fast_tier() -> bool:
    """Whether this run is ``make test-fast``'s."""
    return os.environ.get(TIER_VARIABLE, "") == FAST


def check_no_driver(item: pytest.Item, drivers: list[Path]) -> None:
    """In the fast tier, fail ``item`` when it started Spark drivers (their logs: ``drivers``)."""
    if drivers and fast_tier() and item.get_closest_marker("spark") is None:
        pytest.fail(
            f"{item.nodeid} started {len(drivers)} Spark driver(s) but is in the fast tier: have it (or "
            "the fixture that starts them) use the fixture spark_drivers (tests/tiers.py), so that "
            "make test-fast leaves it out",
            pytrace=False,
        )
