"""The table of lake names in docs/destinations.md is what the lake destination gives those
tables, and its one-line lookup runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from airflow_provider_pgsync.destinations.lake import catalog_name
from airflow_provider_pgsync.source.names import TableRef

PAGE = Path(__file__).resolve().parents[2] / "docs" / "destinations.md"


def _section() -> str:
    text = PAGE.read_text()
    start = text.index("## Table and column names in the destinations")
    return text[start : text.index("\n## ", start)]


def test_every_row_of_the_names_table_is_the_lake_name() -> None:
    rows = re.findall(r"^\| `([^`]+)` \| `pgsync\.([a-z0-9_]+)` \|", _section(), flags=re.MULTILINE)
    assert len(rows) >= 8
    for source, lake in rows:
        assert catalog_name(TableRef.parse(source)) == lake, source


def test_the_lookup_command_prints_the_lake_name() -> None:
    block = re.search(r"```sh\n\.venv/bin/python -c '(.*?)'\n```", _section(), flags=re.DOTALL)
    assert block is not None
    out = subprocess.run([sys.executable, "-c", block.group(1)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "public_order_items_6f25da24"
