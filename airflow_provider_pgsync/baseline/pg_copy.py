"""A baseline partition into PostgreSQL destinations: the source's text ``COPY`` streamed
into each destination's staging table by ``COPY FROM``, in a Spark task (no Spark imports here).

No Spark row or JVM object is made: each chunk the source sends is written as it is to every
destination. Both sides run with the same text settings (``TEXT_OUTPUT``: UTC, ISO dates,
postgres intervals, shortest exact floats, hex bytea, UTF8), so every value's text output
parses back to the same value; a column the destination keeps as ``text`` (a type it cannot
have, e.g. of an extension it lacks) gets the source's text output, as pgoutput sends it.

Exactly once: a task copies its partition in one transaction per destination, and the first
statement of that transaction records the partition in the destination's parts table
(``destinations/postgres_baseline.py``) with ``ON CONFLICT DO NOTHING``. A retried task (a
lost executor, Spark's ``spark.task.maxFailures``) whose earlier attempt committed finds its
partition there and copies nothing; one whose earlier attempt did not commit left nothing
(its transaction rolled back); two attempts at once (speculation) wait on that row, and the
second finds it done. So no row is ever copied twice, without a second pass over the rows.

Each destination on its own: one that cannot be reached or refuses the rows (a value its type
or a constraint rejects, its staging table gone) is dropped from the partition's copy (its
transaction rolled back: it holds nothing of the partition and the partition is not recorded
there) and reported in the task's result (``PartitionCopy.failed``); the others get every row
of the one pass. A failure on the source's side (the partition cannot be read) fails the task,
and so every destination's copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.sessions import hold_open, set_statement_timeout
from airflow_provider_pgsync.source.text_output import TEXT_OUTPUT


@dataclass(frozen=True)
class Sink:
    """One destination's staging table: ``conninfo`` (no password: libpq reads it from the password
    file the conninfo names, ``baseline/passfile.py``), the staging table and
    its parts table (qualified SQL text) and the columns copied, in the source query's order."""

    name: str
    conninfo: str
    staging: str
    parts: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class PartitionCopy:
    """What a task copied: the rows read from the source (0 when no sink needed the partition)
    and, per sink that failed, why (``refusal``); the other sinks committed the rows."""

    rows: int
    failed: dict[str, str] = field(default_factory=dict)


def copy_partition(
    source_conninfo: str, session: Sequence[str], query: str, sinks: Sequence[Sink], part: int
) -> PartitionCopy:
    """Run ``session`` on the source (it opens the transaction and joins the snapshot), then
    copy the rows of ``query`` into every sink that does not have partition ``part`` yet, each
    in one transaction. A sink that fails is left out (rolled back) and named in the result; an
    error reading the source raises."""
    failed: dict[str, str] = {}
    outs: list[_Out] = []
    try:
        for sink in sinks:
            try:
                out = _claim(sink, part)
            except Exception as exc:
                failed[sink.name] = refusal(exc)
                continue
            if out is not None:
                outs.append(out)
        if not outs:
            return PartitionCopy(0, failed)
        rows = _stream(source_conninfo, session, query, outs)
        for out in outs:
            if out.error:
                failed[out.sink.name] = out.error
                continue
            try:
                out.conn.execute(
                    sql.SQL("UPDATE {} SET rows = %s WHERE staging = %s AND part = %s").format(
                        TableRef.parse(out.sink.parts).identifier
                    ),
                    (rows, out.sink.staging, part),
                )
                out.conn.commit()
            except Exception as exc:
                failed[out.sink.name] = refusal(exc)
        return PartitionCopy(rows, failed)
    finally:
        for out in outs:
            out.conn.close()


class _Out:
    """One sink's side of a partition's copy: its connection (a transaction that claimed the
    partition), its ``COPY FROM`` while the rows stream, and why it failed ('' while it has not)."""

    __slots__ = ("conn", "copy", "copying", "cursor", "error", "sink")

    copy: psycopg.Copy  # once started

    def __init__(self, sink: Sink, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        self.sink, self.conn = sink, conn
        self.cursor = conn.cursor()
        self.copying: AbstractContextManager[psycopg.Copy] | None = None
        self.error = ""

    def start(self) -> None:
        """Start its ``COPY FROM`` (the failure is recorded, not raised)."""
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            TableRef.parse(self.sink.staging).identifier,
            sql.SQL(", ").join(map(sql.Identifier, self.sink.columns)),
        )
        copying = self.cursor.copy(statement)
        try:
            self.copy = copying.__enter__()
        except Exception as exc:
            self.fail(exc)
            return
        self.copying = copying

    def end(self, rows: int) -> None:
        """End its ``COPY`` (where the server reports most refusals); it must have taken ``rows``."""
        copying, self.copying = self.copying, None
        if copying is None:
            return
        try:
            copying.__exit__(None, None, None)
        except Exception as exc:
            self.fail(exc)
            return
        if self.cursor.rowcount != rows:
            took = self.cursor.rowcount
            self.fail(RuntimeError(f"the source sent {rows} rows but the destination took {took}"))

    def fail(self, exc: BaseException) -> None:
        """Leave the copy: its ``COPY`` ended with ``exc`` and its transaction rolled back (the
        partition's claim with it), at once, so a retried task never waits on it."""
        self.error = self.error or refusal(exc)
        copying, self.copying = self.copying, None
        # the failure is recorded; should the connection be broken, it is closed at the end
        with suppress(Exception):
            if copying is not None:
                copying.__exit__(type(exc), exc, exc.__traceback__)
        with suppress(Exception):
            self.conn.rollback()


def _claim(sink: Sink, part: int) -> _Out | None:
    """A transaction in ``sink`` that has claimed partition ``part``, or None when an earlier
    attempt copied it."""
    out = psycopg.connect(sink.conninfo, autocommit=False)
    try:
        for statement in TEXT_OUTPUT:
            out.execute(statement)
        # a partition's COPY into the replica runs as long as it takes, and its transaction
        # waits while the other sinks and the source get ready: not cut by the replica's defaults
        set_statement_timeout(out, 0, local=True)
        hold_open(out, local=True)
        claimed = out.execute(
            sql.SQL("INSERT INTO {} (staging, part, rows) VALUES (%s, %s, 0) ON CONFLICT DO NOTHING").format(
                TableRef.parse(sink.parts).identifier
            ),
            (sink.staging, part),
        ).rowcount
    except BaseException:
        out.close()
        raise
    if claimed:
        return _Out(sink, out)
    out.close()  # an earlier attempt copied it
    return None


class _NoSinkLeft(Exception):
    """Every sink of a partition failed while its rows streamed: the source's COPY is cancelled."""


def _stream(source_conninfo: str, session: Sequence[str], query: str, outs: list[_Out]) -> int:
    """``COPY (query) TO STDOUT`` on the source, each chunk written to every sink's ``COPY FROM``
    that has not failed; the rows the source sent."""
    with psycopg.connect(source_conninfo, autocommit=True) as source:
        for statement in session:
            source.execute(statement)
        for statement in TEXT_OUTPUT:
            source.execute(statement)
        for out in outs:
            out.start()
        live = [out for out in outs if not out.error]
        if not live:
            return 0
        reader = source.cursor()
        try:
            with reader.copy(sql.SQL("COPY ({}) TO STDOUT").format(sql.SQL(query))) as data:
                for chunk in data:
                    for out in live:
                        try:
                            out.copy.write(chunk)
                        except Exception as exc:  # this sink's: the others go on (from this chunk)
                            out.fail(exc)
                            live = [other for other in live if other is not out]
                            if not live:
                                raise _NoSinkLeft from None
        except _NoSinkLeft:
            return 0
        except BaseException as exc:  # the source's: every COPY ends with it, nothing is kept
            for out in live:
                out.fail(exc)
            raise
        rows = reader.rowcount
        for out in live:
            out.end(rows)
        source.execute("COMMIT")
    return rows


def refusal(exc: BaseException) -> str:
    """One line saying why a sink failed (PostgreSQL's message and its context, on one line)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:2000]


def partition_sql(query: str, columns: Sequence[str], predicate: str) -> str:
    """The ``SELECT`` of one partition of ``query`` (the baseline's subquery, already SQL)."""
    statement = sql.SQL("SELECT {} FROM {} WHERE {}")
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    return statement.format(names, sql.SQL(query), sql.SQL(predicate)).as_string(None)


def staged_rows(sink: Sink, partitions: int) -> int:
    """The rows the tasks copied into ``sink``'s staging table (from its parts table, so a
    retried task is counted once); RuntimeError when a partition is missing."""
    with psycopg.connect(sink.conninfo, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*), coalesce(sum(rows), 0) FROM {} WHERE staging = %s").format(
                TableRef.parse(sink.parts).identifier
            ),
            (sink.staging,),
        ).fetchone()
    done, rows = (int(row[0]), int(row[1])) if row else (0, 0)
    if done != partitions:
        raise RuntimeError(
            f"destination {sink.name}: {done} of {partitions} partitions are in {sink.staging}"
        )
    return rows
