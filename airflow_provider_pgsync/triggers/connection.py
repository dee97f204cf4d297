"""An async psycopg connection from an Airflow connection id, for triggers.

Triggers carry only the connection id: the triggerer looks the connection up itself
with Airflow's async ``BaseHook.aget_connection`` (through the supervisor, the secrets
backends or ``AIRFLOW_CONN_*``), so the password never enters a trigger's serialized
arguments. The connection arguments are those ``PostgresHook.get_conn`` builds: host,
port, login, password, database, and the connection's extras except the ones the hook
itself ignores.
"""

from __future__ import annotations

from typing import Any

import psycopg
from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_provider_pgsync.errors import ConfigError, SourceUnavailableError
from airflow_provider_pgsync.hooks.targets import check_ssl_extras, tls_remedy


def connection_args(conn: Any, extra: dict[str, Any], *, application_name: str) -> dict[str, Any]:
    """psycopg ``connect`` arguments for an Airflow ``Connection`` and its extras, like PostgresHook."""
    if extra.get("iam"):
        raise ConfigError(
            f"connection {conn.conn_id!r} uses IAM authentication, which the pgsync triggers do not "
            "support: run the sensor with deferrable=False"
        )
    check_ssl_extras(conn.conn_id, extra)  # a bad sslmode is named here, not as libpq's bare complaint
    args: dict[str, Any] = {
        "host": conn.host,
        "port": conn.port,
        "user": conn.login,
        "password": conn.password,
        "dbname": conn.schema,
        "application_name": application_name,
    }
    args.update((k, v) for k, v in extra.items() if k not in PostgresHook.ignored_extra_options)
    return {k: v for k, v in args.items() if v is not None and v != ""}


async def connect(conn_id: str, *, application_name: str) -> psycopg.AsyncConnection[Any]:
    """A new autocommit AsyncConnection to the database of Airflow connection ``conn_id``."""
    try:
        airflow_conn = await BaseHook.aget_connection(conn_id)
    except AirflowNotFoundException as exc:
        raise ConfigError(
            f"Airflow connection {conn_id!r} is not defined: create it (UI, CLI or AIRFLOW_CONN_"
            f"{conn_id.upper()}) where the triggerer can see it"
        ) from exc
    # aextra_dejson masks the extras without a blocking call to the supervisor (extra_dejson would)
    extra = await airflow_conn.aextra_dejson()
    args = connection_args(airflow_conn, extra, application_name=application_name)
    try:
        return await psycopg.AsyncConnection.connect(autocommit=True, **args)
    except psycopg.OperationalError as exc:
        target = f"{args.get('host', 'localhost')}:{args.get('port', 5432)}/{args.get('dbname', '')}"
        reason = str(exc).strip()
        remedy = tls_remedy(reason) or "check that the server runs and the connection is right"
        raise SourceUnavailableError(
            f"cannot connect to {target} (Airflow connection {conn_id!r}): {reason}; {remedy}"
        ) from exc
