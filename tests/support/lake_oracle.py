"""A lake table's current rows read with pyarrow alone, for the tests' intermediate checks
(test-only): no Spark driver, and none of the view's merge SQL (``lake_tables.merge_sql``),
so it checks that SQL too where a scenario still reads the view through Spark.

From the table's current generation (``LakeFiles``): the base's rows, then the records of
the lineage's lake segments after the generation's watermark in their order (LSN, sequence,
position). A TRUNCATE (``T``) removes every record before it, the base's included; for a
keyed table the latest record of a key decides (``P`` present with its values, ``D`` gone);
for a table whose identity is the whole row, ``+`` and ``-`` count copies. Values are given
as PostgreSQL's text of them for the types scenario tables use (integers, text, booleans);
another type is refused: check such a table through the Spark view.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_tables import KIND, LSN_COL, POS_COL, SEQ_COL
from airflow_provider_pgsync.source.names import TableRef

Row = tuple[str | None, ...]
_BASE_ORDER = (-1, 0, 0)  # the base comes before every record, as in the view


def lake_rows(lake: Path, table: str, columns: Sequence[str]) -> list[Row]:
    """The current rows of ``table``'s ``columns`` in the lake warehouse ``lake``, as text, in
    ``rows``' order (tests/support/replica.py)."""
    files = LakeFiles(LakeDestination.from_config({"warehouse": str(lake)}))
    ref = TableRef.parse(table)
    meta = files.current(ref)
    assert meta is not None, f"lake table {table} has no generation: it was never baselined"
    missing = [c for c in columns if c not in meta.columns]
    assert not missing, f"lake table {table} has no column(s) {missing} in its current generation"
    base = pq.read_table(files.path(meta.base), columns=list(columns))
    keyed = bool(meta.keys)
    records: list[tuple[tuple[int, int, int], str, Row]] = [
        (_BASE_ORDER, "P" if keyed else "+", row) for row in _texts(base, columns, table)
    ]
    after = meta.watermark
    for _, path in files.segments(ref, meta):
        segment = pq.read_table(path)
        present = [c for c in columns if c in segment.column_names]
        values = _texts(segment.select(present), present, table)
        orders = zip(
            segment.column(LSN_COL).to_pylist(),
            segment.column(SEQ_COL).to_pylist(),
            segment.column(POS_COL).to_pylist(),
            strict=True,
        )
        for order, kind, row in zip(orders, segment.column(KIND).to_pylist(), values, strict=True):
            if after is None or order[:2] > tuple(after):
                full = dict(zip(present, row, strict=True))
                records.append((order, kind, tuple(full.get(c) for c in columns)))
    cuts = [order for order, kind, _ in records if kind == "T"]
    cut = max(cuts) if cuts else None
    live = sorted((r for r in records if r[1] != "T" and (cut is None or r[0] > cut)), key=lambda r: r[0])
    if keyed:
        positions = [columns.index(k) for k in meta.keys]
        latest: dict[Row, tuple[str, Row]] = {}
        for _, kind, row in live:
            latest[tuple(row[i] for i in positions)] = (kind, row)
        found = [row for kind, row in latest.values() if kind == "P"]
    else:
        counts: Counter[Row] = Counter()
        for _, kind, row in live:
            counts[row] += -1 if kind == "-" else 1
        found = [row for row, n in counts.items() for _ in range(max(n, 0))]
    return sorted(found, key=lambda r: tuple((v is None, v or "") for v in r))


def _texts(data: pa.Table, columns: Sequence[str], table: str) -> list[Row]:
    """The rows of ``data`` as PostgreSQL's text of their values."""
    for name in columns:
        kind = data.schema.field(name).type
        if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_boolean(kind)):
            raise AssertionError(
                f"lake table {table}: column {name} is {kind}, which the lake oracle does not read "
                "as PostgreSQL's text; check the table through the Spark view"
            )
    values = [data.column(name).to_pylist() for name in columns]
    return [tuple(_text(v) for v in row) for row in zip(*values, strict=True)] if values else []


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value)
