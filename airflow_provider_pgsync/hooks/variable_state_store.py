"""VariableStateStore: one Airflow Variable of JSON per pipeline, saved under an advisory lock.

Airflow Variables have no compare-and-set: ``Variable.set`` overwrites blindly. So
``save`` reads the stored version, compares and writes while holding a PostgreSQL
advisory lock keyed on the pipeline (``state_lock_key``) in a database every task of
the pipeline can reach anyway (the source, or a control database). Two savers of the
same version then run one after the other, and the second sees the first's version
and fails with StateConflictError. ``load`` takes no lock: a Variable write is atomic,
and a stale read is caught by the compare at save time.

Which Variable API works depends on where the code runs (read from Airflow 3.3's
source): inside a task ``airflow.sdk.Variable`` talks to the API server through the
supervisor (``task_runner.SUPERVISOR_COMMS``, also set by ``dag.test()``). Outside a
task (tests, scripts, the CLI) there is no supervisor: ``airflow.sdk.Variable.set``
fails with ImportError for SUPERVISOR_COMMS and ``.get`` never looks at the metadata
database, so there ``airflow.models.Variable`` is used, which reads and writes the
metadata database directly (it forwards to the SDK itself inside a task, but warns).

Caveats: a Variable of the same key in a secrets backend or an ``AIRFLOW_VAR_*``
environment variable shadows the metadata database for reads, which breaks the
compare; and a pipeline name containing a sensitive word (``secret``, ``password``,
...) makes Airflow mask the whole state in logs.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

from airflow_provider_pgsync.errors import StateConflictError, StateError
from airflow_provider_pgsync.hooks.advisory_lock import (
    AdvisoryLock,
    ConnectionSource,
    as_connect,
    state_lock_key,
)
from airflow_provider_pgsync.state.model import PipelineState, validate_pipeline_name


class VariableStateStore:
    """The ``StateStore`` in Airflow Variables ``<prefix><pipeline>``.

    :param lock: the database whose advisory locks serialise saves (a PgReplicationHook
        or a connection factory); every writer of the pipeline must use the same one.
    :param prefix: the Variable key prefix.
    :param lock_timeout: seconds to wait for another run's save before LockTimeoutError.
    """

    def __init__(
        self,
        *,
        lock: ConnectionSource,
        prefix: str = "pgsync_state__",
        lock_timeout: float | None = 60.0,
    ) -> None:
        as_connect(lock)  # fail early on something that cannot open connections
        self._lock = lock
        self.prefix = prefix
        self.lock_timeout = lock_timeout

    def key(self, pipeline: str) -> str:
        """The Variable key of a pipeline."""
        return self.prefix + validate_pipeline_name(pipeline)

    def load(self, pipeline: str) -> PipelineState:
        """The saved state, or a fresh one at version 0."""
        text = _read(self.key(pipeline))
        if text is None:
            return PipelineState(pipeline)
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise StateError(
                f"Airflow Variable {self.key(pipeline)!r} does not hold JSON ({exc}); it was edited by "
                "hand: restore it, or delete it and set the pipeline up again"
            ) from exc
        state = PipelineState.from_json(data)
        if state.pipeline != pipeline:
            raise StateError(
                f"Airflow Variable {self.key(pipeline)!r} holds the state of pipeline {state.pipeline!r}: "
                "it was copied by hand; delete it and set the pipeline up again"
            )
        return state

    def save(self, state: PipelineState) -> PipelineState:
        """Compare-and-set under the pipeline's advisory lock; return the state at version + 1."""
        new = replace(state, version=state.version + 1)
        with AdvisoryLock(self._lock, state_lock_key(state.pipeline), timeout=self.lock_timeout):
            found = self.load(state.pipeline).version  # 0: nothing saved (a save is at least 1)
            if found != state.version:
                raise StateConflictError(state.pipeline, state.version, found or None)
            _write(self.key(state.pipeline), json.dumps(new.to_json(), separators=(",", ":")))
        return new

    def delete(self, pipeline: str) -> None:
        """Delete the pipeline's Variable (a no-op when there is none)."""
        with AdvisoryLock(self._lock, state_lock_key(pipeline), timeout=self.lock_timeout):
            _delete(self.key(pipeline))


# ---- Airflow Variables, inside or outside a task ------------------------------------------


def _in_task() -> bool:
    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    return getattr(runner, "SUPERVISOR_COMMS", None) is not None


def _read(key: str) -> str | None:
    from airflow.sdk import SecretCache

    SecretCache.invalidate_variable(key)  # never compare against a cached copy
    if _in_task():
        from airflow.sdk import Variable

        value: Any = Variable.get(key, default=None)
    else:
        from airflow.models import Variable as MetadataVariable

        value = MetadataVariable.get(key, default_var=None)
    return None if value is None else str(value)


def _write(key: str, value: str) -> None:
    if _in_task():
        from airflow.sdk import Variable

        Variable.set(key, value, description="pgsync pipeline state (JSON); managed by pgsync")
    else:
        from airflow.models import Variable as MetadataVariable

        MetadataVariable.set(key, value, description="pgsync pipeline state (JSON); managed by pgsync")


def _delete(key: str) -> None:
    if _in_task():
        from airflow.sdk import Variable

        Variable.delete(key)
    else:
        from airflow.models import Variable as MetadataVariable

        MetadataVariable.delete(key)
