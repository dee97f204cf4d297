"""The PostgreSQL destination: a replica database, each batch in one transaction with its watermark.

Tables are created with the source's types (``postgres_types.py``: built-in types as they
are, enums, domains and composites recreated under their names, extension types when the
extension is installed in the replica, else ``text`` with a warning), the source's generated
columns as generated columns with the source's expression (pgoutput does not send them: the
replica computes them; ``postgres_create.py``), and the primary key of the source's replica
identity. A batch becomes a few statements of its net effect
(``apply/net.py``). A plain batch (no TRUNCATE, key change or unchanged TOAST, the common
case) is one MERGE that deletes and updates the rows the table holds, joined with their keys
and rows staged by one ``COPY`` (a DELETE and an UPDATE before PostgreSQL 15), and one ``COPY``
of the new rows into the table; the COPY text is written in a worker thread while the server
runs the statement before it. Other batches go
step by step: deletes, inserts-or-updates of whole rows, then in-place updates that leave
columns sent as unchanged TOAST alone. Tables whose identity is the whole row (REPLICA
IDENTITY FULL without a primary key) take a batch as multiset operations: one ``DELETE`` of as
many equal rows as the old rows and a ``COPY`` of the new rows (``postgres_keyless.py``).
Values travel as PostgreSQL text and are parsed by the server. The watermark row
``<control schema>.watermarks`` is written in the same transaction, so a crash leaves the
batch applied with its watermark or neither: every change takes effect exactly once.
A baseline fills a staging table and swaps it in (``postgres_baseline.py``); a backfill's rows
wait in a staging table until apply merges them with the watermark (``postgres_backfill.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.conninfo import make_conninfo

from airflow_provider_pgsync.apply.backfill import TouchedKeys
from airflow_provider_pgsync.apply.net import (
    BulkNet,
    KeyValues,
    NetStep,
    Present,
    Truncate,
    Values,
    bulk_net,
    is_keyed,
    net_steps,
)
from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.changelog.schema import key_columns
from airflow_provider_pgsync.destinations import (
    postgres_backfill,
    postgres_baseline,
    postgres_create,
    postgres_keyless,
)
from airflow_provider_pgsync.destinations.pg_csv import copy_text
from airflow_provider_pgsync.destinations.pg_ddl_lock import lock_ddl
from airflow_provider_pgsync.destinations.pg_typedefs import FIRST_USER_OID, SourceCatalog
from airflow_provider_pgsync.destinations.postgres_schema import change_replica_schema
from airflow_provider_pgsync.destinations.postgres_types import ReplicaTypes
from airflow_provider_pgsync.destinations.protocol import Destination, SchemaAnswer
from airflow_provider_pgsync.errors import ConfigError, DestinationError, DestinationUnavailableError
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
        for statement in _SESSION:
            self._conn.execute(statement)
        # the session lasts the whole apply run, idle while other tables and destinations are
        # worked on, and idle in a batch's transaction while its rows are read and staged
        hold_open(self._conn)
        self._source = source
        self._types = ReplicaTypes(self._conn, source, name)
        self._actual: dict[str, dict[str, str]] = {}  # per table, its columns' types in the replica
        # per table and its columns' types, those with a hash opclass (postgres_keyless.py)
        self._hashable: dict[tuple[str, tuple[tuple[str, str], ...]], frozenset[str]] = {}
        self._staged = 0
        self._ensure_watermarks()

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
        del schema_version  # the table's columns say everything this destination needs
        if self._exists(table):
            postgres_create.add_new_generated(self, table)
            self._actual.pop(str(table), None)
            return
        keys = key_columns(columns) if is_keyed(columns) else []
        extra = (
            [sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, keys)))]
            if keys
            else []
        )
        self.create_table(table, table, columns, extra, if_not_exists=True)

    def watermark(self, table: TableRef) -> Key | None:
        try:
            row = self._read_watermark(table)
        except psycopg.OperationalError as exc:
            raise _unavailable(self.name, f"reading the watermark of {table}", exc) from exc
        return None if row is None or row[0] is None else (int(row[0]), int(row[1]))

    def _read_watermark(self, table: TableRef) -> tuple[Any, ...] | None:
        return self._conn.execute(
            sql.SQL("SELECT commit_lsn, seq FROM {} WHERE destination = %s AND table_key = %s").format(
                self._watermarks
            ),
            (self.name, str(table)),
        ).fetchone()

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
                    self._apply_bulk(table, columns, bulk)
                elif changes.num_rows:
                    if is_keyed(columns):
                        for step in net_steps(columns, changes):
                            self._apply_step(table, columns, step)
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
        self._conn.execute(
            sql.SQL(
                "INSERT INTO {} (destination, table_key, commit_lsn, seq) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (destination, table_key)"  # the lineage stays as it is
                " DO UPDATE SET commit_lsn = EXCLUDED.commit_lsn, seq = EXCLUDED.seq"
            ).format(self._watermarks),
            (self.name, str(table), upto[0], upto[1]),
        )

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
        """Without column identities: added columns are added (with the source's type), dropped
        ones dropped (Continue); a changed type or key needs the table rebaselined. Apply uses
        ``change_schema``."""
        before = {c.name: c for c in old}
        after = {c.name: c for c in new}
        for name in before.keys() & after.keys():
            a, b = before[name], after[name]
            if (a.type_oid, a.type_modifier, a.is_key) != (b.type_oid, b.type_modifier, b.is_key):
                return SchemaAnswer.REBASELINE
        if [c.name for c in old if c.is_key] != [c.name for c in new if c.is_key]:
            return SchemaAnswer.REBASELINE
        # types made before the transaction: a label added to an enum is usable once committed
        added = [(c, self.new_type(table, c)) for c in new if c.name not in before]
        self._actual.pop(str(table), None)
        with self._conn.transaction():
            for column, type_sql in added:
                self._conn.execute(
                    sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                        table.identifier, sql.Identifier(column.name), sql.SQL(type_sql)
                    )
                )
            for column in old:
                if column.name not in after:
                    # the source dropped the generated columns reading it too (DROP ... CASCADE)
                    postgres_create.drop_generated_using(self, table, column.name)
                    self._conn.execute(
                        sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS {}").format(
                            table.identifier, sql.Identifier(column.name)
                        )
                    )
        return SchemaAnswer.CONTINUE

    def close(self) -> None:
        self._conn.close()
        if self._source is not None:
            self._source.close()

    # ---- keyed tables, plain batches: three set statements

    def _apply_bulk(self, table: TableRef, columns: Sequence[ColumnInfo], net: BulkNet) -> None:
        """The rows the table holds deleted and updated by one statement joined with them staged
        by COPY (a MERGE; a DELETE and an UPDATE before PostgreSQL 15), then the new rows copied
        straight into the table. Each COPY's text is written in a worker thread while the
        server runs the statements before it. The counts are checked: a destination that lost
        a row, or holds one the source inserted, is an error, not a silent repair."""
        names = [c.name for c in columns]
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgsync-csv") as pool:
            changed = pool.submit(_changed_csv, names, key_columns(columns), net)
            inserts = pool.submit(copy_text, net.inserts) if net.inserts.num_rows else None
            try:
                if self._conn.info.server_version >= 150000:
                    self._merge(table, columns, net, changed.result())
                else:
                    self._delete_update(table, columns, net)
                if inserts is not None:
                    self._copy_new(table, names, inserts.result())
            finally:
                for pending in (changed, inserts):
                    if pending is not None:
                        pending.cancel()

    def _merge(
        self, table: TableRef, columns: Sequence[ColumnInfo], net: BulkNet, staged_csv: bytes | memoryview
    ) -> None:
        """Delete and update the rows the table holds in one join: the deleted keys and the updated
        rows staged together (``pgsync_op`` D or U), one MERGE."""
        expected = net.deletes.num_rows + net.updates.num_rows
        if not expected:
            return
        names = [c.name for c in columns]
        keys = key_columns(columns)
        others = [n for n in names if n not in keys]
        op = _free_name(names, "op")
        # a deleted key's other columns are staged NULL: they take their base type there (CASE
        # drops a domain, whose NOT NULL would refuse them); the UPDATE assigns the domain back
        staged = self._new_stage(
            table, names, extra=sql.SQL("''::text AS {}").format(sql.Identifier(op)), loose=others
        )
        self._copy_csv(staged, [op, *names], staged_csv)
        count = self._conn.execute(
            sql.SQL(
                "MERGE INTO {} AS t USING {} AS s ON {}"
                " WHEN MATCHED AND s.{} = 'D' THEN DELETE"
                # an UPDATE, not a DELETE and INSERT: a row whose indexed columns stay the same
                # gets its new version on the same page (HOT) without index entries
                " WHEN MATCHED THEN UPDATE SET {}"
            ).format(
                table.identifier,
                staged,
                _join(keys),
                sql.Identifier(op),
                sql.SQL(", ").join(sql.SQL("{0} = s.{0}").format(sql.Identifier(n)) for n in others),
            )
        ).rowcount
        self._check_count(table, count, expected, "updated or deleted")

    def _delete_update(self, table: TableRef, columns: Sequence[ColumnInfo], net: BulkNet) -> None:
        """``_merge`` for servers without MERGE: one DELETE and one UPDATE."""
        names = [c.name for c in columns]
        keys = key_columns(columns)
        others = [n for n in names if n not in keys]
        if net.deletes.num_rows:
            staged = self._stage(table, keys, net.deletes)
            count = self._conn.execute(
                sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE {}").format(
                    table.identifier, staged, _join(keys)
                )
            ).rowcount
            self._check_count(table, count, net.deletes.num_rows, "deleted")
        if net.updates.num_rows:
            staged = self._stage(table, names, net.updates)
            count = self._conn.execute(
                sql.SQL("UPDATE {} AS t SET {} FROM {} AS s WHERE {}").format(
                    table.identifier,
                    sql.SQL(", ").join(sql.SQL("{0} = s.{0}").format(sql.Identifier(n)) for n in others),
                    staged,
                    _join(keys),
                )
            ).rowcount
            self._check_count(table, count, net.updates.num_rows, "updated")

    def _copy_new(self, table: TableRef, names: list[str], rows_csv: bytes | memoryview) -> None:
        """The new rows (CSV) into ``table``; a key it already holds is an error."""
        try:
            self._copy_csv(table.identifier, names, rows_csv)
        except psycopg.errors.UniqueViolation as exc:
            raise DestinationError(
                f"destination {self.name}: table {table} already has a row the source inserted "
                f"({exc.diag.message_detail or exc}): the destination holds rows the source does "
                "not; rebaseline it"
            ) from exc

    def _check_count(self, table: TableRef, count: int, expected: int, done: str) -> None:
        if count != expected:
            raise DestinationError(
                f"destination {self.name}: table {table} lacks {expected - count} of {expected} rows "
                f"the source {done}: the destination lost rows; rebaseline it"
            )

    def _stage(self, table: TableRef, names: list[str], data: pa.Table) -> sql.Identifier:
        """A new temporary table (dropped at commit) of ``names`` typed as in ``table``, holding
        ``data``."""
        staged = self._new_stage(table, names)
        self._copy(staged, names, data)
        return staged

    def _new_stage(
        self,
        table: TableRef,
        names: list[str],
        *,
        extra: sql.Composable | None = None,
        loose: Sequence[str] = (),
    ) -> sql.Identifier:
        """A new empty temporary table (dropped at commit) of ``names`` typed as in ``table``
        (the ``loose`` ones as their domain's base type), after an ``extra`` column (SQL
        ``<value> AS <name>``) if given."""
        self._staged += 1
        staged = sql.Identifier(f"pgsync_stage_{self._staged}")
        selected = sql.SQL(", ").join(
            sql.SQL("CASE WHEN false THEN {0} END AS {0}").format(sql.Identifier(n))
            if n in loose
            else sql.Identifier(n)
            for n in names
        )
        if extra is not None:
            selected = sql.SQL("{}, {}").format(extra, selected)
        self._conn.execute(
            sql.SQL("CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
                staged, selected, table.identifier
            )
        )
        return staged

    def _copy(self, target: sql.Composable, names: list[str], data: pa.Table) -> None:
        """``data`` (PostgreSQL text) into the ``names`` columns of ``target`` with COPY; the
        server parses the values."""
        self._copy_csv(target, names, copy_text(data))

    def _copy_csv(self, target: sql.Composable, names: list[str], data: bytes | memoryview) -> None:
        """CSV rows (``copy_text``) into the ``names`` columns of ``target`` with COPY."""
        with self._conn.cursor().copy(
            sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
                target, sql.SQL(", ").join(map(sql.Identifier, names))
            )
        ) as copy:
            copy.write(data)

    # ---- keyed tables: net effect in bulk

    def _apply_step(self, table: TableRef, columns: Sequence[ColumnInfo], step: NetStep | Truncate) -> None:
        if isinstance(step, Truncate):
            self._conn.execute(sql.SQL("TRUNCATE {}").format(table.identifier))
            return
        keys = key_columns(columns)
        present = list(step.present())
        for key, state in present:  # before the deletes: the old rows still hold the values
            if state.carry_from is not None:
                self._carry(table, columns, key, state)
        if step.deletes:
            self._delete(table, columns, keys, step.deletes)
        whole = [s.values for _, s in present if not s.unchanged]
        if whole:
            self._upsert(table, columns, keys, whole)
        partial: dict[frozenset[str], list[Values]] = {}
        for _, state in present:
            if state.unchanged:
                partial.setdefault(state.unchanged, []).append(state.values)
        for unchanged, rows in partial.items():
            self._update(table, columns, keys, unchanged, rows)

    def _carry(self, table: TableRef, columns: Sequence[ColumnInfo], key: KeyValues, state: Present) -> None:
        """Fill ``state``'s unchanged columns from the destination's row at ``carry_from``."""
        assert state.carry_from is not None
        keys = key_columns(columns)
        wanted = sorted(state.unchanged)
        row = self._conn.execute(
            sql.SQL("SELECT {} FROM {} WHERE {}").format(
                sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in wanted),
                table.identifier,
                self._key_match(table, columns, keys),
            ),
            list(state.carry_from),
        ).fetchone()
        if row is None:
            raise DestinationError(
                f"destination {self.name}: table {table} has no row with key {state.carry_from}, whose "
                f"unchanged values the row with key {key} keeps: the destination lost rows; rebaseline it"
            )
        state.values.update(zip(wanted, row, strict=True))
        state.unchanged = frozenset()
        state.carry_from = None

    def _delete(
        self, table: TableRef, columns: Sequence[ColumnInfo], keys: list[str], rows: list[KeyValues]
    ) -> None:
        self._conn.execute(
            sql.SQL("DELETE FROM {} WHERE ({}) IN (SELECT {} FROM {})").format(
                table.identifier,
                sql.SQL(", ").join(map(sql.Identifier, keys)),
                self._casts(table, columns, keys),
                _unnest(len(keys)),
            ),
            [[row[i] for row in rows] for i in range(len(keys))],
        )

    def _upsert(
        self, table: TableRef, columns: Sequence[ColumnInfo], keys: list[str], rows: list[Values]
    ) -> None:
        names = [c.name for c in columns]
        others = [n for n in names if n not in keys]
        self._conn.execute(
            sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) DO UPDATE SET {}").format(
                table.identifier,
                sql.SQL(", ").join(map(sql.Identifier, names)),
                self._casts(table, columns, names),
                _unnest(len(names)),
                sql.SQL(", ").join(map(sql.Identifier, keys)),
                sql.SQL(", ").join(
                    sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(n), sql.Identifier(n)) for n in others
                ),
            ),
            [[row[n] for row in rows] for n in names],
        )

    def _update(
        self,
        table: TableRef,
        columns: Sequence[ColumnInfo],
        keys: list[str],
        unchanged: frozenset[str],
        rows: list[Values],
    ) -> None:
        """Update rows in place, leaving the ``unchanged`` columns as the destination has them."""
        names = [c.name for c in columns if c.name not in unchanged]
        others = [n for n in names if n not in keys]
        if others:
            count = self._conn.execute(
                sql.SQL("UPDATE {} AS t SET {} FROM (SELECT {} FROM {}) AS v WHERE {}").format(
                    table.identifier,
                    sql.SQL(", ").join(
                        sql.SQL("{} = v.{}").format(sql.Identifier(n), sql.Identifier(f"c{names.index(n)}"))
                        for n in others
                    ),
                    self._casts(table, columns, names, aliases=True),
                    _unnest(len(names)),
                    sql.SQL(" AND ").join(
                        sql.SQL("t.{} = v.{}").format(sql.Identifier(k), sql.Identifier(f"c{names.index(k)}"))
                        for k in keys
                    ),
                ),
                [[row[n] for row in rows] for n in names],
            ).rowcount
        else:
            count = self._conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE ({}) IN (SELECT {} FROM {})").format(
                    table.identifier,
                    sql.SQL(", ").join(map(sql.Identifier, keys)),
                    self._casts(table, columns, keys),
                    _unnest(len(keys)),
                ),
                [[row[k] for row in rows] for k in keys],
            ).fetchone()[0]  # type: ignore[index]
        if count != len(rows):
            raise DestinationError(
                f"destination {self.name}: table {table} lacks {len(rows) - count} of {len(rows)} rows "
                "that the source updated keeping unchanged TOAST values: the destination lost rows; "
                "rebaseline it"
            )

    # ---- helpers

    @property
    def _watermarks(self) -> sql.Composed:
        return sql.SQL("{}.watermarks").format(sql.Identifier(self.control_schema))

    def _ensure_watermarks(self) -> None:
        """The control tables; a NULL ``commit_lsn`` is a baselined table with no change applied
        yet, ``lineage`` the baseline its table holds (None: made by ``open_table``)."""
        with self._conn.transaction():
            lock_ddl(self._conn)
            self._conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.control_schema))
            )
            self._conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (destination text, table_key text, commit_lsn numeric(20),"
                    " seq bigint, lineage text, PRIMARY KEY (destination, table_key))"
                ).format(self._watermarks)
            )
            postgres_baseline.ensure_parts_table(self._conn, self.control_schema)
            old = self._conn.execute(
                "SELECT NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = %s::regclass"
                " AND attname = 'lineage' AND NOT attisdropped)",
                (self._watermarks.as_string(self._conn),),
            ).fetchone()
            if old and old[0]:  # made by an earlier version: altered once (it locks the table)
                self._conn.execute(
                    sql.SQL(
                        "ALTER TABLE {} ADD COLUMN IF NOT EXISTS lineage text,"
                        " ALTER COLUMN commit_lsn DROP NOT NULL, ALTER COLUMN seq DROP NOT NULL"
                    ).format(self._watermarks)
                )

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

    def _casts(
        self, table: TableRef, columns: Sequence[ColumnInfo], names: list[str], *, aliases: bool = False
    ) -> sql.Composed:
        """``c0::type0, c1::type1, ...`` over the unnest's columns, for ``names`` in order."""
        by_name = {c.name: c for c in columns}
        items = []
        for i, name in enumerate(names):
            cast = sql.SQL("{}::{}").format(
                sql.Identifier(f"c{i}"), sql.SQL(self._type(table, by_name[name]))
            )
            items.append(sql.SQL("{} AS {}").format(cast, sql.Identifier(f"c{i}")) if aliases else cast)
        return sql.SQL(", ").join(items)

    def _key_match(self, table: TableRef, columns: Sequence[ColumnInfo], keys: list[str]) -> sql.Composed:
        by_name = {c.name: c for c in columns}
        return sql.SQL(" AND ").join(
            sql.SQL("{} = %s::{}").format(sql.Identifier(k), sql.SQL(self._type(table, by_name[k])))
            for k in keys
        )


def _unavailable(name: str, doing: str, exc: psycopg.OperationalError) -> DestinationUnavailableError:
    """A lost or refused connection: nothing was applied, and a later run may succeed."""
    detail = (exc.diag.message_primary if hasattr(exc, "diag") else None) or str(exc).strip()
    return DestinationUnavailableError(
        f"destination {name} could not be reached while {doing}: {detail}; nothing of it was applied: "
        "check that the server runs and accepts the connection; the next run goes on from the watermark"
    )


def _join(keys: list[str]) -> sql.Composed:
    """``t.k1 = s.k1 AND ...``: the target ``t`` and a staged table ``s`` on the key."""
    return sql.SQL(" AND ").join(sql.SQL("t.{0} = s.{0}").format(sql.Identifier(k)) for k in keys)


def _unnest(width: int) -> sql.Composed:
    """``unnest(%s::text[], ...) AS u(c0, c1, ...)``: rows from one text array per column."""
    return sql.SQL("unnest({}) AS u({})").format(
        sql.SQL(", ").join(sql.SQL("%s::text[]") for _ in range(width)),
        sql.SQL(", ").join(sql.Identifier(f"c{i}") for i in range(width)),
    )


def _changed_csv(names: list[str], keys: list[str], net: BulkNet) -> memoryview:
    """The rows ``_merge`` stages: ``D`` and the key of each deleted row (NULL elsewhere),
    ``U`` and each updated row."""
    deletes = net.deletes
    for name in names:
        if name not in keys:
            deletes = deletes.append_column(name, pa.nulls(deletes.num_rows, pa.string()))
    tagged = [
        part.select(names).add_column(0, "op", pa.repeat(pa.scalar(op, pa.string()), part.num_rows))
        for op, part in (("D", deletes), ("U", net.updates))
        if part.num_rows
    ]
    if not tagged:
        return memoryview(b"")
    return copy_text(pa.concat_tables([t.cast(tagged[-1].schema) for t in tagged]))


def _free_name(names: list[str], base: str) -> str:
    """A column name like ``pgsync_<base>`` that is none of ``names``."""
    name = f"pgsync_{base}"
    while name in names:
        name += "_"
    return name
