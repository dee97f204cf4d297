"""The pipeline package: what it exports, and modules that import only the modules above them."""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType

from airflow_provider_pgsync import pipeline

LAYERS = ("problems", "schedules", "parts", "destination_configs", "reading_parts", "config", "reading")
"""The package's modules, each importing (of the package) only modules before it: no cycles."""


def test_the_package_exports_its_public_names() -> None:
    assert sorted(pipeline.__all__) == pipeline.__all__
    imported = {
        n for n, v in vars(pipeline).items() if not n.startswith("_") and not isinstance(v, ModuleType)
    }
    assert imported == set(pipeline.__all__)


def test_each_module_imports_only_modules_above_it() -> None:
    folder = Path(pipeline.__file__).parent
    assert {p.stem for p in folder.glob("*.py")} == {"__init__", *LAYERS}
    for i, name in enumerate(LAYERS):
        tree = ast.parse((folder / f"{name}.py").read_text())
        imported = {
            node.module.removeprefix("airflow_provider_pgsync.pipeline.")
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("airflow_provider_pgsync.pipeline")
        }
        assert imported <= set(LAYERS[:i]), f"{name} imports {sorted(imported - set(LAYERS[:i]))}"
