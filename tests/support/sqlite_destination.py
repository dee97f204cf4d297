"""The SQLite destination of docs/writing-a-destination.md as the tests use it: the page's
example as an importable module (fixture ``example_module``, with a slow and a broken variant),
and the rows of the source and of a SQLite file as text (test-only)."""

from __future__ import annotations

import re
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Database

PAGE = Path(__file__).resolve().parents[2] / "docs" / "writing-a-destination.md"

SLOW = '''

import time as _time


class SlowSqlite(SqliteDestination):
    """The example, slow to take its baseline: the source's writer commits meanwhile."""

    def load_baseline(self, table, columns, batches, lineage):
        _time.sleep(float(self.name.rsplit("_", 1)[-1]))
        return super().load_baseline(table, columns, batches, lineage)


class BrokenSqlite(SqliteDestination):
    """The example, failing part way through its baseline (after reading a batch)."""

    def load_baseline(self, table, columns, batches, lineage):
        def failing():
            yield next(batches)
            raise RuntimeError("the disk is full")

        return super().load_baseline(table, columns, failing(), lineage)
'''


@pytest.fixture
def example_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The page's example destination as an importable module; its name."""
    block = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)[0]
    name = f"sqlite_dest_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "modules"
    folder.mkdir()
    (folder / f"{name}.py").write_text(block + SLOW)
    monkeypatch.syspath_prepend(str(folder))
    return name


def source_text(database: Database, table: str) -> list[tuple[str | None, ...]]:
    """The source's rows as the output functions write them under capture's text settings."""
    with database.connect(autocommit=False) as conn:
        for setting in (
            "TimeZone = 'UTC'",
            "DateStyle = 'ISO'",
            "IntervalStyle = 'postgres'",
            "extra_float_digits = 3",
            "bytea_output = 'hex'",
        ):
            conn.execute(f"SET LOCAL {setting}")
        names = [
            r[0]
            for r in conn.execute(
                "SELECT attname::text FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                " AND NOT attisdropped ORDER BY attnum",
                (table,),
            ).fetchall()
        ]
        with conn.cursor().copy(f"COPY {table} TO STDOUT") as copy:
            copy.set_types(["text"] * len(names))
            return sorted(copy.rows(), key=_order)


def sqlite_text(path: Path, table: str) -> list[tuple[str | None, ...]]:
    db = sqlite3.connect(path)
    try:
        return sorted(db.execute(f'SELECT * FROM "{table}"').fetchall(), key=_order)  # noqa: S608
    finally:
        db.close()


def _order(row: tuple[Any, ...]) -> tuple[tuple[bool, str], ...]:
    return tuple((v is None, str(v or "")) for v in row)
