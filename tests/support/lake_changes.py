"""A lake table's base and changes as the lake destination tests build and read them (test-only)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_tables import KIND, LakeTableMeta
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.testing.destination_kit import column

TABLE = TableRef("public", "t")

KEYED = [column("id", 23, key=True), column("note", 25), column("doc", 25)]

ROWS = [column("kind", 25, key=True), column("n", 23, key=True)]

_SPARK = {23: "integer", 25: "string"}


def empty_base(warehouse: Path, columns: list[Any], keys: tuple[str, ...]) -> LakeDestination:
    """A lake whose table ``public.t`` has an empty base and a first generation."""
    lake = LakeDestination.from_config({"warehouse": str(warehouse)})
    fields = [{"name": c.name, "type": _SPARK[c.type_oid], "nullable": True, "metadata": {}} for c in columns]
    location = f"{lake.table_dir(TABLE)}/base/v1"
    Path(location).mkdir(parents=True)
    types = {23: pa.int32(), 25: pa.string()}
    pq.write_table(
        pa.table({c.name: pa.array([], types[c.type_oid]) for c in columns}), f"{location}/part-0.parquet"
    )
    meta = LakeTableMeta(1, location, "v1", None, {"type": "struct", "fields": fields}, keys)
    LakeFiles(lake).publish_generation(TABLE, meta, None)
    return lake


def read_lake(lake: LakeDestination, keys: list[str]) -> list[dict[str, str | None]]:
    """The current rows as PostgreSQL text, folded from the base and the segments."""
    files = LakeFiles(lake)
    meta = files.current(TABLE)
    assert meta is not None
    records = [(r, "P" if keys else "+") for r in pq.read_table(f"{meta.base}/part-0.parquet").to_pylist()]
    for _, path in files.segments(TABLE, meta):
        records += [(r, r[KIND]) for r in pq.read_table(path).to_pylist()]
    current: dict[tuple[Any, ...], dict[str, Any]] = {}
    counted: Counter[tuple[Any, ...]] = Counter()
    names = list(records[-1][0]) if records else []
    names = [n for n in names if not n.startswith("_")]
    for row, kind in records:
        values = {n: row.get(n) for n in names}
        if kind == "T":
            current.clear()
            counted.clear()
        elif kind == "P":
            current[tuple(row[k] for k in keys)] = values
        elif kind == "D":
            current.pop(tuple(row[k] for k in keys), None)
        else:
            counted[tuple(values.items())] += 1 if kind == "+" else -1
    rows = list(current.values()) + [dict(k) for k, n in counted.items() for _ in range(n)]
    return [{n: (None if v is None else str(v)) for n, v in r.items()} for r in rows]
