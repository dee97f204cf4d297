"""Tables whose identity is the whole row (REPLICA IDENTITY FULL, no primary key) in the
PostgreSQL destination, in sets: a few statements per batch, never one per change.

Between two TRUNCATEs a batch is a multiset of new rows and one of old rows
(``apply/multiset.py``). Rows both added and removed cancel on the client (``cancelled``);
then the distinct old rows, each with how many equal rows go, are staged with ``COPY`` into
a temporary table and one ``DELETE`` removes that many equal rows of the table (duplicates
numbered with ``row_number()``, rows addressed by ``ctid``), before the new rows go into the
table with one ``COPY`` (so the DELETE's scan does not read them; their COPY text is written
meanwhile). Should the table lack some old row (a row sent with two texts that did not
cancel), that attempt is rolled back to a savepoint and the new rows are copied first.

Rows are equal as the change-by-change path compared them: column by column, by their text
with ``IS NOT DISTINCT FROM`` (NULLs equal; types without an equality operator such as json
or point compared by their text too), byte for byte (the "C" collation). A column whose type's
own equality is equality of text (``_TEXT_EQUALITY``: integers, timestamps, uuid, text in a
deterministic collation...) is compared by that equality, without writing its text per row.
That comparison runs only on candidate pairs of one hash join over one scan of the table:
rows equal in the fewest columns that tell the old rows apart, by those columns' own equality
(columns with a hash opclass and no NULL among the old rows; equal texts are equal values),
else rows with an equal ``hash_record`` of the whole row. A table lacking rows the source
removed is an error. The cost per batch: a ``COPY`` of its new rows and one scan of the table
as it was before the batch when it removes rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from airflow_provider_pgsync.apply.multiset import MultisetRun, multiset_runs
from airflow_provider_pgsync.apply.net import Truncate
from airflow_provider_pgsync.destinations.pg_copy_text import CopyText, copy_prepared, copy_rows, copy_text
from airflow_provider_pgsync.errors import DestinationError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo

if TYPE_CHECKING:
    from airflow_provider_pgsync.destinations.postgres import PostgresDestination

# Built-in types (by OID) whose equality is equality of their output text in one session:
# bool, bytea, "char", name, int8, int2, int4, text, oid, varchar, date, time, timestamp,
# timestamptz, uuid. Not float4/float8 (0 = -0), numeric (1.0 = 1.00), bpchar (trailing
# blanks), interval ('1 day' = '24 hours'), jsonb, timetz, inet and the like. Collatable
# ones only under a deterministic collation (equal only when byte for byte the same).
_TEXT_EQUALITY = (16, 17, 18, 19, 20, 21, 23, 25, 26, 1043, 1082, 1083, 1114, 1184, 2950)

Equality = tuple[frozenset[str], frozenset[str]]
"""A table's columns with a hash opclass, and those whose equality is equality of text."""

# per column of a table (a domain by its base type): whether the type has a default hash
# opclass, directly or through a binary-coercible type (varchar through text), as
# hash_record finds it; and whether its own equality is equality of its text
_COLUMN_EQUALITY = """
SELECT a.attname::text,
  EXISTS (
    SELECT FROM pg_opclass o JOIN pg_am m ON m.oid = o.opcmethod
    WHERE m.amname = 'hash' AND o.opcdefault AND (
      o.opcintype = b.base
      OR EXISTS (
        SELECT FROM pg_cast c
        WHERE c.castsource = b.base AND c.casttarget = o.opcintype AND c.castmethod = 'b'))),
  b.base = ANY(%s::oid[]) AND coalesce(
    (SELECT l.collisdeterministic FROM pg_collation l WHERE l.oid = a.attcollation), true)
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid,
  LATERAL (SELECT CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END AS base) b
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
"""


def apply_keyless(
    destination: PostgresDestination, table: TableRef, columns: Sequence[ColumnInfo], changes: pa.RecordBatch
) -> None:
    """Apply ``changes`` of a row-identity ``table`` in the destination's open transaction."""
    conn = destination._conn
    names = [c.name for c in columns]
    for run in multiset_runs(columns, changes):
        if isinstance(run, Truncate):
            conn.execute(sql.SQL("TRUNCATE {}").format(table.identifier))
            continue
        run = cancelled(run)
        if not run.deletes.num_rows:
            if run.inserts.num_rows:
                copy_rows(destination._conn, table.identifier, names, run.inserts)
            continue
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgsync-copy") as pool:
            # the new rows' COPY text is written while the server removes the old rows
            inserts = pool.submit(copy_text, run.inserts) if run.inserts.num_rows else None
            try:
                _remove_then_add(destination, table, columns, run, inserts)
            finally:
                if inserts is not None:
                    inserts.cancel()


def _remove_then_add(
    destination: PostgresDestination,
    table: TableRef,
    columns: Sequence[ColumnInfo],
    run: MultisetRun,
    inserts: Future[CopyText] | None,
) -> None:
    """The old rows removed before the new rows are added, so the DELETE's scan does not read
    them: exact once ``cancelled`` took out the rows both added and removed, when the table
    holds every remaining old row. If it does not (a row whose text changed between its INSERT
    and its DELETE, e.g. the source's TimeZone changed between two captures, so the two did
    not cancel), the attempt is rolled back to a savepoint and the run applied in the order
    that always holds: new rows first."""
    conn = destination._conn
    names = [c.name for c in columns]
    expected = run.deletes.num_rows
    try:
        with conn.transaction():  # a savepoint
            count = _delete(destination, table, columns, run)
            if count != expected:
                raise _Short
    except _Short:
        if inserts is not None:
            copy_prepared(destination._conn, table.identifier, names, inserts.result())
        count = _delete(destination, table, columns, run)
        if count != expected:
            raise DestinationError(
                f"destination {destination.name}: table {table} lacks {expected - count} of {expected} "
                "rows the source updated or deleted: the destination lost rows; rebaseline it"
            ) from None
        return
    if inserts is not None:
        copy_prepared(destination._conn, table.identifier, names, inserts.result())


class _Short(Exception):
    """The table lacked some of a run's old rows (rolls the attempt back to its savepoint)."""


def cancelled(run: MultisetRun) -> MultisetRun:
    """``run`` without the rows it both adds and removes (as many of each as the fewer of the
    two): the table ends the same (``M + I - D`` is ``M + (I - C) - (D - C)`` for ``C`` the
    common rows), and every row left to remove was in the table before the run. Rows are the
    same when their texts are (PostgreSQL text holds no NUL byte, so NUL separates columns)."""
    inserts, deletes = run.inserts, run.deletes
    if not inserts.num_rows or not deletes.num_rows:
        return run
    # only new rows whose first column is some old row's can cancel: the rows compared whole
    first = inserts.column_names[0]
    maybe = pc.is_in(inserts.column(first), value_set=deletes.column(first).unique(), skip_nulls=False)
    positions = np.flatnonzero(maybe.to_numpy(zero_copy_only=False))
    if not len(positions):
        return run
    candidates = inserts.take(pa.array(positions))
    texts = pa.chunked_array([*_row_text(candidates).chunks, *_row_text(deletes).chunks])
    encoded = pc.dictionary_encode(texts)
    ids = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in encoded.chunks]).astype(np.int64)
    added, removed = ids[: len(positions)], ids[len(positions) :]
    size = int(ids.max()) + 1
    common = np.minimum(np.bincount(added, minlength=size), np.bincount(removed, minlength=size))
    if not common.any():
        return run
    keep = np.ones(inserts.num_rows, dtype=bool)
    keep[positions] = _occurrence(added) >= common[added]
    return MultisetRun(
        inserts=inserts.filter(pa.array(keep)),
        deletes=deletes.filter(pa.array(_occurrence(removed) >= common[removed])),
    )


def _row_text(rows: pa.Table) -> pa.ChunkedArray:
    """Each row as one string: per column NUL then ``n`` (NULL) or ``v`` and its text."""
    parts = []
    for column in rows.columns:
        text = column.cast(pa.string())
        parts.append(pc.if_else(pc.is_null(text), "\x00n", pc.binary_join_element_wise("\x00v", text, "")))
    return pc.binary_join_element_wise(*parts, "")


def _occurrence(ids: np.ndarray) -> np.ndarray:
    """Per element, how many equal elements come before it (0, 1, ... within each value)."""
    order = np.argsort(ids, kind="stable")
    ranked = ids[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    lengths = np.diff(np.r_[starts, len(ids)])
    within = np.arange(len(ids)) - np.repeat(starts, lengths)
    out = np.empty(len(ids), dtype=np.int64)
    out[order] = within
    return out


def _equality(destination: PostgresDestination, table: TableRef, columns: Sequence[ColumnInfo]) -> Equality:
    """The columns of ``table`` with a hash opclass, and those whose equality is equality of
    text (``_COLUMN_EQUALITY``); read once per session and column types."""
    conn = destination._conn
    key = (str(table), tuple((c.name, destination._type(table, c)) for c in columns))
    if key not in destination._equality:
        named = table.identifier.as_string(conn)
        rows = conn.execute(_COLUMN_EQUALITY, (list(_TEXT_EQUALITY), named)).fetchall()
        destination._equality[key] = (
            frozenset(str(r[0]) for r in rows if r[1]),
            frozenset(str(r[0]) for r in rows if r[2]),
        )
    return destination._equality[key]


def _delete(
    destination: PostgresDestination, table: TableRef, columns: Sequence[ColumnInfo], run: MultisetRun
) -> int:
    """Remove one row of ``table`` equal to each of ``run.deletes``, in one statement; how many
    it removed."""
    conn = destination._conn
    names = [c.name for c in columns]
    hashable, by_value = _equality(destination, table, columns)
    # the distinct old rows, each with how many equal rows go (n) and a number (g)
    n, g, h = (_free(names, base) for base in ("n", "g", "h"))
    by_text = [c for c in names if c not in by_value]
    texts = {c: _free(names, f"text_{i}") for i, c in enumerate(by_text)}
    distinct = run.deletes.group_by(names, use_threads=False).aggregate([([], "count_all")])
    distinct = distinct.rename_columns([*names, n]).append_column(
        g, pa.array(np.arange(distinct.num_rows, dtype=np.int64))
    )
    natives = _native_keys(distinct, [c for c in names if c in hashable])
    destination._staged += 1
    staged = sql.Identifier(f"pgsync_stage_{destination._staged}")
    conn.execute(
        sql.SQL(
            "CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {}, 0::bigint AS {}, 0::bigint AS {}"
            " FROM {} WITH NO DATA"
        ).format(staged, _columns("", names), sql.Identifier(n), sql.Identifier(g), table.identifier)
    )
    copy_rows(destination._conn, staged, [*names, n, g], distinct)
    if natives:  # candidates: rows equal in these columns
        candidates = sql.SQL(" AND ").join(
            sql.SQL("t.{0} = s.{0}").format(sql.Identifier(c)) for c in natives
        )
    else:  # candidates: rows with an equal hash of the whole row
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} int").format(staged, sql.Identifier(h)))
        conn.execute(
            sql.SQL("UPDATE {} AS s SET {} = {}").format(
                staged, sql.Identifier(h), _row_hash("s", names, hashable)
            )
        )
        candidates = sql.SQL("{} = s.{}").format(_row_hash("t", names, hashable), sql.Identifier(h))
    # statistics of the staged rows: else the planner takes them for a few skewed values and
    # hashes the whole table instead (measured: 0.6 s of 1.1 s for 43,000 rows of 380,000);
    # and no merge join (it sorts the table) nor JIT compilation (0.9 s of 2.4 s)
    conn.execute(sql.SQL("ANALYZE {}").format(staged))
    conn.execute("SET LOCAL enable_mergejoin = off")
    conn.execute("SET LOCAL jit = off")
    count = conn.execute(
        sql.SQL(
            "DELETE FROM {table} WHERE ctid = ANY(ARRAY("
            "SELECT m.ctid FROM ("
            " SELECT t.ctid, s.{n} AS n, row_number() OVER (PARTITION BY s.{g}) AS r"
            " FROM {table} AS t JOIN (SELECT *{texts} FROM {staged} OFFSET 0) AS s"  # not inlined
            " ON {candidates} AND {equal}"
            ") AS m WHERE m.r <= m.n))"
        ).format(
            table=table.identifier,
            n=sql.Identifier(n),
            g=sql.Identifier(g),
            staged=staged,
            candidates=candidates,
            # the old rows' texts once each (OFFSET 0 keeps them out of the join's filter), not
            # once per candidate pair
            texts=sql.SQL("").join(
                sql.SQL(', {}::text COLLATE "C" AS {}').format(sql.Identifier(c), sql.Identifier(t))
                for c, t in texts.items()
            ),
            equal=sql.SQL(" AND ").join(
                sql.SQL('t.{}::text COLLATE "C" IS NOT DISTINCT FROM s.{}').format(
                    sql.Identifier(c), sql.Identifier(texts[c])
                )
                if c in texts
                else sql.SQL("t.{0} IS NOT DISTINCT FROM s.{0}").format(sql.Identifier(c))
                for c in names
            ),
        )
    ).rowcount
    return int(count)


def _native_keys(distinct: pa.Table, hashable: list[str]) -> list[str]:
    """The fewest columns whose own equality (hashed, and implied by equal text) finds the
    candidate rows: columns with a hash opclass in which no old row is NULL, the most distinct
    first, until they tell 9 in 10 of the distinct old rows apart (each costs a hash per row of
    the table); none if all of them together tell fewer than half apart (the row's hash is used)."""
    counts = {
        c: pc.count_distinct(distinct.column(c)).as_py()
        for c in hashable
        if distinct.column(c).null_count == 0
    }
    keys: list[str] = []
    apart = 0
    for c in sorted(counts, key=lambda c: -counts[c]):
        keys.append(c)
        apart = distinct.select(keys).group_by(keys, use_threads=False).aggregate([]).num_rows
        if 10 * apart >= 9 * distinct.num_rows:
            return keys
    return keys if 2 * apart >= distinct.num_rows else []


def _row_hash(alias: str, names: list[str], hashable: frozenset[str]) -> sql.Composed:
    """``hash_record`` of a row: the columns with a hash opclass as they are, the others as
    text (equal texts, equal hashes)."""
    return sql.SQL("hash_record(ROW({}))").format(
        sql.SQL(", ").join(
            sql.SQL("{}.{}" if c in hashable else "{}.{}::text").format(
                sql.Identifier(alias), sql.Identifier(c)
            )
            for c in names
        )
    )


def _columns(alias: str, names: list[str]) -> sql.Composed:
    return sql.SQL(", ").join(
        sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(c)) if alias else sql.Identifier(c)
        for c in names
    )


def _free(names: list[str], base: str) -> str:
    """A column name like ``pgsync_<base>`` that is none of ``names``."""
    name = f"pgsync_{base}"
    while name in names:
        name += "_"
    return name
