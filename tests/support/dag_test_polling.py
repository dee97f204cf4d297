"""Test-only: ``dag.test()`` polls its run every 20 ms instead of every second.

When a loop of ``DAG.test`` finds no task to run while one is not finished, it sleeps a second
before it looks again. In pgsync's cdc DAG that happens once per run: ``outcome`` becomes
runnable only on the loop after the skipped mapped ``trigger_rebaseline`` settles. The tests run
hundreds of such runs; the scheduler of a deployment is not concerned.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest

POLL_S = 0.02

polls_shortened = 0
"""How many of ``dag.test()``'s waits were shortened in this process (tests/test_dag_test_polling.py)."""


@pytest.fixture(scope="session", autouse=True)
def _dag_test_polls_quickly() -> Iterator[None]:
    from airflow.sdk.definitions.dag import DAG

    real = time.sleep
    loop = DAG.test.__code__

    def sleep(seconds: float) -> None:
        global polls_shortened
        if sys._getframe(1).f_code is loop:
            polls_shortened += 1
            seconds = min(seconds, POLL_S)
        real(seconds)

    time.sleep = sleep
    try:
        yield
    finally:
        time.sleep = real
