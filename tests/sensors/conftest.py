"""The sensors in real DAG runs (``dag.test()``, which runs a deferred task's trigger in-process).

The sensors under test are the package's classes with a guard (``OnePath``) that fails
the task when it takes the other path than its ``deferrable`` flag says: a deferrable
sensor must defer to its trigger and never poke, a non-deferrable one must poke and
never build a trigger. ``run_sensor`` runs a one-task DAG and returns the task's
state, its XCom and the exception the task failed with (if any).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_pgsync.sensors import PgPendingChangesSensor, PgSlotLagSensor, PgTablePhaseSensor
from tests.conftest import RunDag
from tests.triggers.conftest import Pipeline, Source, pipeline, source  # noqa: F401  (fixtures)


class OnePath:
    """Mixin: the task fails if the sensor pokes while deferrable, or builds a trigger while not."""

    deferrable: bool

    def poke(self, context: Any) -> Any:
        if self.deferrable:
            raise AssertionError("a deferrable sensor poked instead of deferring to its trigger")
        return super().poke(context)  # type: ignore[misc]

    def make_trigger(self, context: Any) -> Any:
        if not self.deferrable:
            raise AssertionError("a non-deferrable sensor built a trigger")
        return super().make_trigger(context)  # type: ignore[misc]


class PendingSensor(OnePath, PgPendingChangesSensor):
    """PgPendingChangesSensor on one path."""


class LagSensor(OnePath, PgSlotLagSensor):
    """PgSlotLagSensor on one path."""


class PhaseSensor(OnePath, PgTablePhaseSensor):
    """PgTablePhaseSensor on one path."""


@dataclass
class SensorRun:
    """The outcome of a one-sensor DAG run."""

    state: str
    xcom: Any
    error: BaseException | None


@pytest.fixture(params=[True, False], ids=["deferrable", "poke"])
def deferrable(request: pytest.FixtureRequest) -> bool:
    """Each sensor mode in turn."""
    return bool(request.param)


def run_sensor(run_dag: RunDag, dag_id: str, sensor_cls: type, **arguments: Any) -> SensorRun:
    """Run a DAG holding one sensor (task ``sense``, short poke interval, no retries)."""
    failures: list[BaseException] = []

    def record_failure(context: Any) -> None:
        failures.append(context["exception"])

    with DAG(
        dag_id, schedule=None, default_args={"retries": 0, "on_failure_callback": record_failure}
    ) as dag:
        sensor_cls(task_id="sense", poke_interval=0.2, timeout=120, **arguments)
    run = run_dag(dag)
    [ti] = run.get_task_instances()
    return SensorRun(str(ti.state), ti.xcom_pull(task_ids="sense"), failures[0] if failures else None)


__all__ = ["LagSensor", "PendingSensor", "PhaseSensor", "Pipeline", "SensorRun", "Source", "run_sensor"]
