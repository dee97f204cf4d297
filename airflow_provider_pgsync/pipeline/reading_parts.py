"""Reading the parts of a pipeline from plain data (as a YAML file holds them), key by key.

Every problem is recorded with its key path (``tables[1].row_filter``) instead of raised, so a
file's problems are all reported at once: a value of the wrong type and an unknown or missing
key here, everything else by the config classes' own checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pipeline.destination_configs import (
    DESTINATION_KINDS,
    CustomDestinationConfig,
    DestinationConfig,
    LakeDestinationConfig,
    PostgresDestinationConfig,
)
from airflow_provider_pgsync.pipeline.parts import SECTIONS, TableConfig
from airflow_provider_pgsync.pipeline.problems import (
    Checks,
    ConfigProblem,
    choice,
    describe,
    join_path,
    parse_duration,
)
from airflow_provider_pgsync.pipeline.schedules import OnChanges

_T = TypeVar("_T")


@dataclass(frozen=True)
class ValueType:
    """The type a config value must have, as an error message names it."""

    what: str
    test: Callable[[object], bool]


STR = ValueType("a string", lambda v: isinstance(v, str))
OPT_STR = ValueType("a string or null", lambda v: v is None or isinstance(v, str))
INT = ValueType("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
NUMBER = ValueType("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool))
LIST = ValueType("a list", lambda v: isinstance(v, list))
MAPPING = ValueType("a mapping", lambda v: isinstance(v, Mapping))
SCHEDULE = ValueType("a cron expression, a preset or null", lambda v: v is None or isinstance(v, str))
CDC_SCHEDULE = ValueType(
    "a cron expression, a preset, null or a mapping {on_changes: N, max_wait: 60s}",
    lambda v: v is None or isinstance(v, str | Mapping),
)

_TABLE_KEYS = {"table": STR, "columns": LIST, "row_filter": STR}
_DESTINATION_KEYS: dict[str, dict[str, ValueType]] = {
    "lake": {"kind": STR, "warehouse": OPT_STR, "database": STR, "metastore": STR, "metastore_conn_id": STR},
    "postgres": {"kind": STR, "conn_id": STR, "name": STR, "control_schema": STR, "fillfactor": INT},
    "custom": {"kind": STR, "class": STR, "name": STR},  # any other key is an option of the class
}
_SECTION_KEYS: dict[str, dict[str, ValueType]] = {
    "state": {"backend": STR, "conn_id": OPT_STR, "schema": STR},
    "changelog": {"uri": OPT_STR, "retention": STR},
    "spark": {
        "conn_id": STR,
        "conf": MAPPING,
        "jars": OPT_STR,
        "submit_options": MAPPING,
        "password_file": OPT_STR,
    },
    "baseline": {"target_partition_mb": NUMBER, "copy_path": STR, "fetch_size": INT, "backfill_filters": STR},
    "schedules": {"cdc": CDC_SCHEDULE, "compact": SCHEDULE, "retries": INT, "retry_delay": STR},
    "limits": {"max_changes": INT, "batch_rows": INT, "batch_bytes": INT, "peek_statement_timeout": STR},
    "reconcile": {"schedule": SCHEDULE, "repair": STR, "sample_size": INT, "wait_timeout": NUMBER},
}
_ON_CHANGES_KEYS = {"on_changes": INT, "max_wait": STR, "poll_interval": STR}
_DURATIONS = ("retention", "peek_statement_timeout", "retry_delay", "max_wait", "poll_interval")


def read_mapping(
    data: object,
    path: str,
    problems: list[ConfigProblem],
    keys: Mapping[str, ValueType],
    required: Sequence[str] = (),
) -> dict[str, Any] | None:
    """The values of mapping ``data`` whose type is right; a problem for anything else (not a
    mapping, an unknown key, a missing required key, a wrong type). None when ``data`` is not a
    mapping; a required key with a wrong type is missing from the values."""
    if not isinstance(data, Mapping):
        problems.append(ConfigProblem(path, f"must be a mapping, not {describe(data)}"))
        return None
    values = {}
    for key, value in data.items():
        expected = keys.get(key) if isinstance(key, str) else None
        if expected is None:
            problems.append(
                ConfigProblem(join_path(path, str(key)), f"unknown key; allowed: {', '.join(keys)}")
            )
        elif not expected.test(value):
            problems.append(
                ConfigProblem(join_path(path, key), f"must be {expected.what}, not {describe(value)}")
            )
        else:
            values[key] = value
    missing = [key for key in required if key not in data]
    for key in missing:
        problems.append(ConfigProblem(join_path(path, key), "missing (required)"))
    return values


def _complete(values: Mapping[str, Any], required: Sequence[str]) -> bool:
    return all(key in values for key in required)


def build(factory: Callable[..., _T], path: str, problems: list[ConfigProblem], **kwargs: Any) -> _T | None:
    """``factory(**kwargs)``, or None with its problems recorded under ``path``."""
    checks = Checks()
    built: list[_T] = []
    checks.catch(path, lambda: built.append(factory(**kwargs)))
    problems.extend(checks.found)
    return built[0] if built else None


def read_table(data: object, path: str, problems: list[ConfigProblem]) -> TableConfig | None:
    """A table entry: its name, or a mapping of ``table``, ``columns`` and ``row_filter``."""
    if isinstance(data, str):  # a bare name: its problems are the entry's own
        found: list[ConfigProblem] = []
        table = build(TableConfig, path, found, table=data)
        problems.extend(ConfigProblem(path, p.message) for p in found)
        return table
    values = read_mapping(data, path, problems, _TABLE_KEYS, required=("table",))
    if values is None or not _complete(values, ("table",)):
        return None
    return build(TableConfig, path, problems, **values)


def read_destination(data: object, path: str, problems: list[ConfigProblem]) -> DestinationConfig | None:
    """A destination mapping (``kind`` and that kind's options), or just its kind."""
    entry = {"kind": data} if isinstance(data, str) else data
    if not isinstance(entry, Mapping):
        problems.append(ConfigProblem(path, f"must be a mapping with a kind, not {describe(data)}"))
        return None
    kind = entry.get("kind", "lake")
    problem = choice(kind, DESTINATION_KINDS)
    if problem:
        problems.append(ConfigProblem(join_path(path, "kind") if entry is data else path, f"kind {problem}"))
        return None
    if kind == "custom":
        return _read_custom(entry, path, problems)
    postgres = kind == "postgres"
    required = ("conn_id",) if postgres else ()
    values = read_mapping(entry, path, problems, _DESTINATION_KEYS[kind], required=required)
    if values is None or not _complete(values, required):
        return None
    values.pop("kind", None)
    factory: Callable[..., DestinationConfig] = (
        PostgresDestinationConfig if postgres else LakeDestinationConfig
    )
    return build(factory, path, problems, **values)


def _read_custom(
    entry: Mapping[Any, Any], path: str, problems: list[ConfigProblem]
) -> DestinationConfig | None:
    """A custom destination: ``class`` and ``name`` (required), every other key an option."""
    keys = _DESTINATION_KEYS["custom"]
    named = {k: v for k, v in entry.items() if k in keys}
    required = ("class", "name")
    values = read_mapping(named, path, problems, keys, required=required)
    if values is None or not _complete(values, required):
        return None
    options = {k: v for k, v in entry.items() if k not in keys}
    for key in options:
        if not isinstance(key, str):
            problems.append(ConfigProblem(join_path(path, str(key)), "option names must be strings"))
            return None
    return build(
        CustomDestinationConfig,
        path,
        problems,
        class_path=values["class"],
        name=values["name"],
        options=options,
    )


def read_section(key: str, data: object, path: str, problems: list[ConfigProblem]) -> Any:
    """The section ``key`` of a pipeline (one of ``SECTIONS``), or None."""
    values = read_mapping(data, path, problems, _SECTION_KEYS[key])
    if values is None:
        return None
    bad = _read_durations(values, path, problems)
    if key == "schedules" and isinstance(values.get("cdc"), Mapping):
        cdc = read_on_changes(values["cdc"], join_path(path, "cdc"), problems)
        if cdc is None:
            bad.append(join_path(path, "cdc"))
        values["cdc"] = cdc
    # built without the bad values too, so the section's other problems are reported as well
    section = _build_without(SECTIONS[key], path, problems, values, bad)
    return None if bad else section


def read_on_changes(data: object, path: str, problems: list[ConfigProblem]) -> OnChanges | None:
    """An event-driven cdc schedule: ``{on_changes: N, max_wait: 60s, poll_interval: 5s}``."""
    values = read_mapping(data, path, problems, _ON_CHANGES_KEYS)
    if values is None:
        return None
    bad = _read_durations(values, path, problems)
    schedule = _build_without(OnChanges, path, problems, values, bad)
    return None if bad else schedule


def _read_durations(values: dict[str, Any], path: str, problems: list[ConfigProblem]) -> list[str]:
    """Parse the durations among ``values`` in place; the key paths of the bad ones (dropped)."""
    bad = []
    for name in _DURATIONS:
        if name in values:
            try:
                values[name] = parse_duration(values[name])
            except ConfigError as exc:
                problems.append(ConfigProblem(join_path(path, name), str(exc)))
                bad.append(join_path(path, name))
    return bad


def _build_without(
    factory: Callable[..., _T],
    path: str,
    problems: list[ConfigProblem],
    values: dict[str, Any],
    bad: list[str],
) -> _T | None:
    """``build`` with the values at paths ``bad`` left out (their defaults), and no further
    problem reported at those paths."""
    kept = {k: v for k, v in values.items() if join_path(path, k) not in bad}
    found: list[ConfigProblem] = []
    built = build(factory, path, found, **kept)
    problems.extend(p for p in found if p.path not in bad)
    return built


def read_list(
    items: list[Any],
    path: str,
    problems: list[ConfigProblem],
    read: Callable[[object, str, list[ConfigProblem]], _T],
) -> tuple[list[_T], bool]:
    """Every item read; and whether all were good."""
    read_items = [read(item, f"{path}[{i}]", problems) for i, item in enumerate(items)]
    good = [item for item in read_items if item is not None]
    return good, len(good) == len(read_items)
