"""docs/operators.md cannot drift from the code: every public operator, sensor and trigger of
the provider is documented with its import path; every argument in its table exists in the
class's ``__init__`` (its own or an inherited pgsync one) with the type, default and
templating shown; every such argument is in the table; every example block runs."""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_pgsync.provider_info import get_provider_info

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operators.md"

PENDING: dict[str, str] = {}
"""Classes documented before their code lands (name: module); ``test_pending_classes_do_not_exist_yet``
fails as soon as one exists, so the page's check cannot skip a class that is there."""

ROW = re.compile(r"^\| `(\w+)` \| `?(.*?)`? \| (required|`.*?`) \| (yes|no) \| (.+) \|$")


@dataclass(frozen=True)
class Documented:
    name: str
    module: str
    arguments: dict[str, tuple[str, str, bool]]  # name -> (type, default, templated)
    examples: list[str]


def _sections() -> dict[str, Documented]:
    found = {}
    for chunk in re.split(r"^## ", PAGE.read_text(), flags=re.MULTILINE)[1:]:
        title = re.match(r"`(\w+)`\n", chunk)
        if title is None:
            continue
        name = title.group(1)
        imported = re.search(rf"^Import: `from ([\w.]+) import {name}`$", chunk, flags=re.MULTILINE)
        assert imported, f"docs/operators.md: section {name} has no 'Import: `from ... import {name}`' line"
        arguments: dict[str, tuple[str, str, bool]] = {}
        for line in chunk.splitlines():
            row = ROW.match(line)
            if row:
                arg, kind, default, templated = row.group(1, 2, 3, 4)
                assert arg not in arguments, f"{name}: argument {arg} documented twice"
                arguments[arg] = (kind.replace("\\|", "|"), default, templated == "yes")
        examples = re.findall(r"```python\n(.*?)```", chunk, flags=re.DOTALL)
        found[name] = Documented(name, imported.group(1), arguments, examples)
    return found


def _public_classes() -> dict[str, type]:
    """Every public class defined in the modules the provider declares (operators, sensors,
    triggers); abstract bases are documented through their subclasses."""
    info = get_provider_info()
    kinds = ("operators", "sensors", "triggers")
    modules = [m for kind in kinds for entry in info[kind] for m in entry["python-modules"]]
    found: dict[str, type] = {}
    for module_name in modules:
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            defined_here = inspect.isclass(obj) and obj.__module__ == module_name
            if defined_here and not name.startswith("_") and not inspect.isabstract(obj):
                found[name] = obj
    return found


def _arguments(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword arguments of ``cls.__init__`` and of the pgsync classes it passes
    ``**kwargs`` on to (the first definition of a name wins, as Python resolves it)."""
    found: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("airflow_provider_pgsync") or "__init__" not in vars(klass):
            continue
        for param in list(inspect.signature(vars(klass)["__init__"]).parameters.values())[1:]:
            if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            found.setdefault(param.name, param)
    return found


def _default(text: str) -> Any:
    return eval(text.strip("`"), {"timedelta": timedelta})  # the docs' own literals


def test_every_public_class_is_documented() -> None:
    documented = _sections()
    classes = _public_classes()
    missing = sorted(set(classes) - set(documented))
    assert not missing, f"docs/operators.md has no section for {missing}"
    unknown = sorted(set(documented) - set(classes) - set(PENDING))
    assert not unknown, f"docs/operators.md documents {unknown}, which the provider does not declare"
    for name, cls in classes.items():
        assert documented[name].module == cls.__module__, (name, documented[name].module, cls.__module__)


def test_pending_classes_do_not_exist_yet() -> None:
    """A pending class that exists must be checked like the others: take it off ``PENDING``
    (and make sure provider_info lists its module)."""
    for name, module_name in PENDING.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue
        assert not hasattr(module, name), f"{name} exists now: remove it from PENDING in {__file__}"


@pytest.mark.parametrize("name", sorted(_public_classes()))
def test_arguments_match_the_code(name: str) -> None:
    cls = _public_classes()[name]
    doc = _sections()[name]
    code = _arguments(cls)
    assert sorted(doc.arguments) == sorted(code), (
        f"{name}: arguments only in the docs {sorted(set(doc.arguments) - set(code))}, "
        f"only in the code {sorted(set(code) - set(doc.arguments))}"
    )
    templated = set(getattr(cls, "template_fields", ()))
    for arg, (kind, default, is_templated) in doc.arguments.items():
        param = code[arg]
        assert kind == str(param.annotation), f"{name}.{arg}: type {kind!r} in the docs, {param.annotation!r}"
        if param.default is inspect.Parameter.empty:
            assert default == "required", f"{name}.{arg}: required in the code, default {default} in the docs"
        else:
            assert default != "required", f"{name}.{arg}: documented as required, default {param.default!r}"
            assert _default(default) == param.default, f"{name}.{arg}: {default} vs {param.default!r}"
        expected = arg in templated
        assert is_templated == expected, f"{name}.{arg}: templated is {expected} in the code"


@pytest.mark.parametrize("name", sorted(set(_sections()) - set(PENDING)))
def test_the_examples_run(name: str) -> None:
    """Each example builds its operator, sensor or trigger (nothing is executed)."""
    from airflow.sdk import DAG

    doc = _sections()[name]
    assert doc.examples, f"{name} has no example"
    for block in doc.examples:
        namespace: dict[str, Any] = {"UTC": UTC, "datetime": datetime}
        with DAG(f"docs_{name}", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
            exec(compile(block, f"{PAGE}:{name}", "exec"), namespace)
        built = [v for v in namespace.values() if type(v).__name__ == name]
        assert built, f"the example of {name} builds no {name}"
