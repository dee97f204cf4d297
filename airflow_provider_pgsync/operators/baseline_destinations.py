"""The PostgreSQL and custom destinations' part of one baseline run (``PgBaselineOperator``).

PostgreSQL replicas get a staging table before the Spark job, which its tasks fill by
``COPY`` (``baseline/pg_copy.py``), swapped in after the job or dropped on failure
(``destinations/postgres_baseline.py``). Custom destinations get the table's rows read here,
on the Airflow worker, in the snapshot's own transaction, through ``load_baseline``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from psycopg.conninfo import conninfo_to_dict

from airflow_provider_pgsync.baseline.passfile import PassEntry
from airflow_provider_pgsync.baseline.plan import base_query
from airflow_provider_pgsync.baseline.spec import BaselineJobSpec, BaselineResult
from airflow_provider_pgsync.destinations.configs import custom_class, destination_kind, open_custom
from airflow_provider_pgsync.destinations.pg_typedefs import SourceCatalog
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.hooks.baseline_rows import text_batches
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.publication import PublishedTable
from airflow_provider_pgsync.source.row_condition import Condition
from airflow_provider_pgsync.state.model import ColumnInfo
from airflow_provider_pgsync.typemap.spark import ColumnRead


@dataclass
class _Replica:
    """A PostgreSQL destination's part of a baseline run: its staging table, whether it is in."""

    config: dict[str, Any]
    name: str
    staging: str
    columns: list[ColumnInfo]
    lineage: str
    finished: bool = False


class ReplicaBaselines:
    """The PostgreSQL destinations among ``configs``: prepared, swapped in or discarded."""

    def __init__(self, configs: Sequence[Mapping[str, Any]], log: logging.Logger | Any) -> None:
        self.configs = [dict(c) for c in configs if destination_kind(c) == "postgres"]
        self.log = log
        self._replicas: list[_Replica] = []
        self._passwords: list[PassEntry] = []  # of the destinations with one

    def prepare(
        self,
        conn: Any,
        table: PublishedTable,
        columns: list[ColumnInfo],
        spec: BaselineJobSpec,
        *,
        name: TableRef | None = None,
    ) -> BaselineJobSpec:
        """Create each destination's staging table; ``spec`` with their entries (the Spark job
        copies into them) and the table's query of its columns as they are. ``table`` is read
        under its name in the source; the destinations' table is named ``name`` (default: the same)."""
        if not self.configs:
            return spec
        entries = []
        for config in self.configs:
            # the staging table gets the source's types and generated columns, read in the snapshot
            destination = PostgresDestination.from_config(config, source=SourceCatalog(conn=conn))
            try:
                staging = self._staging(destination, name or table.table, columns, spec)
                parts = destination.baseline_parts
            finally:
                destination.close()
            self._replicas.append(_Replica(config, destination.name, staging, columns, spec.lineage))
            hook = PgReplicationHook(postgres_conn_id=str(config["conn_id"]))
            conninfo = hook.libpq_target()
            if hook.connection.password:
                self._passwords.append(pass_entry(conninfo, hook.connection.password))
            self.log.info(
                "%s %s: staging table %s in destination %s",
                self.what,
                table.table,
                staging,
                destination.name,
            )
            entries.append(
                {
                    "kind": "postgres",
                    "name": destination.name,
                    "conninfo": conninfo,  # no password: the job's password file has it
                    "staging": staging,
                    "parts": parts,
                    "columns": [c.name for c in columns],
                }
            )
        as_they_are = [ColumnRead(c.name, "{col}", "native", "string") for c in columns]
        return dataclasses.replace(
            spec,
            destinations=(*spec.destinations, *entries),
            pg_query=base_query(table, as_they_are, self.condition).as_string(conn),
        )

    condition: Condition | None = None
    """The rows the job copies (None: every row; a backfill's filter)."""
    what = "baseline"

    def _staging(
        self,
        destination: PostgresDestination,
        table: TableRef,
        columns: list[ColumnInfo],
        spec: BaselineJobSpec,
    ) -> str:
        """A new staging table in ``destination`` for the job to fill; its qualified name."""
        return destination.prepare_baseline(table, columns, spec.lineage)

    def pass_entries(self) -> list[PassEntry]:
        """The password-file entries of the prepared destinations that have a password."""
        return list(self._passwords)

    def finish(self, table: TableRef, result: BaselineResult) -> None:
        """Swap each staging table in (a failed job: drop them)."""
        if not result.ok:
            self.discard()
            return
        for replica in self._replicas:
            destination = PostgresDestination.from_config(replica.config)
            try:
                destination.finish_baseline(table, replica.staging, replica.lineage, replica.columns)
            finally:
                destination.close()
            replica.finished = True
            self.log.info("baseline %s: swapped into destination %s", table, replica.name)

    def discard(self) -> None:
        """Drop the staging tables not swapped in (after a failure; never raises)."""
        for replica in self._replicas:
            if replica.finished:
                continue
            try:
                destination = PostgresDestination.from_config(replica.config)
                try:
                    self._drop(destination, replica.staging)
                finally:
                    destination.close()
            except Exception as exc:
                self.log.warning(
                    "could not drop staging table %s of %s: %s", replica.staging, replica.name, exc
                )

    def _drop(self, destination: PostgresDestination, staging: str) -> None:
        destination.discard_baseline(staging)


def pass_entry(conninfo: str, password: str) -> PassEntry:
    """The password-file entry of the database ``conninfo`` names (as libpq and the JDBC URL
    name it: the same host, port, database and user)."""
    params = conninfo_to_dict(conninfo)
    return PassEntry(
        host=str(params.get("host") or "localhost"),
        port=str(params.get("port") or "5432"),
        dbname=str(params.get("dbname") or ""),
        user=str(params.get("user") or ""),
        password=password,
    )


def check_custom(configs: Sequence[Mapping[str, Any]]) -> None:
    """Import each custom destination's class now: a wrong one fails before any Spark job."""
    for config in configs:
        if destination_kind(config) == "custom":
            custom_class(config)


def load_custom(
    configs: Sequence[Mapping[str, Any]],
    conn: Any,
    table: PublishedTable,
    columns: list[ColumnInfo],
    lineage: str,
    result: BaselineResult,
    log: logging.Logger | Any,
    *,
    spark_ran: bool,
    name: TableRef | None = None,
) -> BaselineResult:
    """Each custom destination's baseline through ``load_baseline``: the table's rows read in the
    snapshot's transaction ``conn`` (as PostgreSQL text, like capture's changes), one pass per
    destination; ``result`` with their rows and entries. A destination that fails raises: the
    whole baseline fails. ``table`` is read under its name in the source; the destinations are
    given ``name`` (default: the same)."""
    target = name or table.table
    written = list(result.written)
    rows = result.rows
    for config in configs:
        if destination_kind(config) != "custom":
            continue
        destination = open_custom(config)
        started = time.monotonic()
        batches = text_batches(conn, table, columns)
        try:
            destination.open_table(target, columns, 0)
            count = destination.load_baseline(target, columns, batches, lineage)
        finally:
            batches.close()  # a COPY left part way is cancelled: the snapshot can be released
            destination.close()
        log.info(
            "baseline %s: %s rows loaded into destination %s in %.1f s",
            target,
            f"{count:,}",
            destination.name,
            time.monotonic() - started,
        )
        written.append({"kind": "custom", "destination": destination.name, "rows": count})
        rows = rows if spark_ran else count
    return dataclasses.replace(result, rows=rows, written=tuple(written))


class ReplicaBackfills(ReplicaBaselines):
    """The PostgreSQL destinations of a filter backfill: a backfill staging table each
    (``Destination.stage_backfill`` with no rows), which the Spark job fills with the rows
    matching ``condition``, then left for apply (``staged``); dropped when the backfill fails."""

    what = "backfill"

    def __init__(
        self,
        configs: Sequence[Mapping[str, Any]],
        log: logging.Logger | Any,
        *,
        backfill_id: str,
        condition: Condition | None,
    ) -> None:
        super().__init__(configs, log)
        self.backfill_id = backfill_id
        self.condition = condition

    def _staging(
        self,
        destination: PostgresDestination,
        table: TableRef,
        columns: list[ColumnInfo],
        spec: BaselineJobSpec,
    ) -> str:
        nothing = pa.table({c.name: pa.array([], pa.string()) for c in columns})
        keys = pa.table({c.name: pa.array([], pa.string()) for c in columns if c.is_key})
        return destination.stage_backfill(table, columns, self.backfill_id, nothing, keys)

    @property
    def staged(self) -> dict[str, str]:
        """Each destination's staging table, by destination name."""
        return {r.name: r.staging for r in self._replicas}

    def finish(self, table: TableRef, result: BaselineResult) -> None:
        """Nothing to swap: apply merges the staged rows (a failed job: drop them)."""
        if not result.ok:
            self.discard()

    def _drop(self, destination: PostgresDestination, staging: str) -> None:
        destination.discard_backfill(staging)
