"""The package's import direction: the pure core imports no I/O, and apply defines the destination
contract that destinations implement (destinations import apply, never the reverse).

Every import statement counts, also one inside a function (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "airflow_provider_pgsync"
ROOT = "airflow_provider_pgsync"

FORBIDDEN: dict[str, tuple[str, ...]] = {
    # apply/ defines what it writes to (apply/destination.py); destinations/ implement it
    "apply": ("airflow", f"{ROOT}.destinations", f"{ROOT}.hooks", f"{ROOT}.operators"),
    "state": ("airflow", "psycopg", f"{ROOT}.hooks", f"{ROOT}.destinations", f"{ROOT}.operators"),
    "pgoutput": ("airflow", "psycopg", f"{ROOT}.hooks", f"{ROOT}.destinations", f"{ROOT}.operators"),
    "changelog": ("airflow", "psycopg", f"{ROOT}.hooks", f"{ROOT}.destinations", f"{ROOT}.operators"),
    # source/ composes SQL with psycopg.sql (ALLOWED), and holds no connection of its own
    "source": ("airflow", "psycopg", f"{ROOT}.hooks", f"{ROOT}.destinations", f"{ROOT}.operators"),
}
# what a folder may import although FORBIDDEN names its package
ALLOWED: dict[str, tuple[str, ...]] = {"source": ("psycopg.sql",)}


def imported(tree: ast.AST, module: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``, the source of ``module`` (dotted name),
    relative imports resolved."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[: -node.level]
                base = ".".join([*parent, base] if base else parent)
            # ``from a import b``: what is imported is ``a.b`` (a module of ``a`` or a name in it)
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def forbidden(folder: str, name: str) -> bool:
    """Whether modules under ``folder`` may not import ``name``."""

    def under(prefixes: tuple[str, ...]) -> bool:
        return any(name == p or name.startswith(p + ".") for p in prefixes)

    return under(FORBIDDEN[folder]) and not under(ALLOWED.get(folder, ()))


def violations(folder: str) -> list[str]:
    """``file:line imports module`` for each forbidden import under ``folder`` of the package."""
    bad: list[str] = []
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        module = ".".join([ROOT, *path.relative_to(PACKAGE).with_suffix("").parts])
        for line, name in imported(ast.parse(path.read_text(), str(path)), module):
            if forbidden(folder, name):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}")
    return bad


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_the_pure_core_imports_no_io_and_apply_no_destination(folder: str) -> None:
    assert (PACKAGE / folder).is_dir()
    assert violations(folder) == []


def test_a_lazy_or_relative_import_counts() -> None:
    tree = ast.parse(
        "def f():\n"
        "    from airflow_provider_pgsync.destinations.protocol import Destination\n"
        "from ..hooks import replication\n"
        "import psycopg.sql\n"
    )
    names = [name for _, name in imported(tree, f"{ROOT}.state.model")]
    assert f"{ROOT}.destinations.protocol.Destination" in names
    assert f"{ROOT}.hooks.replication" in names
    assert "psycopg.sql" in names
    assert all(forbidden("state", name) for name in names)


def test_source_composes_sql_with_psycopg_but_holds_no_connection() -> None:
    tree = ast.parse("from psycopg import sql\nimport psycopg.sql\nfrom psycopg import Connection\n")
    names = [name for _, name in imported(tree, f"{ROOT}.source.names")]
    assert [forbidden("source", name) for name in names] == [False, False, True]
    assert forbidden("source", "psycopg") and forbidden("source", "psycopg.conninfo")


def test_the_destination_contract_keeps_its_documented_name() -> None:
    # custom destinations and docs/writing-a-destination.md import it from destinations.protocol
    from airflow_provider_pgsync.apply import destination
    from airflow_provider_pgsync.destinations import protocol

    for name in ("Destination", "SchemaAnswer", "SchemaDecision", "TouchedKeys", "schema_decision"):
        assert getattr(protocol, name) is getattr(destination, name)
