"""Helpers of the scenario tests that follow a source through every destination kind at once (a
lake, a PostgreSQL replica and a custom destination): the custom destination, and the row by
row comparison of each with the source, and the writer that runs beside them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.apply.lake import lake_session, sort_rows, view_query
from tests.conftest import Database
from tests.dags.conftest import PipelineDags
from tests.support.lake_oracle import lake_rows
from tests.support.replica import column_names, rows
from tests.support.sqlite_destination import PAGE, source_text, sqlite_text

KINDS = ("lake", "replica", "sqlite")
"""The destinations' names in ``destinations(...)``: one of each kind."""

MULTISET = '''

from airflow_provider_pgsync.apply.net import Truncate, is_keyed, row_changes


class MultisetSqlite(SqliteDestination):
    """The example, with tables without a key (REPLICA IDENTITY FULL) as multisets of rows: an
    old row removes one equal row (a row it does not find fails the batch), a new row adds one."""

    def open_table(self, table, columns, schema_version):
        if is_keyed(columns):
            return super().open_table(table, columns, schema_version)
        cols = ", ".join(f"{_col(c.name)} TEXT" for c in columns)
        self.db.execute(f"CREATE TABLE IF NOT EXISTS {_name(table)} ({cols})")

    def apply(self, table, columns, changes, upto):
        if is_keyed(columns):
            return super().apply(table, columns, changes, upto)
        names = [c.name for c in columns]
        same = " AND ".join(f"{_col(n)} IS ?" for n in names)
        insert = f"INSERT INTO {_name(table)} VALUES ({', '.join('?' for _ in names)})"
        first = f"SELECT rowid FROM {_name(table)} WHERE {same} LIMIT 1"
        remove = f"DELETE FROM {_name(table)} WHERE rowid = ({first})"
        self.db.execute("BEGIN")
        try:
            for change in row_changes(columns, changes):
                if isinstance(change, Truncate):
                    self.db.execute(f"DELETE FROM {_name(table)}")
                    continue
                if change.old is not None:
                    if self.db.execute(remove, [change.old[n] for n in names]).rowcount != 1:
                        raise DestinationError(f"{table}: row {change.old} is missing; rebaseline the table")
                if change.new is not None:
                    self.db.execute(insert, [change.new[n] for n in names])
            self.db.execute(
                "INSERT OR REPLACE INTO watermarks (tbl, lsn, seq) VALUES (?, ?, ?)", (str(table), *upto)
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
'''


@pytest.fixture
def multiset_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The class path of ``MultisetSqlite`` (the example of docs/writing-a-destination.md with
    tables without a key), importable by the tasks."""
    import re

    block = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)[0]
    name = f"multiset_sqlite_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "multiset_modules"
    folder.mkdir()
    (folder / f"{name}.py").write_text(block + MULTISET)
    monkeypatch.syspath_prepend(str(folder))
    return f"{name}.MultisetSqlite"


def destinations(sqlite_class: str, path: Path) -> list[dict[str, str]]:
    """A lake, the replica of connection ``pgsync_replica`` and the custom destination."""
    return [
        {"kind": "lake"},
        {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"},
        {"kind": "custom", "class": sqlite_class, "name": "sqlite", "path": str(path)},
    ]


def phases(pipeline: PipelineDags, tables: list[str]) -> dict[tuple[str, str], str]:
    state = pipeline.state()
    return {(t, d): state.table(t).destination(d).phase.kind for t in tables for d in KINDS}


def equal_without_spark(database: Database, replica: Database, path: Path, tables: list[str]) -> None:
    """The replica and the custom destination hold the source's rows (as text, duplicates counted)."""
    for table in tables:
        assert rows(replica, table) == rows(database, table), f"{table} differs in the replica"
        assert sqlite_text(path, table) == source_text(database, table), f"{table} differs in sqlite"


def equal_everywhere(
    database: Database,
    replica: Database,
    path: Path,
    lake: Path,
    tables: list[str],
    *,
    compact: list[str] | None = None,
    spark: bool = True,
) -> None:
    """Every destination holds the source's rows. The lake is read by the lake oracle
    (``tests/support/lake_oracle.py``) and, with ``spark``, through its views in one Spark
    session (after compacting the ``compact`` tables there: a column added joins the view then),
    which must agree. A scenario keeps one check through Spark; its others need no driver."""
    equal_without_spark(database, replica, path, tables)
    found: list[Any] = []
    if spark or compact:
        steps: list[dict[str, object]] = [{"compact": compact}] if compact else []
        found = lake_session(lake, [*steps, *({"sql": view_query(database, t)} for t in tables)])[
            len(steps) :
        ]
    for i, table in enumerate(tables):
        expected = rows(database, table)
        assert lake_rows(lake, table, column_names(database, table)) == expected, (
            f"{table} differs in the lake (read by the lake oracle)"
        )
        if found:
            assert sort_rows(found[i]) == expected, f"{table} differs in the lake's view (Spark)"
