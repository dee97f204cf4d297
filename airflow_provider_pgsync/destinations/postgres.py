"""The PostgreSQL destination: a replica database, each batch in one transaction with its watermark.

Tables are created with the source's types (``postgres_types.py``: built-in types as they
are, enums, domains and composites recreated under their names, extension types when the
extension is installed in the replica, else ``text`` with a warning), the source's generated
columns as generated columns with the source's expression (pgoutput does not send them: the
replica computes them; ``postgres_create.py``), and the primary key of the source's replica
identity. A batch becomes a few statements of its net effect (``apply/net.py``). A plain batch
(no TRUNCATE, key change or unchanged TOAST, the common case) is one MERGE that deletes and
updates the rows the table holds, joined with their keys and rows staged by one ``COPY`` (a
DELETE and an UPDATE before PostgreSQL 15; ``postgres_staging.py``), and one ``COPY`` of the new
rows into the table; the COPY text is written in a worker thread while the server runs the
statement before it (``postgres_bulk.py``). Other batches go step by step: deletes,
inserts-or-updates of whole rows, then in-place updates that leave columns sent as unchanged
TOAST alone (``postgres_steps.py``). Tables whose identity is the whole row (REPLICA
IDENTITY FULL without a primary key) take a batch as multiset operations: one ``DELETE`` of as
many equal rows as the old rows and a ``COPY`` of the new rows (``postgres_keyless.py``).
Values travel as PostgreSQL text and are parsed by the server. The watermark row
``<control schema>.watermarks`` (``postgres_watermarks.py``) is written in the same
transaction, so a crash leaves the batch applied with its watermark or neither: every change
takes effect exactly once. A baseline fills a staging table and swaps it in
(``postgres_baseline.py``); a backfill's rows wait in a staging table until apply merges them
with the watermark (``postgres_backfill.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.conninfo import make_conninfo

from airflow_provider_pgsync.apply.backfill import TouchedKeys
from airflow_provider_pgsync.apply.destination import Destination, SchemaAnswer
from airflow_provider_pgsync.apply.net import bulk_net, is_keyed, net_steps
from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.changelog.schema import key_columns
from airflow_provider_pgsync.destinations import (
    postgres_backfill,
    postgres_baseline,
    postgres_bulk,
    postgres_create,
    postgres_guard,
    postgres_keyless,
    postgres_steps,
)
from airflow_provider_pgsync.destinations.pg_ddl_lock import lock_ddl
from airflow_provider_pgsync.destinations.pg_typedefs import FIRST_USER_OID, SourceCatalog
from airflow_provider_pgsync.destinations.postgres_schema import change_replica_schema, follow_by_name
from airflow_provider_pgsync.destinations.postgres_types import ReplicaTypes
from airflow_provider_pgsync.destinations.postgres_watermarks import (
    ensure_control_tables,
    read_identity,
    read_watermark,
    watermarks_table,
    write_identity,
    write_watermark,
)
from airflow_provider_pgsync.errors import (
    ConfigError,
    DestinationDivergedError,
    DestinationError,
    DestinationUnavailableError,
)
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.sessions import hold_open, keepalive_args
from airflow_provider_pgsync.state.model import ColumnInfo
from airflow_provider_pgsync.state.schema_diff import SchemaDiff

log = logging.getLogger(__name__)

# Every change of the source becomes a change here, so the tables are heavily updated: room
# on each page lets an updated row's new version stay on its page (a HOT update, with no new
# index entries), until vacuum or page pruning frees the old ones. Measured on a batch that
# updates 60 % of a 1,000,000-row table: its UPDATE took 1.5-1.7 s at fillfactor 60,
# 2.5-3.2 s at 70 and 2.6-4.4 s at 90 or 100 (dev/bench apply). The cost: tables about 1.4
# times the size of packed ones. Per destination: ``fillfactor`` (100 for append-only data).
DEFAULT_FILLFACTOR = 70

_SESSION = (
    # a commit need not wait for its WAL flush: a batch lost in a crash of the replica is lost
    # together with its watermark (same transaction), so apply sends it again
    "SET synchronous_commit = off",
    # a batch's staged rows (up to a million) join the table in one in-memory hash instead of
    # batches spilled to disk (measured: the UPDATE of 600,000 rows 15-25 % faster)
    "SET work_mem = '256MB'",
    # and its staged rows (temporary tables) stay in memory: with the default 8MB of local
    # buffers a batch's staging spills to disk and is read back by the join
    "SET temp_buffers = '256MB'",
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 3",
    # a batch of a million changes, or a baseline's key build and ANALYZE, runs as long as it
    # takes: a low statement_timeout of the replica's database or role would fail it every time
    "SET statement_timeout = 0",
    # its statements are pgsync's own: the tables' guard trigger records only others' writes
    f"SET {postgres_guard.WRITER_SETTING} = 'on'",
)


class PostgresDestination(Destination):
    """Applies changes to tables of the same schema and name in the database at ``conninfo``.

    In a pipeline's config: ``{"kind": "postgres", "conn_id": "<Airflow connection>",
    "name": "postgres", "control_schema": "pgsync", "fillfactor": 70}`` (``from_config``);
    ``fillfactor`` is that of the tables it creates. ``source`` reads the source's catalog for
    the types and generated columns of the tables it creates (without it, types of the source
    that are not built in become ``text`` and generated columns are left out).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        name: str = "postgres",
        control_schema: str = "pgsync",
        fillfactor: int = DEFAULT_FILLFACTOR,
        source: SourceCatalog | None = None,
    ) -> None:
        if isinstance(fillfactor, bool) or not isinstance(fillfactor, int) or not 10 <= fillfactor <= 100:
            raise ConfigError(
                f"postgres destination {name}: fillfactor {fillfactor!r} must be an integer from 10 to 100"
            )
        self.name = name
        self.control_schema = control_schema
        self.fillfactor = fillfactor
        try:
            self._conn = psycopg.connect(conninfo, autocommit=True)
        except psycopg.OperationalError as exc:
            raise _unavailable(name, "connecting", exc) from exc
        self._source = source
        self._types = ReplicaTypes(self._conn, source, name)
        self._actual: dict[str, dict[str, str]] = {}  # per table, its columns' types in the replica
        # per table and its columns' types, those with a hash opclass and those whose equality is
        # equality of text (postgres_keyless.py)
        self._equality: dict[tuple[str, tuple[tuple[str, str], ...]], postgres_keyless.Equality] = {}
        self._staged = 0
        try:
            for statement in _SESSION:
                self._conn.execute(statement)
            # the session lasts the whole apply run, idle while other tables and destinations are
            # worked on, and idle in a batch's transaction while its rows are read and staged
            hold_open(self._conn)
            ensure_control_tables(self._conn, self.control_schema)
        except psycopg.Error as exc:
            self._conn.close()
            if isinstance(exc, psycopg.OperationalError):
                raise _unavailable(name, "preparing its session", exc) from exc
            raise DestinationError(
                f"destination {name}: its control schema {control_schema} could not be prepared: "
                f"{exc.diag.message_primary or exc}; give the connection's role the right to create "
                "it (or create it for that role)"
            ) from exc

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], *, source: SourceCatalog | None = None
    ) -> PostgresDestination:
        """The destination a pipeline config describes; the password comes from the connection;
        ``source``: the source's catalog (the types of the tables it creates)."""
        data = {k: v for k, v in config.items() if k != "kind"}
        unknown = set(data) - {"conn_id", "name", "control_schema", "fillfactor"}
        if unknown or "conn_id" not in data:
            raise ConfigError(
                f"postgres destination {dict(config)!r}: needs conn_id (an Airflow connection) and takes "
                "name, control_schema and fillfactor"
                + (f"; unknown option(s) {', '.join(sorted(unknown))}" if unknown else "")
            )
        # imported here: the destination itself runs without Airflow (e.g. under the test kit)
        from airflow_provider_pgsync.hooks.replication import PgReplicationHook
        from airflow_provider_pgsync.hooks.targets import tls_remedy

        conn_id = str(data["conn_id"])
        hook = PgReplicationHook(postgres_conn_id=conn_id)
        # libpq_target checks the connection's fields and carries its TLS extras
        conninfo = make_conninfo(
            hook.libpq_target(),
            password=hook.connection.password or None,
            **keepalive_args(hook.connection.extra_dejson),  # the connection's own extras win
        )
        try:
            return cls(
                conninfo,
                name=str(data.get("name", "postgres")),
                control_schema=str(data.get("control_schema", "pgsync")),
                fillfactor=data.get("fillfactor", DEFAULT_FILLFACTOR),
                source=source,
            )
        except DestinationUnavailableError as exc:
            remedy = tls_remedy(str(exc))
            raise DestinationUnavailableError(
                f"{exc} (Airflow connection {conn_id!r}{'; ' + remedy if remedy else ''})"
            ) from exc

    # ---- lifecycle

    def open_table(self, table: TableRef, columns: Sequence[ColumnInfo], schema_version: int) -> None:
        """Create the table when it has never been here (no baseline, no change applied); a
        table whose watermark row says it was here is not created again (DestinationDivergedError)."""
        del schema_version  # the table's columns say everything this destination needs
        try:
            if self._exists(table):
                postgres_create.add_new_generated(self, table)
                self._actual.pop(str(table), None)
                return
            held = read_identity(self._conn, self.control_schema, self.name, table)
            row = read_watermark(self._conn, self.control_schema, self.name, table)
            if (held is not None and (held[0] is not None or held[1] is not None)) or (
                row is not None and row[0] is not None
            ):
                raise DestinationDivergedError(
                    f"destination {self.name}: table {table} is gone (dropped outside pgsync, or its "
                    "schema was), though its watermark row says it was made here; apply does not "
                    "create it again empty"
                )
            keys = key_columns(columns) if is_keyed(columns) else []
            extra = (
                [sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, keys)))]
                if keys
                else []
            )
            with self._conn.transaction():
                self.create_table(table, table, columns, extra, if_not_exists=True)
                postgres_guard.install_trigger(self._conn, self.control_schema, table)
                relid = postgres_guard.table_oid(self._conn, table)
                assert relid is not None  # created just now, in this transaction
                write_identity(self._conn, self.control_schema, self.name, table, relid)
        except psycopg.OperationalError as exc:
            raise _unavailable(self.name, f"opening table {table}", exc) from exc
        except psycopg.Error as exc:
            raise DestinationError(
                f"destination {self.name}: table {table} could not be opened: "
                f"{exc.diag.message_primary or exc}; fix the cause in the destination and run apply again"
            ) from exc

    def verify(self, table: TableRef, lineage: str) -> None:
        """See ``postgres_guard.verify``: the table is the one baseline ``lineage`` made, and only
        pgsync wrote to it."""
        try:
            held = read_identity(self._conn, self.control_schema, self.name, table)
            with self._conn.transaction():
                adopted = postgres_guard.verify(
                    self._conn, self.control_schema, self.name, table, lineage, held
                )
                if adopted is not None:
                    write_identity(self._conn, self.control_schema, self.name, table, adopted)
        except psycopg.OperationalError as exc:
            raise _unavailable(self.name, f"checking table {table}", exc) from exc
        except psycopg.Error as exc:
            raise DestinationError(
                f"destination {self.name}: table {table} could not be checked: "
                f"{exc.diag.message_primary or exc}; fix the cause in the destination and run apply again"
            ) from exc

    def watermark(self, table: TableRef) -> Key | None:
        try:
            row = read_watermark(self._conn, self.control_schema, self.name, table)
        except psycopg.OperationalError as exc:
            raise _unavailable(self.name, f"reading the watermark of {table}", exc) from exc
        return None if row is None or row[0] is None else (int(row[0]), int(row[1]))

    def lineage(self, table: TableRef) -> str | None:
        """The lineage of the base the destination holds for ``table`` (None: none recorded)."""
        return postgres_baseline.lineage(self, table)

    # ---- baseline (destinations/postgres_baseline.py)

    def prepare_baseline(self, table: TableRef, columns: Sequence[ColumnInfo], lineage: str) -> str:
        """An empty staging table for the baseline ``lineage`` of ``table``; its qualified name."""
        return postgres_baseline.prepare_baseline(self, table, columns, lineage)

    @property
    def baseline_parts(self) -> str:
        """The table in which baseline tasks record the partitions they copied (SQL text)."""
        return postgres_baseline.parts_table(self)

    def finish_baseline(
        self, table: TableRef, staging: str, lineage: str, columns: Sequence[ColumnInfo]
    ) -> None:
        """Make the filled ``staging`` table ``table``, with no change applied yet, atomically."""
        self._actual.pop(str(table), None)
        postgres_baseline.finish_baseline(self, table, staging, lineage, columns)

    def discard_baseline(self, staging: str) -> None:
        """Drop the staging table of a baseline that failed."""
        postgres_baseline.discard_baseline(self, staging)

    def apply(
        self, table: TableRef, columns: Sequence[ColumnInfo], changes: pa.RecordBatch, upto: Key
    ) -> None:
        try:
            self._refresh_types(table, columns)
            with self._conn.transaction():
                bulk = bulk_net(columns, changes)
                if bulk is not None:
                    postgres_bulk.apply_bulk(self, table, columns, bulk)
                elif changes.num_rows:
                    if is_keyed(columns):
                        for step in net_steps(columns, changes):
                            postgres_steps.apply_step(self, table, columns, step)
                    else:
                        postgres_keyless.apply_keyless(self, table, columns, changes)
                self.write_watermark(table, upto)
        except psycopg.OperationalError as exc:
            raise _unavailable(self.name, f"applying changes to {table}", exc) from exc
        except psycopg.Error as exc:
            raise DestinationError(
                f"destination {self.name}: table {table} could not take a batch of changes up to "
                f"commit LSN {upto[0]}: {exc.diag.message_primary or exc}. Nothing of the batch was "
                "applied; fix the destination table (or rebaseline it) and run apply again"
            ) from exc

    def write_watermark(self, table: TableRef, upto: Key) -> None:
        """Record ``upto`` as the table's watermark (in the caller's transaction)."""
        write_watermark(self._conn, self.control_schema, self.name, table, upto)

    # ---- backfill (destinations/postgres_backfill.py)

    def stage_backfill(
        self,
        table: TableRef,
        columns: Sequence[ColumnInfo],
        backfill_id: str,
        rows: pa.Table,
        absent: pa.Table,
    ) -> str:
        try:
            return postgres_backfill.stage_backfill(self, table, columns, backfill_id, rows, absent)
        except psycopg.OperationalError as exc:
            raise _unavailable(self.name, f"staging a backfill of {table}", exc) from exc

    def backfill(
        self, table: TableRef, columns: Sequence[ColumnInfo], location: str, touched: TouchedKeys, upto: Key
    ) -> int:
        try:
            self._refresh_types(table, columns)
            return postgres_backfill.backfill(self, table, columns, location, touched, upto)
        except psycopg.OperationalError as exc:
            raise _unavailable(self.name, f"applying a backfill to {table}", exc) from exc
        except psycopg.Error as exc:
            raise DestinationError(
                f"destination {self.name}: table {table} could not take the backfill staged in {location}: "
                f"{exc.diag.message_primary or exc}. Nothing of it was applied; fix the destination table "
                "(or rebaseline it) and run apply again"
            ) from exc

    def discard_backfill(self, location: str) -> None:
        postgres_backfill.discard_backfill(self, location)

    def change_schema(self, table: TableRef, diff: SchemaDiff) -> SchemaAnswer:
        """See ``change_replica_schema``."""
        self._actual.pop(str(table), None)
        return change_replica_schema(
            self._conn,
            table,
            diff,
            type_of=lambda column: self.new_type(table, column),
            # the source dropped the generated columns reading it too (DROP ... CASCADE)
            before_drop=lambda name: postgres_create.drop_generated_using(self, table, name),
        )

    def schema_changed(
        self, table: TableRef, old: Sequence[ColumnInfo], new: Sequence[ColumnInfo]
    ) -> SchemaAnswer:
        """See ``follow_by_name`` (apply uses ``change_schema``)."""
        self._actual.pop(str(table), None)
        return follow_by_name(
            self._conn,
            table,
            old,
            new,
            type_of=lambda column: self.new_type(table, column),
            before_drop=lambda name: postgres_create.drop_generated_using(self, table, name),
        )

    def drop_table(self, table: TableRef) -> None:
        """Drop the table (not what depends on it: a view of someone's keeps it, with the error
        naming it) and forget its watermark row, in one transaction."""
        try:
            with self._conn.transaction():
                lock_ddl(self._conn)
                self._conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table.identifier))
                forget = sql.SQL("DELETE FROM {} WHERE destination = %s AND table_key = %s")
                self._conn.execute(forget.format(self._watermarks), (self.name, str(table)))
                postgres_guard.forget_writes(self._conn, self.control_schema, table)
        except psycopg.OperationalError as exc:
            raise _unavailable(self.name, f"dropping table {table}", exc) from exc
        except psycopg.Error as exc:
            raise DestinationError(
                f"destination {self.name}: table {table} could not be dropped: "
                f"{exc.diag.message_primary or exc}; it is kept"
            ) from exc
        log.info("destination %s: table %s dropped", self.name, table)

    def close(self) -> None:
        self._conn.close()
        if self._source is not None:
            self._source.close()

    # ---- helpers

    @property
    def _watermarks(self) -> sql.Composed:
        return watermarks_table(self.control_schema)

    def _type(self, table: TableRef, column: ColumnInfo) -> str:
        """The type ``column`` has in the replica's ``table`` (what values are cast to), or would
        be created with."""
        key = str(table)
        if key not in self._actual:
            rows = self._conn.execute(
                "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute"
                " WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
                (table.identifier.as_string(self._conn),),
            ).fetchall()
            self._actual[key] = {str(r[0]): str(r[1]) for r in rows}
        return self._actual[key].get(column.name) or self.new_type(table, column)

    def new_type(self, table: TableRef, column: ColumnInfo, *, warn: bool = True) -> str:
        """The type a new column of ``table`` gets: the source's (``postgres_types.py``)."""
        return self._types.column_type(table, column.name, column.type_oid, column.type_modifier, warn=warn)

    def _refresh_types(self, table: TableRef, columns: Sequence[ColumnInfo]) -> None:
        """Bring the replica's user types of ``columns`` up to the source's (an enum's new
        labels), once per session, before a batch uses them."""
        if self._source is not None:
            for column in columns:
                if column.type_oid >= FIRST_USER_OID:
                    self.new_type(table, column, warn=False)

    def _exists(self, table: TableRef) -> bool:
        row = self._conn.execute(
            "SELECT to_regclass(%s)", (table.identifier.as_string(self._conn),)
        ).fetchone()
        return row is not None and row[0] is not None

    def create_table(
        self,
        table: TableRef,
        target: TableRef,
        columns: Sequence[ColumnInfo],
        extra: Sequence[sql.Composable] = (),
        *,
        if_not_exists: bool = False,
    ) -> None:
        """Create ``target`` (``table`` or its staging table) with ``columns`` in the source's
        types and the source's generated columns of ``table`` (``postgres_create.py``)."""
        self._actual.pop(str(target), None)
        postgres_create.create_table(self, table, target, columns, extra, if_not_exists=if_not_exists)


def _unavailable(name: str, doing: str, exc: psycopg.OperationalError) -> DestinationUnavailableError:
    """A lost or refused connection: nothing was applied, and a later run may succeed."""
    detail = (exc.diag.message_primary if hasattr(exc, "diag") else None) or str(exc).strip()
    return DestinationUnavailableError(
        f"destination {name} could not be reached while {doing}: {detail}; nothing of it was applied: "
        "check that the server runs and accepts the connection; the next run goes on from the watermark"
    )
