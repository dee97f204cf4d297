"""The PostgreSQL and custom destinations' part of one baseline run (``PgBaselineOperator``).

PostgreSQL replicas get a staging table before the Spark job, which its tasks fill by
``COPY`` (``baseline/pg_copy.py``), swapped in after the job or dropped on failure
(``destinations/postgres_baseline.py``). Custom destinations get the table's rows read here,
on the Airflow worker, in the snapshot's own transaction, through ``load_baseline``.

Each destination's part succeeds or fails on its own (a baseline; a backfill is all or
nothing): a replica whose staging table cannot be made, whose copy failed or whose swap
fails, a custom destination whose load fails, is reported by name with its error, and
leaves nothing behind in it (its staging table dropped); the others go on.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from psycopg.pq import TransactionStatus

from airflow_provider_pgsync.baseline.passfile import PassEntry, pass_entry
from airflow_provider_pgsync.baseline.plan import base_query
from airflow_provider_pgsync.baseline.spec import BaselineJobSpec, BaselineResult
from airflow_provider_pgsync.destinations.configs import (
    custom_class,
    destination_kind,
    destination_name,
    open_custom,
)
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
    """A PostgreSQL destination's part of a baseline run: its staging table, whether it is in
    (``finished``) or dropped."""

    config: dict[str, Any]
    name: str
    staging: str
    columns: list[ColumnInfo]
    lineage: str
    finished: bool = False
    dropped: bool = False


class ReplicaBaselines:
    """The PostgreSQL destinations among ``configs``: prepared, swapped in or discarded."""

    isolated = True
    """A destination whose staging table cannot be made is left out (``refused``), not raised."""

    def __init__(self, configs: Sequence[Mapping[str, Any]], log: logging.Logger | Any) -> None:
        self.configs = [dict(c) for c in configs if destination_kind(c) == "postgres"]
        self.log = log
        self._replicas: list[_Replica] = []
        self._passwords: list[PassEntry] = []  # of the destinations with one
        self.refused: dict[str, BaseException] = {}
        """Per destination left out of the job by ``prepare``, why."""

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
        under its name in the source; the destinations' table is named ``name`` (default: the same).
        A destination that refuses its staging table (e.g. a type it has with another definition,
        or it cannot be reached) is left out and named in ``refused``, when ``isolated``."""
        if not self.configs:
            return spec
        entries = []
        for config in self.configs:
            try:
                entries.append(self._prepare(conn, config, table, columns, spec, name))
            except Exception as exc:
                if not self.isolated or conn.info.transaction_status == TransactionStatus.INERROR:
                    raise  # a backfill is all or nothing; the snapshot's transaction failed: all fail
                self.refused[destination_name(config)] = exc  # the operator logs why
                self.log.warning(
                    "%s %s: destination %s left out of the Spark job: its staging table could not be made",
                    self.what,
                    table.table,
                    destination_name(config),
                )
        if not entries:
            return spec
        as_they_are = [ColumnRead(c.name, "{col}", "native", "string") for c in columns]
        leaves = [TableRef.parse(leaf) for leaf, _, _ in spec.leaves]  # a partitioned table's, as planned
        return dataclasses.replace(
            spec,
            destinations=(*spec.destinations, *entries),
            pg_query=base_query(table, as_they_are, self.condition, leaves).as_string(conn),
        )

    condition: Condition | None = None
    """The rows the job copies (None: every row; a backfill's filter)."""
    what = "baseline"

    def _prepare(
        self,
        conn: Any,
        config: dict[str, Any],
        table: PublishedTable,
        columns: list[ColumnInfo],
        spec: BaselineJobSpec,
        name: TableRef | None,
    ) -> dict[str, Any]:
        """One destination's staging table, made (the last step: a failure before it leaves
        nothing to drop); its entry in the job's spec."""
        hook = PgReplicationHook(postgres_conn_id=str(config["conn_id"]))
        conninfo = hook.libpq_target()
        password = hook.connection.password
        # the staging table gets the source's types and generated columns, read in the snapshot
        destination = PostgresDestination.from_config(config, source=SourceCatalog(conn=conn))
        try:
            staging = self._staging(destination, name or table.table, columns, spec)
            parts = destination.baseline_parts
        finally:
            destination.close()
        self._replicas.append(_Replica(config, destination.name, staging, columns, spec.lineage))
        if password:
            self._passwords.append(pass_entry(conninfo, password))
        self.log.info(
            "%s %s: staging table %s in destination %s",
            self.what,
            table.table,
            staging,
            destination.name,
        )
        return {
            "kind": "postgres",
            "name": destination.name,
            "conninfo": conninfo,  # no password: the job's password file has it
            "staging": staging,
            "parts": parts,
            "columns": [c.name for c in columns],
        }

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

    def finish(self, table: TableRef, result: BaselineResult) -> dict[str, BaseException]:
        """Swap each staging table in, one by one; drop those of the destinations whose copy
        failed (all of them when the job failed as a whole). Per destination whose swap (key,
        analyze, swap) failed, why: its staging table is dropped, its table left as it was."""
        if result.failed_as_a_whole:
            self.discard()
            return {}
        refused: dict[str, BaseException] = {}
        for replica in self._replicas:
            if result.error_of(replica.name) is not None:
                self._discard(replica)
                continue
            try:
                destination = PostgresDestination.from_config(replica.config)
                try:
                    destination.finish_baseline(table, replica.staging, replica.lineage, replica.columns)
                finally:
                    destination.close()
            except Exception as exc:  # this destination's (the operator logs it): the others go on
                refused[replica.name] = exc
                self._discard(replica)
                continue
            replica.finished = True
            self.log.info("baseline %s: swapped into destination %s", table, replica.name)
        return refused

    def discard(self) -> None:
        """Drop the staging tables not swapped in (after a failure; never raises)."""
        for replica in self._replicas:
            self._discard(replica)

    def _discard(self, replica: _Replica) -> None:
        if replica.finished or replica.dropped:
            return
        try:
            destination = PostgresDestination.from_config(replica.config)
            try:
                self._drop(destination, replica.staging)
            finally:
                destination.close()
        except Exception as exc:
            self.log.warning("could not drop staging table %s of %s: %s", replica.staging, replica.name, exc)
        else:
            replica.dropped = True

    def _drop(self, destination: PostgresDestination, staging: str) -> None:
        destination.discard_baseline(staging)


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
) -> tuple[BaselineResult, dict[str, BaseException]]:
    """Each custom destination's baseline through ``load_baseline``: the table's rows read in the
    snapshot's transaction ``conn`` (as PostgreSQL text, like capture's changes), one pass per
    destination; ``result`` with their rows and entries, and per destination whose load failed,
    why (the others are loaded: each reads under a savepoint, so a failed read leaves the
    snapshot's transaction usable). ``table`` is read under its name in the source; the
    destinations are given ``name`` (default: the same)."""
    target = name or table.table
    written = list(result.written)
    rows = result.rows
    failed: dict[str, BaseException] = {}
    for config in configs:
        if destination_kind(config) != "custom":
            continue
        started = time.monotonic()
        try:
            with conn.transaction():  # a savepoint in the snapshot's transaction
                count, loaded = _load_custom(config, conn, table, target, columns, lineage)
        except Exception as exc:  # this destination's (the operator logs it): the next ones load
            failed[destination_name(config)] = exc
            continue
        log.info(
            "baseline %s: %s rows loaded into destination %s in %.1f s",
            target,
            f"{count:,}",
            loaded,
            time.monotonic() - started,
        )
        written.append({"kind": "custom", "destination": loaded, "rows": count})
        rows = rows if spark_ran else count
    result = dataclasses.replace(result, rows=rows, written=tuple(written))
    for destination, error in failed.items():
        result = result.with_failure(destination, f"{type(error).__name__}: {error}")
    return result, failed


def _load_custom(
    config: Mapping[str, Any],
    conn: Any,
    table: PublishedTable,
    target: TableRef,
    columns: list[ColumnInfo],
    lineage: str,
) -> tuple[int, str]:
    """One custom destination's ``load_baseline``; the rows it took and its name."""
    destination = open_custom(config)
    batches = text_batches(conn, table, columns)
    try:
        destination.open_table(target, columns, 0)
        count = destination.load_baseline(target, columns, batches, lineage)
    finally:
        batches.close()  # a COPY left part way is cancelled: the snapshot can be released
        destination.close()
    return count, destination.name


class ReplicaBackfills(ReplicaBaselines):
    """The PostgreSQL destinations of a filter backfill: a backfill staging table each
    (``Destination.stage_backfill`` with no rows), which the Spark job fills with the rows
    matching ``condition``, then left for apply (``staged``); dropped when the backfill fails."""

    what = "backfill"
    isolated = False  # a backfill is all or nothing

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

    def finish(self, table: TableRef, result: BaselineResult) -> dict[str, BaseException]:
        """Nothing to swap: apply merges the staged rows (a failed job: drop them)."""
        if not result.ok:
            self.discard()
        return {}

    def _drop(self, destination: PostgresDestination, staging: str) -> None:
        destination.discard_backfill(staging)
