"""The example destination of docs/writing-a-destination.md works as written, under the kit."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.testing.destination_kit import (
    Change,
    column,
    run_baseline_lifecycle,
    run_lifecycle,
)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "writing-a-destination.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def _example() -> Any:
    namespace: dict[str, Any] = {"__name__": "example_destination"}
    exec(compile(_blocks()[0], str(PAGE), "exec"), namespace)
    return namespace["SqliteDestination"]


def _reader(path: Path):  # type: ignore[no-untyped-def]
    def read(table: TableRef) -> list[dict[str, str | None]]:
        db = sqlite3.connect(path)
        cur = db.execute(f'SELECT * FROM "{table.schema}.{table.name}"')  # noqa: S608 (test table)
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        db.close()
        return rows

    return read


def test_the_example_destination_passes_the_kit(tmp_path: Path) -> None:
    """The page's second block, with its placeholders filled in, runs as written."""
    path = tmp_path / "dest.sqlite"
    usage = _blocks()[1].replace("my_destination", "destination").replace("my_reader", "reader")
    namespace = {"destination": _example()(str(path)), "reader": _reader(path)}
    exec(compile(usage, str(PAGE), "exec"), namespace)


@pytest.mark.parametrize("batch_size", [1, 2, 50])
def test_the_example_destination_keeps_toast_and_follows_key_changes(tmp_path: Path, batch_size: int) -> None:
    path = tmp_path / "dest.sqlite"
    columns = [column("id", 23, key=True), column("v", 25), column("doc", 25)]
    changes = [
        Change("I", {"id": "1", "v": "a", "doc": "big"}),
        Change("I", {"id": "2", "v": "b", "doc": "big2"}),
        Change("U", {"id": "1", "v": "a2"}, unchanged=("doc",)),
        Change("U", {"id": "5", "v": "moved"}, old_key={"id": "2"}, unchanged=("doc",)),
        Change("T"),
        Change("I", {"id": "9", "v": "after", "doc": None}),
    ]
    rows = run_lifecycle(
        _example()(str(path)),
        TableRef("public", "t"),
        columns,
        changes,
        read_rows=_reader(path),
        batch_size=batch_size,
    )
    assert rows == [{"id": "9", "v": "after", "doc": None}]


def test_the_example_destination_passes_the_baseline_kit(tmp_path: Path) -> None:
    """The page's baseline block, with its placeholders filled in, runs as written."""
    path = tmp_path / "dest.sqlite"
    usage = _blocks()[2].replace("my_destination", "destination").replace("my_reader", "reader")
    assert "run_baseline_lifecycle" in usage
    namespace = {"destination": _example()(str(path)), "reader": _reader(path)}
    exec(compile(usage, str(PAGE), "exec"), namespace)


@pytest.mark.parametrize("batch_size", [1, 3, 50])
def test_a_rebaseline_replaces_rows_watermark_and_columns(tmp_path: Path, batch_size: int) -> None:
    path = tmp_path / "dest.sqlite"
    columns = [column("id", 23, key=True), column("v", 25)]
    rows = [{"id": str(i), "v": None if i % 3 == 0 else f"v{i}"} for i in range(10)]
    final = run_baseline_lifecycle(
        _example()(str(path)),
        TableRef("public", "t"),
        columns,
        rows,
        [Change("D", {"id": "0"}), Change("U", {"id": "5", "v": "x"}), Change("T"), Change("I", {"id": "1"})],
        read_rows=_reader(path),
        second_rows=rows[:4],
        batch_size=batch_size,
    )
    assert sorted(map(str, final)) == sorted(map(str, rows[:4]))


def test_the_kit_catches_a_baseline_that_keeps_the_watermark(tmp_path: Path) -> None:
    """A destination whose load_baseline forgets to clear the watermark fails the kit."""
    cls = _example()

    class Forgetful(cls):  # type: ignore[misc, valid-type]
        def load_baseline(self, table, columns, batches, lineage):  # type: ignore[no-untyped-def]
            mark = self.watermark(table)
            rows = super().load_baseline(table, columns, batches, lineage)
            if mark is not None:
                self.db.execute("INSERT INTO watermarks VALUES (?, ?, ?)", (str(table), *mark))
            return rows

    path = tmp_path / "dest.sqlite"
    with pytest.raises(AssertionError, match="watermark"):
        run_baseline_lifecycle(
            Forgetful(str(path)),
            TableRef("public", "t"),
            [column("id", 23, key=True), column("v", 25)],
            [{"id": "1", "v": "a"}],
            [Change("U", {"id": "1", "v": "b"})],
            read_rows=_reader(path),
            second_rows=[{"id": "2", "v": "c"}],
        )
