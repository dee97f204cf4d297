"""The package declares every distribution it imports, and writes its version in one place
(pyproject.toml reads ``airflow_provider_pgsync.__version__``)."""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from collections.abc import Mapping
from importlib.metadata import distributions, packages_distributions, requires, version
from pathlib import Path

from packaging.requirements import Requirement

import airflow_provider_pgsync
from airflow_provider_pgsync.provider_info import get_provider_info

PACKAGE = Path(airflow_provider_pgsync.__file__).parent
DISTRIBUTION = "airflow-provider-pgsync"
AIRFLOW_PARTS = {"apache-airflow-core": "apache-airflow", "apache-airflow-task-sdk": "apache-airflow"}
"""Airflow 3 installs its core and task SDK as parts of ``apache-airflow``, in its release."""


def _imports() -> dict[str, str]:
    """``{absolute module imported: the first file importing it}`` over the package."""
    found: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name, str(path.relative_to(PACKAGE)))
    return found


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _declared() -> set[str]:
    return {_canonical(Requirement(r).name) for r in requires(DISTRIBUTION) or [] if "extra ==" not in r}


@functools.cache
def _top_level_owners() -> Mapping[str, list[str]]:
    """``{top-level module: distributions installing it}`` (read once)."""
    return packages_distributions()


@functools.cache
def _airflow_files() -> dict[Path, str]:
    """``{file: distribution}`` of Airflow's and its providers' installed files (read once)."""
    found: dict[Path, str] = {}
    for dist in distributions():
        name = _canonical(dist.metadata["Name"] or "")
        if name.startswith("apache-airflow"):
            for file in dist.files or []:
                if file.suffix == ".py":
                    found[Path(str(dist.locate_file(file))).resolve()] = AIRFLOW_PARTS.get(name, name)
    return found


def _installed_by(module: str) -> str:
    """The distribution whose files hold ``module``: Airflow and its providers share the
    ``airflow`` package, so an ``airflow...`` import is traced to its file."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"{module} is not installed"
    origin = Path(spec.origin).resolve()
    assert origin in _airflow_files(), f"no distribution installed {module} ({origin})"
    return _airflow_files()[origin]


def test_every_distribution_the_package_imports_is_declared() -> None:
    declared, missing = _declared(), []
    for module, where in _imports().items():
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top in ("airflow_provider_pgsync", "__future__"):
            continue
        if top == "airflow":
            owners = {_installed_by(module)}
        else:
            owners = {_canonical(d) for d in _top_level_owners().get(top, [])}
            assert owners, f"{module} (imported in {where}) belongs to no installed distribution"
        if not owners & declared:
            missing.append(f"{module} ({where}): one of {sorted(owners)}")
    assert not missing, "imported, not declared in pyproject.toml's dependencies: " + "; ".join(missing)


def test_the_version_is_written_once() -> None:
    assert version(DISTRIBUTION) == airflow_provider_pgsync.__version__
    assert get_provider_info()["versions"] == [airflow_provider_pgsync.__version__]
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text()
    assert airflow_provider_pgsync.__version__ not in pyproject, "pyproject.toml writes the version again"


def test_pyspark_is_not_pinned_to_one_release() -> None:
    for text in requires(DISTRIBUTION) or []:
        requirement = Requirement(text)
        if requirement.name in ("pyspark", "pyspark-client"):
            assert not any(spec.operator == "==" for spec in requirement.specifier), text
