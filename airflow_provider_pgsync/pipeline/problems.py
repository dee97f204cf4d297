"""Problems of pipeline configs, each with its key path, the checks that collect them, and durations.

Every config class checks all its fields in ``__post_init__`` with a ``Checks`` and raises one
PipelineConfigError listing every problem; a problem of a part found while checking the whole
gets the part's key path in front (``tables[1].row_filter``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import shown

_DURATION = re.compile(r"(\d+)\s*([smhdw])")
_DURATION_UNITS = {"w": timedelta(weeks=1), "d": timedelta(days=1), "h": timedelta(hours=1),
                   "m": timedelta(minutes=1), "s": timedelta(seconds=1)}  # fmt: skip
_MAX_PROBLEM_CHARS = 600
_MAX_LOCATION_CHARS = 4096  # PATH_MAX of Linux
_VALUE_NAMES = {bool: "the boolean", int: "the integer", float: "the number", str: "the string"}


# ---- problems ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong in a pipeline config: its key path and what is wrong."""

    path: str
    message: str

    def under(self, prefix: str) -> ConfigProblem:
        """The same problem with its path inside ``prefix``."""
        return ConfigProblem(join_path(prefix, self.path), self.message)

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        if len(text) <= _MAX_PROBLEM_CHARS:
            return text
        # a huge value (or key) in the message: keep the key path and the remedy around it
        half = _MAX_PROBLEM_CHARS // 2
        return f"{text[:half]}...({len(text) - 2 * half} characters)...{text[-half:]}"


class PipelineConfigError(ConfigError):
    """A pipeline config is not acceptable; lists every problem found, each with its key path."""

    def __init__(self, problems: Sequence[ConfigProblem], *, source: str = "pipeline config") -> None:
        self.problems = tuple(problems)
        self.source = source
        lines = [f"{source} has {len(self.problems)} problem(s):", *(f"  - {p}" for p in self.problems)]
        super().__init__("\n".join(lines))


def join_path(prefix: str, path: str) -> str:
    """Key path ``path`` inside ``prefix`` (``a`` and ``b`` give ``a.b``, ``a`` and ``[0]`` ``a[0]``)."""
    if not prefix or not path:
        return prefix or path
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


# ---- checks --------------------------------------------------------------------------------


class Checks:
    """Problems found while checking one object, by key path relative to it."""

    def __init__(self) -> None:
        self.found: list[ConfigProblem] = []

    def add(self, path: str, message: str) -> None:
        self.found.append(ConfigProblem(path, message))

    def catch(self, path: str, check: Callable[[], object]) -> None:
        """Run ``check``; a ConfigError it raises becomes a problem at ``path``."""
        try:
            check()
        except PipelineConfigError as error:
            self.found.extend(p.under(path) for p in error.problems)
        except ConfigError as error:
            self.add(path, str(error))

    def raise_any(self, what: str) -> None:
        if self.found:
            raise PipelineConfigError(self.found, source=what)


def choice(value: object, allowed: Sequence[str]) -> str | None:
    """The problem with ``value`` if it is not one of ``allowed``."""
    if value in allowed:
        return None
    return f"{shown(value)} is not allowed; use one of: {', '.join(allowed)}"


def is_text(value: object) -> bool:
    """Whether ``value`` is a string with more than white space."""
    return isinstance(value, str) and bool(value.strip())


_CONN_ID = re.compile(r"[\w.-]{1,200}")  # Airflow 3's rule for connection ids (its REST API's)


def conn_id_problem(value: object) -> str | None:
    """What is wrong with ``value`` as the id of an Airflow connection (None: nothing)."""
    if isinstance(value, str) and _CONN_ID.fullmatch(value):
        return None
    return f"must name an Airflow connection (1-200 letters, digits, _, . or -), not {shown(value)}"


def location_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a folder or URI that every task reads the same way."""
    if not isinstance(value, str) or not value.strip():
        return f"must be an absolute folder or a URI, not {shown(value)}; or omit it for the default"
    if len(value) > _MAX_LOCATION_CHARS or not value.isprintable():
        return (
            f"{shown(value)} is not a usable folder or URI: give at most {_MAX_LOCATION_CHARS} "
            "printable characters (no NUL, line breaks or other control characters)"
        )
    if "://" in value or value.startswith("file:") or os.path.isabs(value):
        return None
    return f"{value!r} is relative to the folder a task runs in: give an absolute folder or a URI"


def describe(value: object) -> str:
    """A config value as an error message shows it (lists and mappings not in full)."""
    if value is None:
        return "null"
    if isinstance(value, list | Mapping):
        return "a list" if isinstance(value, list) else "a mapping"
    name = _VALUE_NAMES.get(type(value))
    return f"{name} {shown(value)}" if name else shown(value)


def set_field(obj: object, name: str, value: object) -> None:
    """Normalise a field of a frozen dataclass in its ``__post_init__``."""
    object.__setattr__(obj, name, value)


# ---- durations -----------------------------------------------------------------------------


def parse_duration(text: str) -> timedelta:
    """``"36h"``, ``"7d"``, ``"2w"`` (units s, m, h, d, w) as a timedelta."""
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(
            f"{shown(text)} is not a duration; write a whole number and a unit, e.g. 36h, 7d or 2w"
        )
    try:
        return int(match.group(1)) * _DURATION_UNITS[match.group(2)]
    except (OverflowError, ValueError):  # beyond timedelta's 999999999 days
        raise ConfigError(f"{shown(text)} is too long a duration; e.g. 36h, 7d or 2w") from None


def format_duration(value: timedelta) -> str:
    """The text ``parse_duration`` reads back as ``value`` in its largest whole unit up to days."""
    if value == timedelta(0):
        return "0h"
    for unit in "dhms":
        size = _DURATION_UNITS[unit]
        if value % size == timedelta(0):
            return f"{value // size}{unit}"
    raise ConfigError(f"duration {value} is not a whole number of seconds")
