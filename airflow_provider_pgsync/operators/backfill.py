"""PgBackfillOperator: re-send the rows of a streaming table that match a condition, or the rows
of a list of keys.

The rows are read like a baseline (one exported snapshot; a Spark job for a condition, a
``COPY`` on the Airflow worker for a key list) but staged for apply instead of replacing the
base; apply merges them into each destination at the point of the stream where that is exact
(``apply/backfill.py``), and for a key list also deletes the keys the snapshot has no row of.
The table stays Ready and keeps streaming throughout; a failed backfill changes nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from airflow.sdk import Context
from psycopg import sql

from airflow_provider_pgsync.baseline.plan import where_clause
from airflow_provider_pgsync.destinations.configs import destination_kind
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_changes import LakeChanges
from airflow_provider_pgsync.errors import BaselineError, ConfigError
from airflow_provider_pgsync.hooks.catalog import column_infos, relation_oid
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.hooks.targets import tls_note
from airflow_provider_pgsync.operators.backfill_keys import key_backfill
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator, _lake
from airflow_provider_pgsync.operators.baseline_destinations import ReplicaBackfills
from airflow_provider_pgsync.source import row_condition as rc
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.publication import PublishedTable, published_table
from airflow_provider_pgsync.state.model import Backfill, table_key
from airflow_provider_pgsync.state.store import update_state


class PgBackfillOperator(PgBaselineOperator):
    """Re-read the rows of a Ready table matching ``backfill_filter`` from one exported snapshot
    (a Spark job, as the baseline) and stage them in each lake and PostgreSQL destination (a
    staging table in a replica, which the job fills too); the next apply writes them over the
    destinations' rows, keeping the newer rows of keys changed since the snapshot. The rest of
    the table is left as it is: nothing is deleted.

    :param backfill_filter: a condition on the table's columns (``id > 1000``); empty or None
        re-sends every row. It is one expression (no ``;``, comment or unbalanced parenthesis)
        and every read of it runs in a read-only transaction.
    :param filter_grammar: ``safe`` (default): the filter may only use the table's columns,
        literals, comparisons, AND/OR/NOT, IN, BETWEEN and IS [NOT] NULL
        (``row_condition.SAFE_GRAMMAR``); ``sql``: any SQL boolean expression the source role may
        evaluate (functions, subqueries), for deployments whose trigger users may run SQL.

    :param backfill_keys: instead of a filter, the keys to re-send: a list of dicts of the
        table's key columns (its replica identity) to their values as PostgreSQL text
        (``[{"id": "17"}, {"id": "18"}]``), at most ``MAX_BACKFILL_KEYS``. Their rows are read
        in one exported snapshot on the Airflow worker (no Spark job) and staged in every
        destination (lake, PostgreSQL, custom ones with ``stage_backfill``); apply then writes
        each key's row, and deletes the rows of the keys the snapshot has none of (a row the
        destination holds and the source does not), except keys changed since the snapshot,
        which the stream brings. For a table whose identity is the whole row (REPLICA IDENTITY
        FULL without a primary key) a key is a whole row (every column, None for NULL), and
        each destination ends up holding it as many times as the snapshot does.

    The other arguments are ``PgBaselineOperator``'s (``rebaseline`` is not taken).
    """

    template_fields = (*PgBaselineOperator.template_fields, "backfill_filter", "backfill_keys")

    def __init__(
        self,
        *,
        backfill_filter: str | None = None,
        filter_grammar: str = "safe",
        backfill_keys: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        if "rebaseline" in kwargs:
            raise ConfigError("PgBackfillOperator takes no 'rebaseline': a backfill leaves the base in place")
        if filter_grammar not in rc.GRAMMARS:
            raise ConfigError(
                f"filter_grammar {filter_grammar!r} is unknown; use one of: {', '.join(rc.GRAMMARS)}"
            )
        _check_exclusive(backfill_filter, backfill_keys)
        super().__init__(**kwargs)
        self.backfill_filter = backfill_filter
        self.filter_grammar = filter_grammar
        self.backfill_keys = backfill_keys

    def execute(self, context: Context) -> dict[str, Any]:
        if self.backfill_keys is not None:
            _check_exclusive(self.backfill_filter, self.backfill_keys)
            self.check_connections()
            return key_backfill(self, self.backfill_keys)
        key = table_key(published_table(self.table).table)  # the config's name, until followed
        text, condition = read_filter(self.backfill_filter, self.filter_grammar, key)
        lakes = [_backfill_lake(d) for d in self.destinations if destination_kind(d) != "postgres"]
        if not self.destinations:
            raise ConfigError(f"backfill of {key}: no destination; give the lake and PostgreSQL destinations")
        self.check_connections()  # after the checks of the arguments alone, before anything is read
        hook = PgReplicationHook(postgres_conn_id=self.postgres_conn_id)
        store = open_state_store(
            self.state_backend, hook, state_conn_id=self.state_conn_id, schema=self.state_schema
        )
        name, spec_table = self._follow(hook, store, published_table(self.table))
        key = str(name)
        store.load(self.pipeline).table(key).check_backfill()
        backfill_id = f"b{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"
        try:
            with hook.baseline_snapshot(spec_table.table) as (snapshot, conn):
                check_condition(conn, spec_table, condition, text)
                spec = self._job_spec(
                    hook,
                    conn,
                    spec_table,
                    snapshot,
                    lakes,
                    condition=condition,
                    stage_as=backfill_id,
                    name=name,
                )
                if not spec.keys or len(spec.keys) == len(spec.columns):
                    raise ConfigError(
                        f"table {key} has no key short of the whole row (REPLICA IDENTITY FULL without a "
                        "primary key): a backfill cannot tell which rows it replaces; rebaseline the table"
                    )
                # the PostgreSQL destinations: a staging table each, which the job fills too
                self._replicas = ReplicaBackfills(
                    self.destinations, self.log, backfill_id=backfill_id, condition=condition
                )
                columns = column_infos(conn, spec_table.table, spec_table.columns)
                spec = self._replicas.prepare(conn, spec_table, columns, spec, name=name)
                self.log.info(
                    "backfill %s %s (%s): snapshot %s at %s",
                    key,
                    backfill_id,
                    rc.shown(text, 200) if text else "all rows",
                    snapshot.snapshot,
                    snapshot.baseline_lsn,
                )
                result = self._run_job(spec)
            if not result.ok:
                failure = f"backfill of {key} failed in Spark: {result.error}"
                raise BaselineError(failure + tls_note(failure, self._conn_ids()))
            backfill = Backfill(
                id=backfill_id,
                condition=_recorded(text),
                snapshot=snapshot.snapshot,
                baseline_lsn=snapshot.baseline_lsn,
                xmin=snapshot.xmin,
                xmax=snapshot.xmax,
                xip=snapshot.xip,
                staged={
                    **{w["destination"]: w["location"] for w in result.written if w["kind"] == "lake"},
                    **self._replicas.staged,
                },
                rows=result.rows,
            )
            update_state(store, self.pipeline, lambda s: s.with_backfill(key, backfill))
        except BaseException:
            _discard(lakes, name, backfill_id)  # the table's state is untouched
            self._replicas.discard()
            raise
        self.log.info(
            "backfill %s %s: %s rows staged; the next cdc run applies them once capture passes %s",
            key,
            backfill_id,
            f"{result.rows:,}",
            snapshot.baseline_lsn,
        )
        return {
            "table": key,
            "backfill": backfill_id,
            "condition": _recorded(text),
            "rows": result.rows,
            "baseline_lsn": str(snapshot.baseline_lsn),
            "staged": dict(backfill.staged),
        }


def _recorded(text: str, limit: int = 1000) -> str:
    """The filter as the state and the task's result keep it (a long one cut: it is only shown)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_filter(backfill_filter: object, grammar: str, table: str) -> tuple[str, rc.Condition | None]:
    """The filter's text (stripped) and its condition in ``grammar`` (None for every row);
    ConfigError naming ``backfill_filter``, the table, the problem and what is allowed."""
    where = f"backfill_filter of table {table}"
    if backfill_filter is None:
        return "", None
    if not isinstance(backfill_filter, str):
        raise ConfigError(f"{where} must be text, not {type(backfill_filter).__name__}")
    text = backfill_filter.strip()
    return text, rc.parse_condition(text, grammar, where) if text else None


def check_condition(
    conn: psycopg.Connection[Any], table: PublishedTable, condition: rc.Condition | None, text: str
) -> None:
    """ConfigError naming the filter and the problem unless ``condition`` is a boolean condition
    on ``table``: a safe one may name only the table's columns; then the server plans, without
    running it, the ``WHERE`` the baseline job reads with (``explain``, in a savepoint of ``conn``)."""
    if condition is None:
        return
    where = f"backfill_filter {rc.shown(text)}"
    if not isinstance(condition, rc.SqlText):
        names = _column_names(conn, table.table)
        unknown = [c for c in rc.columns_of(condition) if c not in names]
        if unknown:
            raise ConfigError(
                f"{where}: table {table.table} has no column {', '.join(map(repr, unknown))}; its columns: "
                f'{", ".join(names)} (a name with capitals or spaces goes in double quotes: "Name")'
            )
    else:
        _refuse_volatile(conn, condition, where)
    query = sql.SQL("EXPLAIN SELECT FROM {}{}").format(table.table.identifier, where_clause(table, condition))
    try:
        with conn.transaction():
            explain(conn, query)
    except psycopg.Error as exc:
        problem = exc.diag.message_primary or str(exc).splitlines()[0]
        raise ConfigError(
            f"{where} is not a condition on table {table.table}: {problem}; write a boolean expression "
            "over the table's columns, e.g. id > 1000"
        ) from None


def _refuse_volatile(conn: psycopg.Connection[Any], condition: rc.SqlText, where: str) -> None:
    """ConfigError when an ``sql`` condition calls a VOLATILE function or operator (PostgreSQL's
    mark of one that may change something): a read-only transaction stops writes to tables and
    sequences, but not e.g. ``lo_create``, advisory locks, replication slot functions, signals."""
    functions, operators = rc.calls_of(condition)
    found = conn.execute(
        "SELECT DISTINCT proname::text FROM pg_proc WHERE proname = ANY(%s) AND provolatile = 'v' "
        "UNION SELECT DISTINCT o.oprname::text FROM pg_operator o JOIN pg_proc p ON p.oid = o.oprcode "
        "WHERE o.oprname = ANY(%s) AND p.provolatile = 'v' ORDER BY 1",
        (functions, operators),
    ).fetchall()
    if found:
        names = ", ".join(repr(r[0]) for r in found)
        raise ConfigError(
            f"{where} calls {names}, which PostgreSQL marks VOLATILE (it may change something or give "
            "another result each time): not allowed in a filter; use immutable or stable functions only"
        )


def explain(conn: psycopg.Connection[Any], query: sql.Composed | sql.SQL) -> None:
    """Run ``query`` through the extended query protocol (prepared): the server refuses a text
    holding more than one statement, whatever a client-side check made of it."""
    conn.execute(query, prepare=True)


def _column_names(conn: psycopg.Connection[Any], table: TableRef) -> list[str]:
    """Every column of ``table`` (generated ones too: a filter may read them)."""
    rows = conn.execute(
        "SELECT attname::text FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum",
        (relation_oid(conn, table),),
    ).fetchall()
    return [r[0] for r in rows]


def _backfill_lake(config: Mapping[str, Any]) -> LakeDestination:
    """The lake destination ``config`` describes; ConfigError for a custom one."""
    kind = destination_kind(config)
    if kind != "lake":
        raise ConfigError(
            f"destination {config.get('name', kind)!r} ({kind}) cannot take a filter backfill: "
            "a backfill_filter writes lake and PostgreSQL destinations; re-send its keys with "
            "backfill_keys (custom destinations with stage_backfill), or rebaseline the table there"
        )
    return _lake(config)


def _discard(lakes: list[LakeDestination], table: TableRef, backfill_id: str) -> None:
    """Remove what a failed backfill may have staged."""
    for lake in lakes:
        LakeChanges(lake).discard_backfill(lake.backfill_dir(table, backfill_id))


def _check_exclusive(backfill_filter: object, backfill_keys: object) -> None:
    """ConfigError when both a filter and a key list are given."""
    if backfill_keys is not None and backfill_filter not in (None, ""):
        raise ConfigError(
            "PgBackfillOperator takes backfill_filter (rows by a condition) or backfill_keys (rows by "
            "key), not both: pass one of them"
        )
