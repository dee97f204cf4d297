"""psycopg adapters for ``pg_lsn`` and a fast first-column row factory."""

from __future__ import annotations

import operator
from typing import Any

from psycopg.adapt import AdaptersMap, Dumper, Loader
from psycopg.pq import Format
from psycopg.rows import RowMaker

from airflow_provider_pgsync.pgoutput.lsn import LSN

PG_LSN_OID = 3220


class _LsnBinaryLoader(Loader):
    format = Format.BINARY

    def load(self, data: Any) -> LSN:
        return LSN(int.from_bytes(data, "big"))


class _LsnTextLoader(Loader):
    def load(self, data: Any) -> LSN:
        return LSN.parse(bytes(data).decode("ascii"))


class _LsnDumper(Dumper):
    oid = PG_LSN_OID

    def dump(self, obj: Any) -> bytes:
        return str(obj).encode("ascii")


def first_column(cursor: Any) -> RowMaker[Any]:
    """A row factory giving the first column, like ``scalar_row`` but in C (``itemgetter``):
    capture fetches millions of rows, and a Python call per row costs a tenth of a second a million."""
    return operator.itemgetter(0)


def register_lsn(adapters: AdaptersMap) -> None:
    """Load ``pg_lsn`` values as ``LSN`` and send ``LSN`` values as ``pg_lsn``."""
    adapters.register_loader(PG_LSN_OID, _LsnTextLoader)
    adapters.register_loader(PG_LSN_OID, _LsnBinaryLoader)
    adapters.register_dumper(LSN, _LsnDumper)
