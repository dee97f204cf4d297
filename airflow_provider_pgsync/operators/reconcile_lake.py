"""How ``PgReconcileOperator`` compares the source with a lake destination.

The lake keeps rows in Spark types, so both sides are compared as the lake holds them: the
source's rows are read in the snapshot as PostgreSQL text and converted by apply's own
conversion (``lake_values.text_to_arrow``) here, the lake's rows are read by a Spark job
(``spark/reconcile_job.py``) as of the watermark the operator waited for; both sides' values
become canonical text through the same function (``reconcile.canonical.arrow_texts``). The
row digests of both sides are then compared by the same bucket bisection as a replica's.

Cost: the source table is read once in full into this worker, holding three short strings
per row; the Spark job reads the lake table once and writes its digests to a temporary folder.
"""

from __future__ import annotations

import json
import logging
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from psycopg import sql

from airflow_provider_pgsync.changelog.schema import key_columns
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_changes import LakeChanges, lake_types
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_values import text_to_arrow
from airflow_provider_pgsync.errors import PgSyncError, ReconcileError
from airflow_provider_pgsync.hooks.catalog import table_columns
from airflow_provider_pgsync.hooks.spark_submit import BaselineSubmitHook, driver_environment
from airflow_provider_pgsync.operators.reconcile_sides import Run, columns_of, error_result
from airflow_provider_pgsync.reconcile.canonical import arrow_texts, md5_hex, row_text
from airflow_provider_pgsync.reconcile.compare import MemorySide, compare, levels
from airflow_provider_pgsync.reconcile.result import KeyDict, TableResult
from airflow_provider_pgsync.reconcile.wait import Watermark
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo
from airflow_provider_pgsync.typemap.spark import output_text

if TYPE_CHECKING:
    from airflow_provider_pgsync.operators.reconcile import PgReconcileOperator

log = logging.getLogger(__name__)
_SPARK_DIR = Path(__file__).resolve().parent.parent / "spark"
FETCH_ROWS = 20_000


def canonical_rows(
    batch: Sequence[Sequence[str | None]],
    names: Sequence[str],
    types: dict[str, pa.DataType],
    table: str,
) -> list[list[str | None]]:
    """Rows of PostgreSQL texts as the canonical texts of the lake's values (row by row)."""
    columns = []
    for i, name in enumerate(names):
        texts = pa.array([row[i] for row in batch], pa.string())
        columns.append(
            arrow_texts(text_to_arrow(texts, types[name], what=f"column {name!r} of table {table}"))
        )
    return [list(values) for values in zip(*columns, strict=True)] if columns else [[] for _ in batch]


class _Table:
    """One table of a lake comparison, between the wait and the Spark job."""

    def __init__(
        self, key: str, table: TableRef, source: TableRef, columns: Sequence[ColumnInfo]
    ) -> None:
        self.key, self.table, self.source = key, table, source
        self.columns = list(columns)
        self.names = [c.name for c in columns]
        self.keys = key_columns(columns) or self.names
        self.watermark: Watermark | None = None
        self.left_out: frozenset[str] = frozenset()
        self.left_out_count = 0
        self.types: dict[str, pa.DataType] = {}
        self.out = ""


def reconcile_lake(
    run: Run, config: dict[str, Any], name: str, tables: Sequence[str], operator: PgReconcileOperator
) -> list[TableResult]:
    """Compare each of ``tables`` with the lake destination ``config`` (named ``name``)."""
    lake = LakeDestination.from_config(dict(config))
    files = LakeFiles(lake)
    watermarks = LakeChanges(lake)
    results: dict[str, TableResult] = {}
    ready: list[_Table] = []
    for key in tables:
        try:
            ready.append(_prepare(run, files, watermarks, name, key))
        except (PgSyncError, psycopg.Error, OSError) as exc:
            log.error("reconcile %s -> %s: %s", key, name, exc)
            results[key] = error_result(key, name, exc)
    if ready:
        with tempfile.TemporaryDirectory(prefix="pgsync-reconcile-") as work:
            for item in ready:
                item.out = str(Path(work, f"t{uuid.uuid4().hex[:8]}"))
            done = _spark_job(lake, ready, Path(work), operator)
            for item in ready:
                outcome = done.get(item.key, {"error": "the Spark job gave no result for it"})
                try:
                    if "error" in outcome:
                        raise ReconcileError(
                            f"reading lake table {item.table} in Spark failed: {outcome['error']}"
                        )
                    results[item.key] = _compare(run, item, name)
                except (PgSyncError, psycopg.Error, OSError) as exc:
                    log.error("reconcile %s -> %s: %s", item.key, name, exc)
                    results[item.key] = error_result(item.key, name, exc)
    return [results[k] for k in tables]


def _prepare(run: Run, files: LakeFiles, watermarks: LakeChanges, name: str, key: str) -> _Table:
    table_ref = run.store.load(run.pipeline).table(key).table
    state, watermark = run.wait(key, name, lambda: watermarks.watermark(table_ref), lambda: None)
    table_state = state.table(key)
    item = _Table(key, table_state.table, table_state.source_table, columns_of(run, table_state))
    meta = files.current(item.table)
    if meta is None:
        raise ReconcileError(f"lake table {item.table} has no base: run its baseline")
    item.types = lake_types(item.table, meta, item.columns)
    item.watermark = watermark
    left = run.left_out(state, table_state, watermark)
    if left.truncated:
        raise ReconcileError(
            f"{key} was truncated in {name} by a transaction after the source snapshot: nothing to compare "
            "this time; reconcile again"
        )
    keys = sorted(left.keys, key=lambda k: tuple((v is None, v or "") for v in k))
    canonical = canonical_rows(keys, item.keys, item.types, key) if keys else []
    item.left_out = frozenset(row_text(k) for k in canonical)
    item.left_out_count = len(left.keys)
    return item


def _spark_job(
    lake: LakeDestination, items: list[_Table], work: Path, operator: PgReconcileOperator
) -> dict[str, dict[str, Any]]:
    spec = {
        "destination": lake.to_config(),
        "tables": [
            {
                "table": str(i.table),
                "key": i.key,
                "upto": list(i.watermark) if i.watermark is not None else None,
                "columns": i.names,
                "keys": i.keys,
                "left_out": sorted(i.left_out),
                "out": i.out,
            }
            for i in items
        ],
    }
    spec_path, result_path = work / "spec.json", work / "result.json"
    spec_path.write_text(json.dumps(spec))
    conf = {
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_SPARK_DIR / 'log4j2.properties'}",
        **{k: str(v) for k, v in operator.spark_conf.items()},
    }
    submit = BaselineSubmitHook(
        conn_id=operator.spark_conn_id,
        conf=conf,
        name="pgsync-reconciliation",
        application_args=["--spec", str(spec_path), "--result", str(result_path)],
        env_vars={"PYTHONWARNINGS": "ignore::FutureWarning", **driver_environment()},
        **{"driver_memory": "2g", **operator.spark_submit_options},
    )
    try:
        submit.submit(str(_SPARK_DIR / "reconcile_job.py"))
    except Exception as exc:
        return {i.key: {"error": f"spark-submit failed: {exc}"} for i in items}
    if not result_path.exists():
        return {i.key: {"error": "the job ended without a result; see the log above"} for i in items}
    by_table = {r["table"]: r for r in json.loads(result_path.read_text())}
    return {i.key: by_table.get(str(i.table), {"error": "no result"}) for i in items}


def _compare(run: Run, item: _Table, name: str) -> TableResult:
    source_rows: list[tuple[str, str, str]] = []
    source_keys: dict[str, KeyDict] = {}
    for texts in _source_batches(run.source, item):
        canonical = canonical_rows(texts, item.names, item.types, item.key)
        positions = [item.names.index(k) for k in item.keys]
        for original, values in zip(texts, canonical, strict=True):
            key = row_text([values[i] for i in positions])
            if key in item.left_out:
                continue
            source_rows.append((key, md5_hex(key), md5_hex(row_text(values))))
            source_keys[key] = {item.names[i]: original[i] for i in positions}
    theirs = pq.read_table(item.out)
    lake_rows = list(
        zip(
            theirs.column("k").to_pylist(),
            theirs.column("kh").to_pylist(),
            theirs.column("rh").to_pylist(),
            strict=True,
        )
    )
    keyed = len(item.keys) < len(item.names)
    found = compare(
        MemorySide(source_rows), MemorySide(lake_rows), levels(len(source_rows)), keyed=keyed
    )
    return TableResult.from_differences(
        item.key,
        name,
        found,
        item.keys,
        left_out=item.left_out_count,
        sample_size=run.sample_size,
        key_text_for=source_keys,
    )


def _source_batches(conn: psycopg.Connection[Any], item: _Table) -> Any:
    """The source's rows in the snapshot, as PostgreSQL text (``TEXT_OUTPUT`` is set), in batches."""
    typed = dict(table_columns(conn, item.source))
    absent = [n for n in item.names if n not in typed]
    if absent:
        raise ReconcileError(
            f"table {item.source} has no column(s) {', '.join(map(repr, absent))} in the source"
        )
    select = sql.SQL(", ").join(
        sql.SQL(output_text("{col}", typed[n])).format(col=sql.Identifier(n)) for n in item.names
    )
    with conn.cursor(name=f"pgsync_reconcile_{uuid.uuid4().hex[:8]}") as cursor:
        cursor.execute(sql.SQL("SELECT {} FROM {}").format(select, item.source.identifier))
        while True:
            rows = cursor.fetchmany(FETCH_ROWS)
            if not rows:
                return
            yield rows
