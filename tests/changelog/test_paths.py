"""Deterministic, filesystem-safe segment paths."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

from airflow_provider_pgsync.changelog.paths import segment_path, table_folder
from airflow_provider_pgsync.source.names import TableRef

ODD = TableRef("Sales Data", 'Odd "Name"; DROP TABLE x;--')


def test_layout() -> None:
    path = segment_path(TableRef("public", "orders"), 3, 0x16B3748, 0x1_0000_0000, 7)
    assert path == "public.orders/v0003/00000000016B3748-0000000100000000-0007.parquet"


def test_odd_names_are_single_safe_path_segments() -> None:
    folder = table_folder(ODD)
    assert "/" not in folder and '"' not in folder and ";" not in folder and " " not in folder
    schema, name = folder.split(".")
    assert (unquote(schema), unquote(name)) == (ODD.schema, ODD.name)


def test_dots_do_not_make_names_ambiguous() -> None:
    assert table_folder(TableRef("a.b", "c")) != table_folder(TableRef("a", "b.c"))
    assert table_folder(TableRef(".", "..")) == "%2E.%2E%2E"


def test_long_unicode_names_fit_a_file_name(tmp_path: Path) -> None:
    one = TableRef("ü" * 31, "表" * 21)
    two = TableRef("ü" * 31, "表" * 20 + "x")
    folder = table_folder(one)
    assert len(folder.encode()) <= 200 and "+" in folder
    assert folder != table_folder(two)
    (tmp_path / folder).mkdir()  # the filesystem accepts it


def test_case_is_kept() -> None:
    assert table_folder(TableRef("public", "Orders")) != table_folder(TableRef("public", "orders"))
