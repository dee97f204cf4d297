"""A backfill of a list of keys (``PgBackfillOperator(backfill_keys=...)``): the keys' rows read
in one exported snapshot on the Airflow worker, staged in every destination, merged by apply.

A key list is small (at most ``MAX_BACKFILL_KEYS``): one ``COPY`` of the keys' rows in the
snapshot (``hooks/key_rows.py``) costs less than starting a Spark job. Each destination keeps
the rows and the keys the snapshot has no row of through ``Destination.stage_backfill``; the
state records the backfill only once every destination has staged it, and a failure removes
what was staged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_pgsync.apply.net import is_keyed
from airflow_provider_pgsync.destinations.configs import destination_name, open_destination
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.hooks.catalog import column_infos
from airflow_provider_pgsync.hooks.key_rows import key_rows
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.hooks.state_stores import open_state_store
from airflow_provider_pgsync.source.key_list import KeyList, key_names_of, read_keys
from airflow_provider_pgsync.source.publication import published_table
from airflow_provider_pgsync.state.model import Backfill
from airflow_provider_pgsync.state.store import update_state

if TYPE_CHECKING:
    from airflow_provider_pgsync.operators.backfill import PgBackfillOperator


def key_backfill(op: PgBackfillOperator, backfill_keys: object) -> dict[str, Any]:
    """Run ``op``'s backfill of ``backfill_keys`` (see the module docstring); the task's result."""
    configs = [dict(c) for c in op.destinations]
    if not configs:
        raise ConfigError("PgBackfillOperator with backfill_keys needs at least one destination")
    names = [destination_name(c) for c in configs]
    hook = PgReplicationHook(postgres_conn_id=op.postgres_conn_id)
    store = open_state_store(op.state_backend, hook, state_conn_id=op.state_conn_id, schema=op.state_schema)
    name, spec_table = op._follow(hook, store, published_table(op.table))
    key = str(name)
    store.load(op.pipeline).table(key).check_backfill()
    backfill_id = f"b{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    staged: dict[str, str] = {}
    try:
        with hook.baseline_snapshot(spec_table.table) as (snapshot, conn):
            columns = column_infos(conn, spec_table.table, spec_table.columns)
            # a table whose identity is the row: its "keys" are whole rows, NULLs allowed
            keys = read_keys(backfill_keys, key_names_of(columns), key, nullable=not is_keyed(columns))
            rows, absent = key_rows(conn, spec_table, columns, keys)
            op.log.info(
                "backfill %s %s: %d key(s) in snapshot %s at %s: %d row(s) to write, %d key(s) without a row "
                "to delete, into %s",
                key,
                backfill_id,
                len(keys.values),
                snapshot.snapshot,
                snapshot.baseline_lsn,
                rows.num_rows,
                absent.num_rows,
                ", ".join(names),
            )
            for config in configs:
                destination = open_destination(config)
                try:
                    staged[destination.name] = destination.stage_backfill(
                        name, columns, backfill_id, rows, absent
                    )
                finally:
                    destination.close()
            backfill = Backfill(
                id=backfill_id,
                condition=described(keys),
                snapshot=snapshot.snapshot,
                baseline_lsn=snapshot.baseline_lsn,
                xmin=snapshot.xmin,
                xmax=snapshot.xmax,
                xip=snapshot.xip,
                staged=staged,
                rows=rows.num_rows + absent.num_rows,
            )
            update_state(
                store, op.pipeline, lambda s: s.with_backfill(key, backfill).with_first_columns(key, columns)
            )
    except BaseException:
        _discard(op, configs, staged)
        raise
    op.log.info(
        "backfill %s %s: staged in %s; the next cdc run applies it once capture passes %s",
        key,
        backfill_id,
        ", ".join(staged),
        snapshot.baseline_lsn,
    )
    return {
        "table": key,
        "backfill": backfill_id,
        "condition": backfill.condition,
        "keys": len(keys.values),
        "rows": rows.num_rows,
        "absent": absent.num_rows,
        "baseline_lsn": str(snapshot.baseline_lsn),
        "staged": dict(staged),
    }


def described(keys: KeyList, limit: int = 300) -> str:
    """The keys as the state and the logs show them: ``3 keys: id=17; id=18; id=19``, cut short."""
    shown = "; ".join(
        ", ".join(f"{c}={'NULL' if v is None else v}" for c, v in zip(keys.columns, values, strict=True))
        for values in keys.values[:20]
    )
    text = f"{len(keys.values)} key{'s' if len(keys.values) != 1 else ''}: {shown}"
    if len(keys.values) > 20:
        text += "; ..."
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _discard(op: PgBackfillOperator, configs: Sequence[dict[str, Any]], staged: dict[str, str]) -> None:
    """Remove what a failed backfill staged (never raises: the failure is what the task reports)."""
    for config in configs:
        if destination_name(config) not in staged:
            continue
        try:
            destination = open_destination(config)
            try:
                destination.discard_backfill(staged[destination.name])
            finally:
                destination.close()
        except Exception as exc:
            op.log.warning("could not remove the staged rows of %s: %s", destination_name(config), exc)
