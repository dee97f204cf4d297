"""The Airflow connections an operator needs, resolved before it writes anything.

An operator that found a missing connection only when it reached the step that uses it
could already have written a changelog segment, a lake file or state; each operator
therefore names every connection it will use (source, state store, destinations) and
``check_connections`` resolves them all first, failing with every missing one at once.
A connection that is defined but cannot be reached is left to the step that uses it (a
destination that is down is the retryable case the operators handle per destination).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_provider_pgsync.errors import ConfigError


@dataclass(frozen=True)
class NeededConnection:
    """One Airflow connection an operator uses: its id, and what it is for (the argument that names it)."""

    conn_id: str
    role: str


def destination_connections(destinations: Iterable[Mapping[str, Any]]) -> list[NeededConnection]:
    """The connections the destination configs name (``conn_id`` of a postgres or custom one,
    ``metastore_conn_id`` of a lake)."""
    found = []
    for config in destinations:
        kind = config.get("kind", "lake")
        name = config.get("name", kind)
        for option in ("conn_id", "metastore_conn_id"):
            conn_id = config.get(option)
            if isinstance(conn_id, str) and conn_id:
                found.append(NeededConnection(conn_id, f"destination {name!r} ({kind}, its {option!r})"))
    return found


def source_and_state(postgres_conn_id: str, state_conn_id: str | None) -> list[NeededConnection]:
    """The source's connection and the state store's, when it is another database."""
    needed = [NeededConnection(postgres_conn_id, "source database (postgres_conn_id)")]
    if state_conn_id:
        needed.append(NeededConnection(state_conn_id, "state store (state_conn_id)"))
    return needed


def missing_connections(needed: Sequence[NeededConnection]) -> list[NeededConnection]:
    """The ``needed`` connections Airflow does not know (each id looked up once)."""
    missing: list[NeededConnection] = []
    known: dict[str, bool] = {}
    for need in needed:
        if need.conn_id not in known:
            try:
                BaseHook.get_connection(need.conn_id)
                known[need.conn_id] = True
            except AirflowNotFoundException:
                known[need.conn_id] = False
        if not known[need.conn_id]:
            missing.append(need)
    return missing


def check_connections(operator: str, task_id: str, needed: Sequence[NeededConnection]) -> None:
    """ConfigError naming the operator, the task and each missing connection with its role and
    the remedy, unless Airflow knows every connection in ``needed``; nothing has been written."""
    missing = missing_connections(needed)
    if not missing:
        return
    lines = "\n".join(f"  - {m.conn_id!r}: the {m.role}" for m in missing)
    example = missing[0].conn_id
    raise ConfigError(
        f"{operator} (task {task_id!r}) needs Airflow connection(s) that are not defined; nothing was "
        f"written:\n{lines}\ndefine each (Admin > Connections in the UI, `airflow connections add "
        f"{example} --conn-uri postgresql://user@host:5432/dbname`, or the environment variable "
        f"AIRFLOW_CONN_{example.upper()}), or pass the id of an existing connection"
    )
