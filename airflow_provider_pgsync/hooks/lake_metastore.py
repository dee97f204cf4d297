"""A lake's PostgreSQL metastore (``metastore: postgres``) as the jobs that open it need it.

The operator that submits a Spark job resolves the Airflow connection ``metastore_conn_id``
into a JDBC URL and a libpq string (neither holds the password) and gives the job the
password by reference, in its password file (``baseline/passfile.py``); the job opens the
metastore with them (``spark/metastore_postgres.py``). The driver loads the JDBC driver from
its class path (``JDBC_DRIVER_JAR`` unless the job names its own ``driver_class_path``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_pgsync.baseline.passfile import PassEntry, pass_entry
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.hooks.replication import PgReplicationHook

JDBC_DRIVER_JAR = "/usr/share/java/postgresql.jar"
"""Where Debian's libpostgresql-jdbc-java puts the JDBC driver: the default of the baseline's
``spark_jars``, and of the driver's class path for a PostgreSQL metastore."""


def resolved(lake: LakeDestination) -> LakeDestination:
    """``lake`` with its PostgreSQL metastore's JDBC URL and libpq string filled in from its
    connection (checked: ``hooks.targets``); other lakes as they are."""
    if lake.metastore != "postgres" or not lake.metastore_conn_id:
        return lake
    target = PgReplicationHook(postgres_conn_id=lake.metastore_conn_id).target()
    return dataclasses.replace(lake, metastore_url=target.jdbc_url(), metastore_conninfo=target.conninfo())


def metastore_passwords(lakes: Iterable[LakeDestination]) -> list[PassEntry]:
    """The password-file entries of the PostgreSQL metastores of ``lakes`` (resolved) that
    have a password."""
    entries = []
    for lake in lakes:
        if lake.metastore == "postgres" and lake.metastore_conn_id:
            password = PgReplicationHook(postgres_conn_id=lake.metastore_conn_id).connection.password
            if password:
                entries.append(pass_entry(lake.metastore_conninfo, password))
    return entries


def with_driver_class_path(lakes: Iterable[LakeDestination], options: Mapping[str, Any]) -> dict[str, Any]:
    """SparkSubmitHook ``options`` whose driver loads the JDBC driver when a lake's metastore
    is in PostgreSQL (the options' own ``driver_class_path`` wins)."""
    out = dict(options)
    if any(lake.metastore == "postgres" for lake in lakes):
        out.setdefault("driver_class_path", JDBC_DRIVER_JAR)
    return out
