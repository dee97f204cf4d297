"""The retry policy of pgsync's tasks: Airflow retries only what may succeed on its own.

Every error pgsync raises on purpose says whether running the same task again may succeed
without a human changing anything (``PgSyncError.retryable``). A configuration or preflight
error, hostile input, a table Errored in a destination, a slot that is lost: a retry would fail
the same way, only later, and delay the alert, so the task fails at once (Airflow 3's
``retry_policy``). A source or destination that cannot be reached, a lock held by another run, a
state saved meanwhile: the task's ``retries`` apply as usual, and so they do to every other
exception (a killed process, a driver's error).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

from airflow_provider_pgsync.errors import PgSyncError


class PgSyncRetryPolicy(RetryPolicy):
    """No retry for a ``PgSyncError`` that is not ``retryable``; the task's retries otherwise."""

    def evaluate(
        self, exception: BaseException, try_number: int, max_tries: int, context: Any = None
    ) -> RetryDecision:
        if isinstance(exception, PgSyncError) and not exception.retryable:
            return RetryDecision.fail(
                f"{type(exception).__name__} needs a change by a human: a retry would fail the same way"
            )
        return RetryDecision.default()

    def serialize(self) -> dict[str, Any]:
        return {"__type": "PgSyncRetryPolicy"}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> PgSyncRetryPolicy:
        return cls()


def with_retry_policy(kwargs: dict[str, Any]) -> dict[str, Any]:
    """An operator's ``kwargs`` with pgsync's retry policy unless the DAG author chose one."""
    kwargs.setdefault("retry_policy", PgSyncRetryPolicy())
    return kwargs
