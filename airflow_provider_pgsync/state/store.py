"""The state store protocol: load, compare-and-set save, delete; and a retrying update helper."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from airflow_provider_pgsync.errors import ConfigError, StateConflictError
from airflow_provider_pgsync.state.model import PipelineState

STATE_BACKENDS = ("variables", "postgres")
"""Where a pipeline's state can live: Airflow Variables, or a table in a PostgreSQL database."""


def check_state_backend(backend: str) -> str:
    """``backend`` if it is a known state backend; ConfigError listing them otherwise."""
    if backend not in STATE_BACKENDS:
        raise ConfigError(f"state_backend {backend!r} is unknown; use one of {', '.join(STATE_BACKENDS)}")
    return backend


@runtime_checkable
class StateStore(Protocol):
    """Where pipeline states live between task runs; every save is a compare-and-set."""

    def load(self, pipeline: str) -> PipelineState:
        """The saved state, or a fresh ``PipelineState(pipeline)`` with version 0 if none is saved."""
        ...

    def save(self, state: PipelineState) -> PipelineState:
        """Store ``state`` if the stored version still equals ``state.version``; return it at version + 1.

        Raises StateConflictError (retryable) when another run saved in between.
        """
        ...

    def delete(self, pipeline: str) -> None:
        """Forget the pipeline's state (a no-op when none is saved)."""
        ...


def update_state(
    store: StateStore,
    pipeline: str,
    change: Callable[[PipelineState], PipelineState],
    *,
    attempts: int = 5,
) -> PipelineState:
    """Load, apply ``change`` and save; on a conflict reload and apply it again (at most ``attempts`` times).

    ``change`` must be a pure function of the state it is given: it may run more than once.
    """
    if attempts < 1:
        raise ConfigError(f"update_state needs at least one attempt, not {attempts}")
    for attempt in range(1, attempts + 1):
        current = store.load(pipeline)
        try:
            return store.save(change(current))
        except StateConflictError:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")
