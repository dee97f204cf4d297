"""PgReplicationHook: the source side of logical replication, on top of PostgresHook.

All I/O with the source lives here: fitness checks, the publication, the pgoutput slot,
bounded peeks and advances. Decisions are made by pure modules (``source.preflight``,
``source.publication``); identifiers only reach SQL through ``psycopg.sql``.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
from airflow.providers.postgres.hooks.postgres import PostgresHook
from psycopg import sql
from psycopg.rows import tuple_row

from airflow_provider_pgsync.errors import (
    ApplyBusyError,
    BaselineError,
    CaptureBusyError,
    ConfigError,
    LockLostError,
    PreflightError,
    SlotError,
    SourceUnavailableError,
)
from airflow_provider_pgsync.hooks.adapters import register_lsn
from airflow_provider_pgsync.hooks.arrow_peek import peek_arrays, peek_query, slot_error
from airflow_provider_pgsync.hooks.catalog import (
    desired_state,
    names_by_oid,
    oids_by_name,
    publication_state,
    table_facts,
)
from airflow_provider_pgsync.hooks.run_locks import (
    APPLY_LOCK_CLASS,
    BASELINE_LOCK_CLASS,
    CAPTURE_LOCK_CLASS,
    PEEK_PROBES,
    HeldLock,
    baseline_lock_key,
    lock_is_held,
    session_lock,
)
from airflow_provider_pgsync.hooks.snapshot import BaselineSnapshot, export_snapshot
from airflow_provider_pgsync.hooks.targets import Target, check_ssl_extras, make_target, tls_remedy
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef, validate_publication_name, validate_slot_name
from airflow_provider_pgsync.source.preflight import SourceFacts, find_problems
from airflow_provider_pgsync.source.publication import PublishedTable, published_tables, table_list_sql
from airflow_provider_pgsync.source.sessions import hold_open, set_statement_timeout, with_keepalives
from airflow_provider_pgsync.source.text_output import TEXT_OUTPUT
from airflow_provider_pgsync.state.followed import FollowedTable, follow
from airflow_provider_pgsync.state.model import PipelineState

# Every operation; changes of partitions arrive under the partitioned table configured.
_PUBLICATION_OPTIONS = "publish = 'insert, update, delete, truncate', publish_via_partition_root = true"
PeekedRow = tuple[LSN, int, bytes]
"""One row of a peek: the LSN PostgreSQL reports for it, the transaction id, the pgoutput payload."""


@dataclass(frozen=True)
class SlotInfo:
    """A replication slot as ``pg_replication_slots`` shows it, with the WAL it retains."""

    name: str
    plugin: str | None
    slot_type: str
    database: str | None
    active: bool
    wal_status: str | None
    restart_lsn: LSN | None
    confirmed_flush_lsn: LSN | None
    retained_bytes: int | None

    @property
    def lost(self) -> bool:
        return self.wal_status == "lost"


@dataclass(frozen=True)
class SlotCreation:
    """The outcome of ``ensure_slot``: whether it was created now, and where it starts."""

    name: str
    created: bool
    consistent_point: LSN | None


@dataclass(frozen=True)
class WalPositions:
    """The server's current WAL flush and insert positions, and ``xmax`` of its current
    snapshot (``pg_snapshot_xmax(pg_current_snapshot())``, a 64-bit xid: epoch << 32 | xid).

    Read in one statement: every transaction committed at or before ``flush`` has an xid
    below about ``xmax`` and less than 2^31 from it, so capture widens pgoutput's 32-bit
    xids of a peek bounded by ``flush`` against it.
    """

    flush: LSN
    insert: LSN
    xmax: int


class PgReplicationHook(PostgresHook):
    """Logical replication from a PostgreSQL source through a pgoutput slot.

    :param postgres_conn_id: the Airflow connection of the source database.
    """

    hook_name = "PostgreSQL logical replication (pgsync)"

    # ---- connections -------------------------------------------------------------------

    def connect(self, *, autocommit: bool = True) -> psycopg.Connection[Any]:
        """A new psycopg 3 connection to the source with pg_lsn mapped to ``LSN``."""
        check_ssl_extras(self._conn_id, self.connection.extra_dejson)
        try:
            conn = self.get_conn()
        except psycopg.OperationalError as exc:
            raise SourceUnavailableError(self._connect_failure(exc)) from exc
        if not isinstance(conn, psycopg.Connection):
            raise ConfigError(
                "PgReplicationHook needs psycopg 3 (PostgresHook falls back to psycopg2 only when "
                "SQLAlchemy 2 is missing): install 'sqlalchemy>=2' and 'psycopg[binary]>=3.2'"
            )
        conn.row_factory = tuple_row
        conn.autocommit = autocommit
        register_lsn(conn.adapters)
        return conn

    def _create_connection(self, conn_args: dict[str, Any]) -> Any:
        # PostgresHook.get_conn passes the connection's extras here as libpq parameters: TCP
        # keepalives are added where the extras set none (source/sessions.py says why)
        return super()._create_connection(with_keepalives(conn_args))

    @property
    def _conn_id(self) -> str:
        return str(getattr(self, self.conn_name_attr))

    def target(self) -> Target:
        """The connection's host, port, database, login and TLS extras, checked (ConfigError)."""
        c = self.connection
        return make_target(
            self._conn_id,
            host=c.host,
            port=c.port,
            database=self.database or c.schema,
            user=c.login,
            extras=c.extra_dejson,
        )

    def _describe_target(self) -> str:
        try:
            return self.target().describe()
        except ConfigError:
            c = self.connection
            return repr(f"{c.host}:{c.port or 5432}/{self.database or c.schema}")[:200]

    def _connect_failure(self, exc: Exception) -> str:
        """The message of a failed connection: the target, the server's or libpq's reason, the remedy."""
        reason = str(exc).strip()
        remedy = tls_remedy(reason) or "check that the server runs and the connection is right"
        return (
            f"cannot connect to the source {self._describe_target()} (Airflow connection "
            f"{self._conn_id!r}): {reason}; {remedy}"
        )

    def jdbc_target(self) -> tuple[str, str, str | None]:
        """``(JDBC URL, user, password)`` of the source for Spark; the URL holds no secret.

        The connection's ``sslmode``, ``sslrootcert``, ``sslcert`` and ``sslkey`` extras carry
        over, percent-encoded; every field is checked first (``hooks.targets``).
        """
        target = self.target()
        return target.jdbc_url(), target.user, self.connection.password or None

    def libpq_target(self) -> str:
        """The source as a libpq connection string without the password (for Spark tasks), with
        the connection's TLS extras; every field is checked first (``hooks.targets``)."""
        return self.target().conninfo()

    @contextmanager
    def baseline_snapshot(
        self, table: TableRef
    ) -> Iterator[tuple[BaselineSnapshot, psycopg.Connection[Any]]]:
        """Export a snapshot for a baseline of ``table`` and hold it open until the block ends.

        Yields the snapshot and its connection (in the snapshot's transaction, for reading the
        catalog); the transaction is rolled back and the connection closed whatever happens.

        The session stays idle in its transaction while Spark copies the table, and reads whole
        tables for custom destinations: before the transaction begins it lifts the server's idle
        and statement timeouts for itself (session-level SETs in autocommit mode, so no
        statement of the snapshot's transaction precedes its LOCK and export).
        """
        conn = self.connect()
        try:
            hold_open(conn)
            set_statement_timeout(conn, 0)
            yield export_snapshot(conn, table), conn
        finally:
            try:
                conn.rollback()
            finally:
                conn.close()

    # ---- tables followed by relation OID -----------------------------------------------

    def follow_tables(self, tables: Iterable[TableRef], state: PipelineState) -> list[FollowedTable]:
        """Each of ``tables`` (as a config names them) matched to the table of ``state`` it is,
        with its name in the source now (``state.followed.follow``)."""
        wanted = list(tables)
        oids = sorted({ts.relation_id for ts in state.tables.values() if ts.relation_id is not None})
        with self.connect() as conn:
            return follow(state, wanted, names_by_oid(conn, oids), oids_by_name(conn, wanted))

    def source_specs(self, tables: Iterable[Any], state: PipelineState | None) -> tuple[PublishedTable, ...]:
        """Table entries (``published_tables``) with each table under its name in the source now
        (a table renamed in the source is followed by the relation OID ``state`` records)."""
        specs = published_tables(tables)
        if state is None:
            return specs
        followed = self.follow_tables((s.table for s in specs), state)
        return tuple(dataclasses.replace(s, table=f.source) for s, f in zip(specs, followed, strict=True))

    # ---- preflight ---------------------------------------------------------------------

    def source_facts(self, *, slot_name: str, tables: Iterable[Any], publication_name: str) -> SourceFacts:
        """Read what ``source.preflight`` needs to judge the source."""
        slot_name = validate_slot_name(slot_name)
        publication_name = validate_publication_name(publication_name)
        specs = published_tables(tables)
        with self.connect() as conn:
            row = conn.execute(
                """
                SELECT current_database(), current_user,
                       current_setting('server_version_num')::int, current_setting('wal_level'),
                       r.rolsuper, r.rolreplication,
                       has_database_privilege(current_database(), 'CREATE'),
                       current_setting('max_replication_slots')::int,
                       (SELECT count(*) FROM pg_replication_slots)::int
                FROM pg_roles r WHERE r.rolname = current_user
                """
            ).fetchone()
            assert row is not None
            slot = conn.execute(
                "SELECT plugin, database FROM pg_replication_slots WHERE slot_name = %s", (slot_name,)
            ).fetchone()
            pub = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication_name,))
            publication_exists = pub.fetchone() is not None
            tables_facts = tuple(table_facts(conn, spec.table, publication_name) for spec in specs)
        return SourceFacts(
            database=row[0],
            role=row[1],
            server_version_num=row[2],
            wal_level=row[3],
            role_superuser=row[4],
            role_replication=row[5],
            can_create_in_database=row[6],
            max_replication_slots=row[7],
            slots_in_use=row[8],
            slot_name=slot_name,
            slot_plugin=slot[0] if slot else None,
            slot_database=slot[1] if slot else None,
            publication_exists=publication_exists,
            tables=tables_facts,
        )

    def preflight(self, *, slot_name: str, tables: Iterable[Any], publication_name: str) -> SourceFacts:
        """Check that the source is fit; raise PreflightError listing every problem with its fix."""
        facts = self.source_facts(slot_name=slot_name, tables=tables, publication_name=publication_name)
        problems = find_problems(facts)
        if problems:
            raise PreflightError(problems)
        self.log.info(
            "preflight passed: PostgreSQL %s, wal_level=%s, role %s, %d table(s)",
            facts.server_version_num,
            facts.wal_level,
            facts.role,
            len(facts.tables),
        )
        return facts

    # ---- publication -------------------------------------------------------------------

    def ensure_publication(self, publication_name: str, tables: Iterable[Any]) -> str:
        """Create the publication, or make its table list match; returns created/altered/unchanged."""
        name = validate_publication_name(publication_name)
        wanted = published_tables(tables)
        ident = sql.Identifier(name)
        with self.connect() as conn:
            version = conn.info.server_version
            if version < 150000 and any(t.columns or t.row_filter for t in wanted):
                raise ConfigError(
                    f"publication {name}: column lists and row filters need PostgreSQL 15 or newer "
                    f"(the source runs {version // 10000}); remove them from the table entries"
                )
            current = publication_state(conn, name, version)
            try:
                if current is None:
                    try:
                        conn.execute(
                            sql.SQL("CREATE PUBLICATION {} FOR {} WITH ({})").format(
                                ident, table_list_sql(wanted), sql.SQL(_PUBLICATION_OPTIONS)
                            )
                        )
                        self.log.info("created publication %s for %d table(s)", name, len(wanted))
                        return "created"
                    except psycopg.errors.DuplicateObject:
                        current = publication_state(conn, name, version)
                        assert current is not None
                if current == desired_state(wanted):
                    self.log.info("publication %s already carries the %d table(s)", name, len(wanted))
                    return "unchanged"
                with conn.transaction():
                    conn.execute(sql.SQL("ALTER PUBLICATION {} SET {}").format(ident, table_list_sql(wanted)))
                    conn.execute(
                        sql.SQL("ALTER PUBLICATION {} SET ({})").format(ident, sql.SQL(_PUBLICATION_OPTIONS))
                    )
            except psycopg.errors.UndefinedTable as exc:
                raise ConfigError(
                    f"publication {name}: {str(exc).strip()}; create the table or remove it from the "
                    "pipeline (PgPreflightOperator lists every problem at once)"
                ) from exc
            self.log.info("altered publication %s to carry %d table(s)", name, len(wanted))
            return "altered"

    def drop_publication(self, publication_name: str) -> bool:
        """Drop the publication if it exists; returns whether it existed."""
        name = validate_publication_name(publication_name)
        with self.connect() as conn:
            existed = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(name)))
        return existed is not None

    # ---- slot --------------------------------------------------------------------------

    def slot_info(self, slot_name: str) -> SlotInfo | None:
        """The slot as the server sees it, or None if there is none of that name."""
        name = validate_slot_name(slot_name)
        with self.connect() as conn:
            row = conn.execute(
                """
                SELECT slot_name, plugin, slot_type, database, active, wal_status,
                       restart_lsn, confirmed_flush_lsn,
                       CASE WHEN pg_is_in_recovery() OR restart_lsn IS NULL THEN NULL
                            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint END
                FROM pg_replication_slots WHERE slot_name = %s
                """,
                (name,),
            ).fetchone()
        return SlotInfo(*row) if row else None

    def ensure_slot(self, slot_name: str) -> SlotCreation:
        """Create a pgoutput slot in this database unless it exists already (idempotent)."""
        name = validate_slot_name(slot_name)
        existing = self.slot_info(name)
        if existing is None:
            with self.connect() as conn:
                self._warn_of_prepared(conn, name)
                try:
                    row = conn.execute(
                        "SELECT lsn FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (name,)
                    ).fetchone()
                    assert row is not None
                    self.log.info("created replication slot %s at %s", name, row[0])
                    return SlotCreation(name, True, row[0])
                except psycopg.errors.DuplicateObject:
                    pass  # created concurrently: check it like an existing one
            existing = self.slot_info(name)
            assert existing is not None
        database = self.database or self.connection.schema
        if existing.plugin != "pgoutput" or (database and existing.database != database):
            raise SlotError(
                f"replication slot {name} exists with plugin {existing.plugin!r} in database "
                f"{existing.database!r}, not a pgoutput slot of this database: choose another slot "
                f"name or drop it (SELECT pg_drop_replication_slot('{name}');) if nothing uses it"
            )
        self.log.info("replication slot %s exists (confirmed %s)", name, existing.confirmed_flush_lsn)
        return SlotCreation(name, False, None)

    def _warn_of_prepared(self, conn: psycopg.Connection[Any], slot: str) -> None:
        """Log the prepared transactions a new slot's creation waits for: PostgreSQL creates a
        logical slot only once every transaction running when it began has ended, prepared ones
        (of any database) included, so a forgotten one makes it wait without end."""
        rows = conn.execute(
            "SELECT gid, database::text, prepared::text FROM pg_prepared_xacts ORDER BY prepared LIMIT 10"
        ).fetchall()
        if rows:
            self.log.warning(
                "creating replication slot %s waits until these prepared transactions are committed or "
                "rolled back (COMMIT PREPARED or ROLLBACK PREPARED '<gid>', in their database): %s",
                slot,
                "; ".join(f"{gid!r} in database {db} since {at}" for gid, db, at in rows),
            )

    def drop_slot(self, slot_name: str) -> bool:
        """Drop the slot if it exists; returns whether it existed. An active slot is an error."""
        name = validate_slot_name(slot_name)
        with self.connect() as conn:
            try:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
            except psycopg.errors.UndefinedObject:
                return False
            except psycopg.errors.ObjectInUse as exc:
                raise SlotError(
                    f"replication slot {name} is in use by another process: stop its consumer "
                    f"(see pg_replication_slots.active_pid) and drop it again"
                ) from exc
        self.log.info("dropped replication slot %s", name)
        return True

    # ---- peek and advance --------------------------------------------------------------

    def wal_positions(self) -> WalPositions:
        """The current WAL flush and insert LSNs and the current snapshot's 64-bit xmax."""
        with self.connect() as conn:
            row = conn.execute(
                "SELECT pg_current_wal_flush_lsn(), pg_current_wal_insert_lsn(),"
                " pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
            ).fetchone()
        assert row is not None  # a SELECT without FROM returns one row
        return WalPositions(flush=row[0], insert=row[1], xmax=int(row[2]))

    @contextmanager
    def peek(
        self,
        slot_name: str,
        publication_names: Sequence[str],
        *,
        upto_lsn: LSN | None,
        upto_nchanges: int | None,
        protocol_version: int = 2,
        messages: bool = True,
        fetch_size: int = 10_000,
        statement_timeout_ms: int = 0,
    ) -> Iterator[Iterator[PeekedRow]]:
        """Peek the slot without consuming it, bounded by ``upto_lsn`` and ``upto_nchanges``.

        Rows are fetched through a server-side cursor ``fetch_size`` at a time, so client
        memory stays bounded whatever the size of the peek. The server stops after the
        transaction in which the change limit is reached, so a peek holds whole
        transactions only. ``statement_timeout_ms`` bounds each statement of the peek (0: no limit;
        the first fetch decodes the whole peek on the server), whatever the server's defaults.
        """
        options = (upto_lsn, upto_nchanges, protocol_version, messages)
        columns = "lsn, xid::text::bigint, data"
        with self._peek_cursor(
            slot_name, publication_names, columns, *options, statement_timeout_ms=statement_timeout_ms
        ) as cur:
            cur.itersize = fetch_size
            yield iter(cur)

    def peek_arrays(
        self,
        slot_name: str,
        publication_names: Sequence[str],
        *,
        upto_lsn: LSN | None,
        upto_nchanges: int | None,
        batch_bytes: int,
        statement_timeout_ms: int = 0,
    ) -> AbstractContextManager[Iterator[pa.Array]]:
        """Capture's fast path: only the pgoutput payloads, as binary Arrow arrays of about
        ``batch_bytes`` each, read through ADBC (``hooks.arrow_peek`` says why)."""
        return peek_arrays(
            self,
            slot_name,
            publication_names,
            upto_lsn=upto_lsn,
            upto_nchanges=upto_nchanges,
            batch_bytes=batch_bytes,
            statement_timeout_ms=statement_timeout_ms,
        )

    @contextmanager
    def _peek_cursor(
        self,
        slot_name: str,
        publication_names: Sequence[str],
        columns: str,
        upto_lsn: LSN | None,
        upto_nchanges: int | None,
        protocol_version: int,
        messages: bool,
        *,
        statement_timeout_ms: int = 0,
    ) -> Iterator[psycopg.ServerCursor[Any]]:
        options = (upto_lsn, upto_nchanges, protocol_version, messages)
        query = peek_query(columns, slot_name, publication_names, *options)
        conn = self.connect(autocommit=False)
        try:
            for setting in TEXT_OUTPUT:  # pgoutput's values are this session's text output
                conn.execute(setting)
            # the transaction waits idle while the caller works on each fetch; the peek's
            # limit is the caller's, never a low database or role default
            hold_open(conn, local=True)
            set_statement_timeout(conn, statement_timeout_ms, local=True)
            cursor = conn.cursor(
                name=f"pgsync_peek_{uuid.uuid4().hex[:12]}",
                binary=True,
                row_factory=tuple_row,
            )
            cursor.execute(query)
            yield cursor
            cursor.close()
        except (psycopg.errors.UndefinedObject, psycopg.errors.ObjectInUse) as exc:
            raise slot_error(slot_name, exc.sqlstate) or exc from exc
        finally:
            conn.rollback()
            conn.close()

    @contextmanager
    def capture_lock(self, slot_name: str, holder: str) -> Iterator[HeldLock]:
        """Hold the session advisory lock of the slot's capture; fail fast if another run holds it
        (a sensor's or watcher's bounded peek holding it for a moment is waited for).

        ``holder`` is shown to a second run (as the session's application_name) so its error
        names the running one. The block gets the lock, whose ``ensure_held`` capture calls
        before each state write and slot advance.
        """
        name = validate_slot_name(slot_name)
        with session_lock(
            self.connect(),
            CAPTURE_LOCK_CLASS,
            name,
            holder,
            lambda other: CaptureBusyError(name, other),
            lambda why: LockLostError(
                f"capture of slot {name} lost its lock ({why}): it stopped before its next state "
                "write or slot advance, and nothing of this batch is lost (the next run peeks it "
                "again); run capture again, and if this repeats find what ends its session "
                "(pg_terminate_backend, a server restart, a proxy or firewall closing connections)"
            ),
            brief=PEEK_PROBES,
        ) as lock:
            yield lock

    @contextmanager
    def baseline_lock(self, pipeline: str, table: str, lineage: str, holder: str) -> Iterator[HeldLock]:
        """Hold the lock that tells a baseline of ``table`` under ``lineage`` runs (see
        ``baseline_running``); a second holder is refused (BaselineError)."""
        key = baseline_lock_key(pipeline, table, lineage)
        with session_lock(
            self.connect(),
            BASELINE_LOCK_CLASS,
            key,
            holder,
            lambda other: BaselineError(f"baseline {lineage} of {table} already runs in {other}"),
            lambda why: LockLostError(
                f"baseline {lineage} of {table} lost its lock ({why}); rebaseline {table}"
            ),
        ) as lock:
            yield lock

    def baseline_running(self, pipeline: str, table: str, lineage: str) -> bool:
        """Whether a baseline of ``table`` under ``lineage`` still runs (holds its lock); one
        that died (a killed task, a source that went down) does not."""
        with self.connect() as conn:
            return lock_is_held(conn, BASELINE_LOCK_CLASS, baseline_lock_key(pipeline, table, lineage))

    @contextmanager
    def apply_lock(self, pipeline: str, holder: str) -> Iterator[HeldLock]:
        """Hold the session advisory lock of the pipeline's apply; fail fast (ApplyBusyError
        naming the running one) if another run holds it."""
        with session_lock(
            self.connect(),
            APPLY_LOCK_CLASS,
            pipeline,
            holder,
            lambda other: ApplyBusyError(pipeline, other),
            lambda why: LockLostError(
                f"apply of pipeline {pipeline!r} lost its lock ({why}): it stopped before recording "
                "its decisions in the state (a PostgreSQL destination's data and watermark are "
                "consistent; the next run goes on from its watermark); run apply again"
            ),
        ) as lock:
            yield lock

    def advance_slot(self, slot_name: str, to_lsn: LSN, *, statement_timeout_ms: int = 0) -> LSN:
        """Move the slot forward to ``to_lsn``; never backwards, and a repeat is a no-op.

        Returns the slot's confirmed position afterwards. Advancing a logical slot decodes the
        WAL it passes, as long as a peek of it: ``statement_timeout_ms`` bounds it (0: no limit),
        whatever the server's defaults.
        """
        name = validate_slot_name(slot_name)
        info = self.slot_info(name)
        if info is None:
            raise SlotError(f"replication slot {name} does not exist: it cannot be advanced")
        if info.confirmed_flush_lsn is not None and to_lsn <= info.confirmed_flush_lsn:
            return info.confirmed_flush_lsn
        with self.connect() as conn:
            set_statement_timeout(conn, statement_timeout_ms)
            try:
                row = conn.execute(
                    "SELECT end_lsn FROM pg_replication_slot_advance(%s, %s)", (name, to_lsn)
                ).fetchone()
            except psycopg.errors.ObjectNotInPrerequisiteState:
                # moved past to_lsn concurrently: that is where we wanted to be, or further
                row = conn.execute(
                    "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (name,)
                ).fetchone()
        assert row is not None
        return row[0]
