"""What the pipeline config tests share: a minimal pipeline, the documented example, files."""

from __future__ import annotations

import textwrap
from pathlib import Path

from airflow_provider_pgsync.pipeline import reading
from airflow_provider_pgsync.pipeline.problems import PipelineConfigError

MINIMAL = {"name": "shop", "source_conn_id": "shop_db", "tables": ["orders"]}


def example_yaml() -> str:
    """The complete example of the ``reading`` module's docstring."""
    doc = reading.__doc__
    assert doc is not None
    return textwrap.dedent(doc.split("::\n", 1)[1])


def write(tmp_path: Path, text: str, name: str = "pgsync.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problem(error: PipelineConfigError, path: str) -> str:
    """The message of the problem at ``path`` (fails listing every problem when there is none)."""
    found = [p.message for p in error.problems if p.path == path]
    assert found, f"no problem at {path!r}; found:\n{error}"
    return found[0]
