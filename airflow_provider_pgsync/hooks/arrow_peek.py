"""The peek of a slot as SQL, and capture's fast read of it through ADBC as Arrow.

Why ADBC for capture: psycopg makes a Python ``bytes`` object per fetched row, about 1 s of
client time per 300,000 changes on the 2-core machine, on top of the server's decoding. The
PostgreSQL ADBC driver (already used by the baseline) reads the same query as a binary COPY
into Arrow buffers in C++: each batch's payloads arrive as one buffer and its offsets, which
is what the columnar decoder takes, with no Python object per change (measured: about a third
of psycopg's client time for the same peek).

The session is set up as psycopg's peek is: pgoutput's values in pgsync's text output, the idle
timeouts off, the caller's statement timeout, all in one transaction that is rolled back (a peek
changes nothing). The password reaches the driver in memory, never a command line or a log.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import adbc_driver_manager
import adbc_driver_postgresql.dbapi as adbc
import pyarrow as pa
from psycopg import sql
from psycopg.conninfo import make_conninfo

from airflow_provider_pgsync.errors import ConfigError, SlotError, SourceUnavailableError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import validate_publication_name, validate_slot_name
from airflow_provider_pgsync.source.sessions import hold_open_statements, statement_timeout_statement
from airflow_provider_pgsync.source.text_output import TEXT_OUTPUT

if TYPE_CHECKING:
    from airflow_provider_pgsync.hooks.replication import PgReplicationHook

_UNDEFINED_OBJECT, _OBJECT_IN_USE = "42704", "55006"


def peek_query(
    columns: str,
    slot_name: str,
    publication_names: Sequence[str],
    upto_lsn: LSN | None,
    upto_nchanges: int | None,
    protocol_version: int,
    messages: bool,
) -> sql.Composed:
    """``SELECT <columns> FROM pg_logical_slot_peek_binary_changes(...)`` with every value a
    literal; ``columns`` is pgsync's own SQL, never user input."""
    name = validate_slot_name(slot_name)
    pubs = ",".join(validate_publication_name(p) for p in publication_names)
    if upto_nchanges is not None and upto_nchanges <= 0:
        raise ConfigError(f"upto_nchanges must be positive, not {upto_nchanges}")
    if protocol_version not in (1, 2):
        raise ConfigError(f"protocol_version must be 1 or 2, not {protocol_version}")
    lsn = sql.SQL("NULL") if upto_lsn is None else sql.SQL("{}::pg_lsn").format(sql.Literal(str(upto_lsn)))
    return sql.SQL(
        "SELECT {} FROM pg_logical_slot_peek_binary_changes({}, {}, {}::int,"
        " 'proto_version', {}, 'publication_names', {}, 'messages', {})"
    ).format(
        sql.SQL(columns),
        sql.Literal(name),
        lsn,
        sql.Literal(upto_nchanges),
        sql.Literal(str(protocol_version)),
        sql.Literal(pubs),
        sql.Literal(str(messages).lower()),
    )


def slot_error(slot_name: str, sqlstate: str | None) -> SlotError | None:
    """The error of a peek that failed with ``sqlstate``, when the slot is the cause."""
    if sqlstate == _UNDEFINED_OBJECT:
        return SlotError(
            f"replication slot {slot_name} does not exist (dropped while capture started): nothing was "
            "captured; run the pipeline's setup DAG: it creates the slot again, adopts it and sends every "
            "table of every destination back to Init, then triggers their rebaseline (the changes from "
            "the time the slot was missing reach the destinations only through it)"
        )
    if sqlstate == _OBJECT_IN_USE:
        return SlotError(
            f"replication slot {slot_name} is active in another session (pg_replication_slots.active_pid "
            "names it): only one reader at a time; nothing was captured: if it is not pgsync's, stop "
            "that consumer, then run capture again"
        )
    return None


@contextmanager
def peek_arrays(
    hook: PgReplicationHook,
    slot_name: str,
    publication_names: Sequence[str],
    *,
    upto_lsn: LSN | None,
    upto_nchanges: int | None,
    batch_bytes: int,
    statement_timeout_ms: int = 0,
) -> Iterator[Iterator[pa.Array]]:
    """The pgoutput payloads of a peek (protocol 2, with messages) as binary Arrow arrays of
    about ``batch_bytes`` each, read through ADBC while the caller consumes them."""
    query = peek_query("data", slot_name, publication_names, upto_lsn, upto_nchanges, 2, True)
    # psycopg checks the connection (TLS extras, keepalives, the reason when it fails) and
    # renders the statements; the driver then opens a session with the same parameters
    with hook.connect() as conn:
        statements = [
            "BEGIN",
            *TEXT_OUTPUT,
            *(s.as_string(conn) for s in hold_open_statements(conn.info.server_version, local=True)),
            statement_timeout_statement(statement_timeout_ms, local=True).as_string(conn),
        ]
        text = query.as_string(conn)
        parameters: dict[str, Any] = conn.info.get_parameters()
        if conn.info.password:
            parameters["password"] = conn.info.password
    try:
        connection = adbc.connect(make_conninfo(**parameters), autocommit=True)
    except adbc_driver_manager.Error as exc:
        # the driver's message may quote the connection string: only its SQLSTATE is kept
        raise SourceUnavailableError(
            f"cannot open the peek's session on the source (Airflow connection {hook.postgres_conn_id!r}, "
            f"SQLSTATE {getattr(exc, 'sqlstate', None)}): check that the server runs and accepts connections"
        ) from None
    try:
        with connection.cursor() as cursor:
            cursor.adbc_statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": str(batch_bytes)})
            for statement in statements:
                cursor.execute(statement)
            with _slot_errors(slot_name):
                cursor.execute(text)
                reader = cursor.fetch_record_batch()
            yield _arrays(reader, slot_name)
            cursor.execute("ROLLBACK")
    finally:
        connection.close()


def _arrays(reader: pa.RecordBatchReader, slot_name: str) -> Iterator[pa.Array]:
    # the server may report a slot problem with the first rows rather than at the statement
    with _slot_errors(slot_name):
        for batch in reader:
            yield batch.column(0)


@contextmanager
def _slot_errors(slot_name: str) -> Iterator[None]:
    try:
        yield
    except adbc_driver_manager.Error as exc:
        problem = slot_error(slot_name, getattr(exc, "sqlstate", None))
        if problem is not None:
            raise problem from exc
        raise
