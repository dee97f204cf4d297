"""No test module imports another test module: what several test files share lives in
``tests/support/`` (fixtures there are pytest plugins, ``tests/conftest.py``), in a folder's
``conftest.py`` or in a helper module whose name does not start with ``test_``."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _test_modules_imported(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found += [n for n in names if n.startswith("tests.") and n.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_test_module_imports_another() -> None:
    found = {
        str(path.relative_to(TESTS.parent)): imported
        for path in sorted(TESTS.rglob("*.py"))
        if (imported := _test_modules_imported(path))
    }
    assert found == {}, "move what they share to tests/support/: " + repr(found)


def test_the_check_sees_an_import(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text("from tests.apply.test_apply_postgres import rows\nimport tests.support.replica\n")
    assert _test_modules_imported(module) == ["tests.apply.test_apply_postgres"]
