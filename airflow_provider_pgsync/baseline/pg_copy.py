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
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

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


def copy_partition(
    source_conninfo: str, session: Sequence[str], query: str, sinks: Sequence[Sink], part: int
) -> int:
    """Run ``session`` on the source (it opens the transaction and joins the snapshot), then
    copy the rows of ``query`` into every sink that does not have partition ``part`` yet, each
    in one transaction; the rows read (0 when every sink had it)."""
    outs: list[tuple[Sink, psycopg.Connection[tuple[object, ...]]]] = []
    try:
        for sink in sinks:
            out = psycopg.connect(sink.conninfo, autocommit=False)
            for statement in TEXT_OUTPUT:
                out.execute(statement)
            # a partition's COPY into the replica runs as long as it takes, and its transaction
            # waits while the other sinks and the source get ready: not cut by the replica's defaults
            set_statement_timeout(out, 0, local=True)
            hold_open(out, local=True)
            claimed = out.execute(
                sql.SQL(
                    "INSERT INTO {} (staging, part, rows) VALUES (%s, %s, 0) ON CONFLICT DO NOTHING"
                ).format(TableRef.parse(sink.parts).identifier),
                (sink.staging, part),
            ).rowcount
            if claimed:
                outs.append((sink, out))
            else:  # an earlier attempt copied it
                out.close()
        if not outs:
            return 0
        rows = _stream(source_conninfo, session, query, outs)
        for sink, out in outs:
            out.execute(
                sql.SQL("UPDATE {} SET rows = %s WHERE staging = %s AND part = %s").format(
                    TableRef.parse(sink.parts).identifier
                ),
                (rows, sink.staging, part),
            )
            out.commit()
        return rows
    finally:
        for _, out in outs:
            out.close()


def _stream(
    source_conninfo: str,
    session: Sequence[str],
    query: str,
    outs: list[tuple[Sink, psycopg.Connection[tuple[object, ...]]]],
) -> int:
    """``COPY (query) TO STDOUT`` on the source, each chunk written to every ``COPY FROM``."""
    with psycopg.connect(source_conninfo, autocommit=True) as source:
        for statement in session:
            source.execute(statement)
        for statement in TEXT_OUTPUT:
            source.execute(statement)
        cursors = [out.cursor() for _, out in outs]
        reader = source.cursor()
        # on an error every COPY is ended with it: the destinations' transactions roll back
        with ExitStack() as stack:
            writers = [
                stack.enter_context(
                    cursor.copy(
                        sql.SQL("COPY {} ({}) FROM STDIN").format(
                            TableRef.parse(sink.staging).identifier,
                            sql.SQL(", ").join(map(sql.Identifier, sink.columns)),
                        )
                    )
                )
                for cursor, (sink, _) in zip(cursors, outs, strict=True)
            ]
            data = stack.enter_context(reader.copy(sql.SQL("COPY ({}) TO STDOUT").format(sql.SQL(query))))
            for chunk in data:
                for writer in writers:
                    writer.write(chunk)
        rows = reader.rowcount
        for cursor in cursors:
            if cursor.rowcount != rows:
                raise RuntimeError(f"the source sent {rows} rows but a destination took {cursor.rowcount}")
        source.execute("COMMIT")
    return rows


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
