"""One pipeline: ``PipelineConfig``, read from a mapping (``read_pipeline``) or built in Python,
and the arguments it gives each operator of its DAGs.

The slot and the publication are ``pgsync_<name>`` (lower case) unless given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_pgsync.apply.schema_change import ON_SCHEMA_CHANGE
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pipeline.destination_configs import (
    CustomDestinationConfig,
    DestinationConfig,
    LakeDestinationConfig,
    PostgresDestinationConfig,
)
from airflow_provider_pgsync.pipeline.parts import (
    SECTIONS,
    BaselineConfig,
    BatchLimits,
    ChangelogConfig,
    ReconcileConfig,
    Schedules,
    SparkConfig,
    StateConfig,
    TableConfig,
    default_changelog_root,
)
from airflow_provider_pgsync.pipeline.problems import (
    Checks,
    ConfigProblem,
    PipelineConfigError,
    choice,
    conn_id_problem,
    join_path,
    set_field,
)
from airflow_provider_pgsync.pipeline.reading_parts import (
    LIST,
    MAPPING,
    STR,
    build,
    read_destination,
    read_list,
    read_mapping,
    read_section,
    read_table,
)
from airflow_provider_pgsync.source.names import (
    TableRef,
    shown,
    validate_publication_name,
    validate_slot_name,
)

NAME_PREFIX = "pgsync_"
"""Prefix of the slot and publication names derived from a pipeline's name."""

_PIPELINE_NAME = re.compile(r"[A-Za-z0-9_]{1,56}")
PIPELINE_NAME_RULE = (
    "use 1-56 ASCII letters, digits or _ (e.g. 'shop'); the name is part of DAG ids, the default "
    "slot and publication, Variable keys, lock keys and the changelog's folder"
)


@dataclass(frozen=True)
class PipelineConfig:
    """One pipeline: one slot and one publication on the source, its tables, destinations,
    state store, changelog, Spark settings, schedules and batch limits.

    ``slot_name`` and ``publication_name`` left empty become ``pgsync_<name in lower case>``.
    ``on_schema_change`` (``ON_SCHEMA_CHANGE``): what the cdc DAG does when a destination can
    follow a change of a table's columns only by a rebaseline: ``rebaseline`` (trigger it, and
    fail the run naming it) or ``fail`` (the table Errored in that destination until rebaselined).
    """

    name: str
    source_conn_id: str
    tables: tuple[TableConfig, ...]
    destinations: tuple[DestinationConfig, ...] = (LakeDestinationConfig(),)
    slot_name: str = ""
    publication_name: str = ""
    state: StateConfig = field(default_factory=StateConfig)
    changelog: ChangelogConfig = field(default_factory=ChangelogConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    baseline: BaselineConfig = field(default_factory=BaselineConfig)
    schedules: Schedules = field(default_factory=Schedules)
    limits: BatchLimits = field(default_factory=BatchLimits)
    reconcile: ReconcileConfig = field(default_factory=ReconcileConfig)
    on_schema_change: str = ON_SCHEMA_CHANGE[0]

    def __post_init__(self) -> None:
        checks = Checks()
        if not isinstance(self.name, str) or not _PIPELINE_NAME.fullmatch(self.name):
            checks.add("name", f"{shown(self.name)} is not allowed: {PIPELINE_NAME_RULE}")
        problem = conn_id_problem(self.source_conn_id)
        if problem:
            checks.add("source_conn_id", problem)
        derived = NAME_PREFIX + (self.name.lower() if isinstance(self.name, str) else "")
        set_field(self, "slot_name", self.slot_name or derived)
        set_field(self, "publication_name", self.publication_name or derived)
        if not any(p.path == "name" for p in checks.found):
            checks.catch("slot_name", lambda: validate_slot_name(self.slot_name))
            checks.catch("publication_name", lambda: validate_publication_name(self.publication_name))
        self._check_tables(checks)
        self._check_destinations(checks)
        problem = choice(self.on_schema_change, ON_SCHEMA_CHANGE)
        if problem:
            checks.add("on_schema_change", problem)
        for key, cls in SECTIONS.items():
            if not isinstance(getattr(self, key), cls):
                checks.add(key, f"must be a {cls.__name__}, not {getattr(self, key)!r}")
        checks.raise_any(f"pipeline {shown(self.name)}")

    def _check_tables(self, checks: Checks) -> None:
        items = _as_tuple(self.tables)
        set_field(self, "tables", items)
        if not items:
            checks.add("tables", "no tables: list at least one 'schema.table'")
        seen: dict[str, int] = {}
        for i, table in enumerate(items):
            if not isinstance(table, TableConfig):
                checks.add(f"tables[{i}]", f"must be a TableConfig, not {table!r}")
            elif table.key in seen:
                checks.add(
                    f"tables[{i}]", f"table {table.key} is listed twice (also tables[{seen[table.key]}])"
                )
            else:
                seen[table.key] = i

    def _check_destinations(self, checks: Checks) -> None:
        items = _as_tuple(self.destinations)
        set_field(self, "destinations", items)
        if not items:
            checks.add("destinations", "no destinations: list at least one (kind: lake, postgres or custom)")
        seen: dict[str, int] = {}
        for i, destination in enumerate(items):
            if not isinstance(
                destination, LakeDestinationConfig | PostgresDestinationConfig | CustomDestinationConfig
            ):
                checks.add(f"destinations[{i}]", f"must be a destination config, not {destination!r}")
            elif destination.name in seen:
                owner = seen[destination.name]
                checks.add(
                    f"destinations[{i}]",
                    f"destination name {destination.name!r} is taken by destinations[{owner}]; watermarks "
                    "are kept by name: give each lake its own database, each postgres or custom its own name",
                )
            else:
                seen[destination.name] = i

    # ---- reading and writing

    @classmethod
    def from_mapping(cls, data: object, *, where: str = "") -> PipelineConfig:
        """Read one pipeline mapping (as in a YAML file); every problem is reported at once in a
        PipelineConfigError, with key paths under ``where`` (e.g. ``pipelines[0]``)."""
        problems: list[ConfigProblem] = []
        config = read_pipeline(data, where, problems)
        if problems or config is None:
            raise PipelineConfigError(problems)
        return config

    def to_mapping(self) -> dict[str, Any]:
        """The config as plain data (``from_mapping`` reads it back to an equal config)."""
        data: dict[str, Any] = {
            "name": self.name,
            "source_conn_id": self.source_conn_id,
            "slot_name": self.slot_name,
            "publication_name": self.publication_name,
            "tables": [t.to_entry() for t in self.tables],
            "destinations": [d.to_mapping() for d in self.destinations],
            "on_schema_change": self.on_schema_change,
        }
        for key in SECTIONS:
            data[key] = getattr(self, key).to_mapping()
        return data

    # ---- what the DAG factory needs

    @property
    def table_keys(self) -> tuple[str, ...]:
        """The tables as state keys (``public.orders``), in config order."""
        return tuple(t.key for t in self.tables)

    def table(self, name: str) -> TableConfig:
        """The table config of ``name`` (any spelling ``TableRef.parse`` reads, e.g. ``orders``)."""
        key = str(TableRef.parse(name))
        for table in self.tables:
            if table.key == key:
                return table
        raise ConfigError(
            f"pipeline {self.name!r} has no table {key}; its tables: {', '.join(self.table_keys)}"
        )

    @property
    def changelog_uri(self) -> str:
        """The changelog's folder or URI: the configured one, else ``default_changelog_root()/<name>``."""
        return self.changelog.uri or f"{default_changelog_root().rstrip('/')}/{self.name}"

    @property
    def lake_destinations(self) -> tuple[LakeDestinationConfig, ...]:
        return tuple(d for d in self.destinations if isinstance(d, LakeDestinationConfig))

    def backfill_destinations(self, *, keys: bool = False) -> list[dict[str, Any]]:
        """The destinations a backfill writes: a filter backfill the lake and PostgreSQL
        destinations (a custom one is rebaselined), a key-list backfill (``keys``,
        ``backfill_keys``) every destination (custom ones through ``stage_backfill``)."""
        chosen = [d for d in self.destinations if keys or not isinstance(d, CustomDestinationConfig)]
        return [d.to_mapping() for d in chosen]

    def operator_tables(self) -> list[str | dict[str, Any]]:
        """The tables as preflight and publication operators take them."""
        return [t.to_entry() for t in self.tables]

    def _source_and_state(self) -> dict[str, Any]:
        return {
            "postgres_conn_id": self.source_conn_id,
            "state_backend": self.state.backend,
            "state_conn_id": self.state.conn_id,
            "state_schema": self.state.schema,
        }

    def preflight_kwargs(self) -> dict[str, Any]:
        """Arguments of ``PgPreflightOperator`` (add ``task_id``)."""
        return {
            "pipeline": self.name,
            **self._source_and_state(),
            "slot_name": self.slot_name,
            "publication_name": self.publication_name,
            "tables": self.operator_tables(),
        }

    def publication_kwargs(self) -> dict[str, Any]:
        """Arguments of ``PgCreatePublicationOperator``."""
        return {
            "pipeline": self.name,
            **self._source_and_state(),
            "publication_name": self.publication_name,
            "tables": self.operator_tables(),
        }

    def slot_kwargs(self) -> dict[str, Any]:
        """Arguments of ``PgCreateSlotOperator`` and ``PgDropSlotOperator``."""
        return {"postgres_conn_id": self.source_conn_id, "slot_name": self.slot_name}

    def capture_kwargs(self) -> dict[str, Any]:
        """Arguments of ``PgCaptureOperator``."""
        return {
            "pipeline": self.name,
            "slot_name": self.slot_name,
            "publication_name": self.publication_name,
            "changelog_uri": self.changelog_uri,
            **self._source_and_state(),
            "max_changes": self.limits.max_changes,
            "peek_statement_timeout": self.limits.peek_statement_timeout,
        }

    def apply_kwargs(self) -> dict[str, Any]:
        """Arguments of ``PgApplyOperator`` (every destination)."""
        return {
            "pipeline": self.name,
            "changelog_uri": self.changelog_uri,
            "destinations": [d.to_mapping() for d in self.destinations],
            **self._source_and_state(),
            "batch_rows": self.limits.batch_rows,
            "batch_bytes": self.limits.batch_bytes,
            "retention": self.changelog.retention,
            "on_schema_change": self.on_schema_change,
        }

    def baseline_kwargs(self, table: str | TableConfig, *, rebaseline: bool = False) -> dict[str, Any]:
        """Arguments of ``PgBaselineOperator`` for one table of the pipeline (its columns and
        row filter included): every destination takes the baseline. ``PgBackfillOperator``
        takes them with ``destinations`` of ``backfill_destinations``."""
        entry = table if isinstance(table, TableConfig) else self.table(table)
        return {
            "pipeline": self.name,
            "table": entry.to_entry(),
            "destinations": [d.to_mapping() for d in self.destinations],
            **self._source_and_state(),
            "rebaseline": rebaseline,
            "target_partition_mb": self.baseline.target_partition_mb,
            "fetch_size": self.baseline.fetch_size,
            "copy_path": self.baseline.copy_path,
            **self._spark_kwargs(),
            "spark_jars": self.spark.jars,
            "spark_password_file": self.spark.password_file,
        }

    def compact_kwargs(self) -> dict[str, dict[str, Any]]:
        """Arguments of ``PgCompactOperator``, one set per lake destination, by destination name."""
        return {
            lake.name: {
                "tables": list(self.table_keys),
                "pipeline": self.name,
                **self._source_and_state(),
                "destination": lake.to_mapping(),
                **self._spark_kwargs(),
            }
            for lake in self.lake_destinations
        }

    def reconcile_kwargs(self) -> dict[str, Any]:
        """Arguments of ``PgReconcileOperator`` (every table, every destination)."""
        return {
            "pipeline": self.name,
            "changelog_uri": self.changelog_uri,
            "destinations": [d.to_mapping() for d in self.destinations],
            "tables": list(self.table_keys),
            **self._source_and_state(),
            "repair": self.reconcile.repair,
            "sample_size": self.reconcile.sample_size,
            "wait_timeout": self.reconcile.wait_timeout,
            **self._spark_kwargs(),
        }

    def _spark_kwargs(self) -> dict[str, Any]:
        return {
            "spark_conn_id": self.spark.conn_id,
            "spark_conf": dict(self.spark.conf),
            "spark_submit_options": dict(self.spark.submit_options),
        }


def _as_tuple(items: object) -> tuple[Any, ...]:
    if isinstance(items, str | Mapping) or not isinstance(items, Iterable):
        return (items,) if items is not None else ()
    return tuple(items)


# ---- reading one pipeline from plain data --------------------------------------------------

_PIPELINE_KEYS = {
    "name": STR, "source_conn_id": STR, "slot_name": STR, "publication_name": STR,
    "tables": LIST, "destinations": LIST, "on_schema_change": STR, **dict.fromkeys(SECTIONS, MAPPING),
}  # fmt: skip
_STAND_INS: dict[str, Any] = {"name": "pipeline", "source_conn_id": "source", "tables": []}
"""Values of missing required keys, so the rest of a pipeline is still checked."""


def read_pipeline(data: object, path: str, problems: list[ConfigProblem]) -> PipelineConfig | None:
    """The pipeline of mapping ``data``, or None; its problems are recorded under ``path``."""
    values = read_mapping(data, path, problems, _PIPELINE_KEYS, required=tuple(_STAND_INS))
    if values is None:
        return None
    failed = {key for key in _STAND_INS if key not in values}
    values = {**_STAND_INS, **values}
    for key in ("slot_name", "publication_name"):
        if values.get(key) == "":
            problems.append(ConfigProblem(join_path(path, key), f"is empty; omit it for {NAME_PREFIX}<name>"))
    values["tables"], good = read_list(values["tables"], join_path(path, "tables"), problems, read_table)
    if not good:
        failed.add("tables")
    if "destinations" in values:
        values["destinations"], good = read_list(
            values["destinations"], join_path(path, "destinations"), problems, read_destination
        )
        if not good:
            failed.add("destinations")
    for key in SECTIONS:
        if key in values:
            values[key] = read_section(key, values[key], join_path(path, key), problems)
            if values[key] is None:
                failed.add(key)
                del values[key]
    # built even when a part failed or is missing, to report the pipeline's own problems too;
    # problems of a stand-in (e.g. "no tables" when every table was bad) are not reported
    found: list[ConfigProblem] = []
    config = build(PipelineConfig, path, found, **values)
    problems.extend(p for p in found if _section_of(p.path, path) not in failed)
    return None if failed else config


def _section_of(full_path: str, prefix: str) -> str:
    rest = full_path[len(prefix) :].lstrip(".")
    return re.split(r"[.\[]", rest, maxsplit=1)[0]
