"""PgSyncSensor: deferrable by default, with a plain ``poke`` otherwise; events back to errors."""

from __future__ import annotations

from abc import abstractmethod
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from airflow_provider_pgsync import errors
from airflow_provider_pgsync.errors import PgSyncError
from airflow_provider_pgsync.operators.retry import with_retry_policy
from airflow_provider_pgsync.triggers.base import PollingTrigger
from airflow_provider_pgsync.triggers.checks import Payload

_ERRORS: dict[str, type[PgSyncError]] = {
    cls.__name__: cls
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, PgSyncError)
}


def error_from_event(payload: Payload) -> Exception:
    """The error an error event describes: the same pgsync error class, message and attributes.

    An unknown class name (or a malformed event) gives an AirflowException with the message.
    """
    message = str(payload.get("message") or f"the trigger fired an error event: {payload!r}")
    cls = _ERRORS.get(str(payload.get("error")))
    if cls is None:
        return AirflowException(message)
    # like PgSyncError.__reduce__: subclasses have their own constructors, so rebuild directly
    error = cls.__new__(cls)
    error.args = (message,)
    details = payload.get("details")
    if isinstance(details, dict):
        error.__dict__.update(details)
    return error


class PgSyncSensor(BaseSensorOperator):
    """A sensor that defers at once to its trigger (``deferrable=True``, the default) or pokes.

    Both paths decide with the same pure function (``triggers.checks``) and return the
    same payload (pushed as the task's XCom); an error, from ``poke`` or from an error
    event, fails the task with the pgsync error that names the object and the remedy.
    The trigger polls every ``poke_interval`` seconds; ``timeout`` bounds the wait in
    both modes (the deferral's timeout when deferred).

    :param deferrable: defer to the triggerer (no worker slot while waiting).
    """

    def __init__(self, *, deferrable: bool = True, **kwargs: Any) -> None:
        super().__init__(**with_retry_policy(kwargs))
        self.deferrable = deferrable

    @abstractmethod
    def make_trigger(self, context: Context) -> PollingTrigger:
        """The trigger to defer to (built from the rendered arguments)."""

    @abstractmethod
    def check(self, context: Context) -> Payload | None:
        """One synchronous check: the payload when done, None to poke again."""

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        self.defer(
            trigger=self.make_trigger(context),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def poke(self, context: Context) -> bool | PokeReturnValue:
        payload = self.check(context)
        if payload is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self.finish(payload))

    def execute_complete(self, context: Context, event: Payload | None = None) -> Payload:
        """Resume after the trigger fired: return its payload, or raise the error it reports."""
        if not isinstance(event, dict):
            raise AirflowException(f"{self.task_id}: the trigger fired no event payload (got {event!r})")
        return self.finish(event)

    def finish(self, payload: Payload) -> Payload:
        """Raise the error of an error payload; log and return a success payload."""
        if payload.get("status") != "success":
            raise error_from_event(payload)
        self.log.info("%s fired (%s): %s", self.task_id, payload.get("fired"), payload)
        return payload
