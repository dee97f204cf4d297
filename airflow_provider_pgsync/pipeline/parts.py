"""The parts of a pipeline besides its destinations: source tables, state store, changelog,
Spark settings, baseline reads and batch limits, as frozen dataclasses (schedules: ``schedules``).

Each checks all its fields when built and raises one PipelineConfigError listing every problem
by key path relative to it; ``to_mapping()`` gives it back as plain data.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

from airflow_provider_pgsync.pipeline.problems import (
    Checks,
    choice,
    conn_id_problem,
    describe,
    format_duration,
    is_text,
    location_problem,
    set_field,
)
from airflow_provider_pgsync.pipeline.schedules import Schedules, schedule_problem
from airflow_provider_pgsync.source.names import TableRef, check_identifier, shown
from airflow_provider_pgsync.source.row_condition import GRAMMARS, check_expression
from airflow_provider_pgsync.state.store import STATE_BACKENDS

COPY_PATHS = ("auto", "off")
DEFAULT_RETENTION = timedelta(days=7)
SUBMIT_OPTIONS: dict[str, type] = {
    # SparkSubmitHook arguments a pipeline may set; the operators set conf, jars, name,
    # application_args and env_vars themselves, and the jobs' drivers run where the task runs
    **dict.fromkeys(
        ("driver_memory", "executor_memory", "files", "py_files", "archives",
         "driver_class_path", "packages", "exclude_packages", "repositories", "keytab", "principal",
         "proxy_user", "properties_file", "yarn_queue", "spark_binary"),
        str,
    ),
    **dict.fromkeys(("executor_cores", "total_executor_cores", "num_executors"), int),
    **dict.fromkeys(("verbose", "use_krb5ccache"), bool),
}  # fmt: skip
"""The ``spark.submit_options`` keys and the type of each value."""
_TYPE_NAMES: dict[type, str] = {str: "a string", int: "an integer", bool: "true or false"}
_SECRET_WORDS = ("password", "secret", "token")
# Spark settings that mount a Kubernetes secret by name (a reference, not a secret value)
_SECRET_MOUNTS = re.compile(r"spark\.kubernetes\.(driver|executor)\.(secrets|secretKeyRef)\.[\w.-]+")


@dataclass(frozen=True)
class TableConfig:
    """One source table: its qualified name (``schema.table``, normalised; a bare name is in
    ``public``) and, optionally, the published columns and a row filter (a SQL expression)."""

    table: str
    columns: tuple[str, ...] | None = None
    row_filter: str | None = None

    def __post_init__(self) -> None:
        checks = Checks()
        checks.catch("table", lambda: set_field(self, "table", str(TableRef.parse(self.table))))
        if self.columns is not None:
            self._check_columns(checks)
        if self.row_filter is not None and not is_text(self.row_filter):
            checks.add(
                "row_filter", f"must be a non-empty SQL expression, not {self.row_filter!r}; or omit it"
            )
        elif self.row_filter is not None:
            # embedded in the baseline's query and the publication: one expression, nothing else
            checks.catch("row_filter", lambda: check_expression(str(self.row_filter), "the row filter"))
        checks.raise_any(f"table {self.table!r}")

    def _check_columns(self, checks: Checks) -> None:
        if isinstance(self.columns, str) or not isinstance(self.columns, Iterable):
            checks.add("columns", f"must be a list of column names, not {self.columns!r}")
            return
        set_field(self, "columns", tuple(self.columns))
        if not self.columns:
            checks.add("columns", "an empty column list publishes nothing; list columns or omit it")
        seen: set[object] = set()
        for i, column in enumerate(self.columns):
            if not isinstance(column, str) or not column:
                checks.add(f"columns[{i}]", f"must be a column name, not {column!r}")
                continue
            checks.catch(f"columns[{i}]", partial(check_identifier, column, "column name"))
            if column in seen:
                checks.add(f"columns[{i}]", f"column {column!r} is listed twice")
            seen.add(column)

    @property
    def ref(self) -> TableRef:
        return TableRef.parse(self.table)

    @property
    def key(self) -> str:
        """The table's key in the pipeline state (``str(TableRef)``, e.g. ``public.orders``)."""
        return self.table

    def to_entry(self) -> str | dict[str, Any]:
        """The table as the operators (and a config file) take it: its name, or a mapping with
        ``table``, ``columns`` and ``row_filter``."""
        if self.columns is None and self.row_filter is None:
            return self.table
        entry: dict[str, Any] = {"table": self.table}
        if self.columns is not None:
            entry["columns"] = list(self.columns)
        if self.row_filter is not None:
            entry["row_filter"] = self.row_filter
        return entry


@dataclass(frozen=True)
class StateConfig:
    """Where the pipeline state lives: Airflow Variables or a PostgreSQL table in ``schema`` of
    the database ``conn_id`` (None: the source database)."""

    backend: str = "variables"
    conn_id: str | None = None
    schema: str = "pgsync"

    def __post_init__(self) -> None:
        checks = Checks()
        problem = choice(self.backend, STATE_BACKENDS)
        if problem:
            checks.add("backend", problem)
        problem = None if self.conn_id is None else conn_id_problem(self.conn_id)
        if problem:
            checks.add("conn_id", f"{problem}; or omit it")
        checks.catch("schema", lambda: TableRef(self.schema, "pipeline_state"))
        checks.raise_any("state config")

    def to_mapping(self) -> dict[str, Any]:
        return {"backend": self.backend, "conn_id": self.conn_id, "schema": self.schema}


def default_changelog_root() -> str:
    """``$PGSYNC_CHANGELOG``, else ``$AIRFLOW_HOME/pgsync/changelog`` (``~/airflow`` when
    AIRFLOW_HOME is unset); a pipeline's changelog is ``<root>/<name>``."""
    root = os.environ.get("PGSYNC_CHANGELOG")
    if not root:
        root = str(Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow") / "pgsync" / "changelog")
    return root if "://" in root else str(Path(root).expanduser().resolve())


@dataclass(frozen=True)
class ChangelogConfig:
    """The changelog: folder or pyarrow filesystem URI (None: ``default_changelog_root()/<name>``,
    resolved when the config is read) and how long a segment is kept after every destination
    has applied it."""

    uri: str | None = None
    retention: timedelta = DEFAULT_RETENTION

    def __post_init__(self) -> None:
        checks = Checks()
        problem = location_problem(self.uri) if self.uri is not None else None
        if problem:
            checks.add("uri", problem)
        if not isinstance(self.retention, timedelta) or self.retention < timedelta(0):
            checks.add("retention", f"must be a duration of zero or more, not {self.retention!r}")
        elif self.retention % timedelta(seconds=1):
            checks.add("retention", f"must be whole seconds, not {self.retention}")
        checks.raise_any("changelog config")

    def to_mapping(self) -> dict[str, Any]:
        return {"uri": self.uri, "retention": format_duration(self.retention)}


@dataclass(frozen=True)
class SparkConfig:
    """The Spark side of baseline and compaction: the Spark connection (``local[*]`` when it
    does not exist), extra Spark configuration, jars (None: the PostgreSQL JDBC driver) and
    further SparkSubmitHook arguments (``SUBMIT_OPTIONS``); ``password_file``: where the cluster
    manager mounts the baseline job's password file (``PgBaselineOperator(spark_password_file=)``;
    None: the job ships one)."""

    conn_id: str = "spark_default"
    conf: Mapping[str, str] = field(default_factory=dict)
    jars: str | None = None
    submit_options: Mapping[str, str | int | bool] = field(default_factory=dict)
    password_file: str | None = None

    def __post_init__(self) -> None:
        checks = Checks()
        problem = conn_id_problem(self.conn_id)
        if problem:
            checks.add("conn_id", problem)
        if self.jars is not None and not is_text(self.jars):
            checks.add("jars", f"must be a comma-separated list of jars, not {self.jars!r}; or omit it")
        if self.password_file is not None and (
            location_problem(self.password_file) or not os.path.isabs(self.password_file)
        ):
            checks.add(
                "password_file",
                f"must be the absolute path where the Spark nodes find the password file, not "
                f"{shown(self.password_file)}; or omit it to ship one with the job",
            )
        set_field(self, "conf", self._checked_conf(checks))
        set_field(self, "submit_options", self._checked_options(checks))
        checks.raise_any("spark config")

    def _checked_conf(self, checks: Checks) -> dict[str, str]:
        if not isinstance(self.conf, Mapping):
            checks.add("conf", f"must be a mapping of Spark settings, not {self.conf!r}")
            return {}
        conf = {}
        for key, value in self.conf.items():
            if not is_text(key):
                checks.add("conf", f"setting name {key!r} must be a non-empty string")
            elif any(word in key.lower() for word in _SECRET_WORDS) and not _SECRET_MOUNTS.fullmatch(key):
                checks.add(
                    f"conf.{key}", "looks like a secret: keep secrets in a connection, not in the config"
                )
            elif isinstance(value, bool):
                conf[key] = "true" if value else "false"
            elif isinstance(value, str | int | float):
                conf[key] = str(value)
            else:
                checks.add(f"conf.{key}", f"must be a string or number, not {value!r}")
        return conf

    def _checked_options(self, checks: Checks) -> dict[str, str | int | bool]:
        if not isinstance(self.submit_options, Mapping):
            checks.add("submit_options", f"must be a mapping, not {self.submit_options!r}")
            return {}
        options = {}
        for key, value in self.submit_options.items():
            kind = SUBMIT_OPTIONS.get(key)
            if kind is None:
                checks.add(f"submit_options.{key}", f"unknown option; allowed: {', '.join(SUBMIT_OPTIONS)}")
            elif type(value) is not kind:
                checks.add(f"submit_options.{key}", f"must be {_TYPE_NAMES[kind]}, not {describe(value)}")
            else:
                options[key] = value
        return options

    def to_mapping(self) -> dict[str, Any]:
        return {
            "conn_id": self.conn_id,
            "conf": dict(self.conf),
            "jars": self.jars,
            "submit_options": dict(self.submit_options),
            "password_file": self.password_file,
        }


@dataclass(frozen=True)
class BaselineConfig:
    """How a baseline reads a table: partition size, read path (``COPY_PATHS``), JDBC fetch size;
    and the grammar of the baseline DAG's backfill filters (``GRAMMARS``): ``safe`` (columns,
    literals, comparisons, AND/OR/NOT, IN, BETWEEN, IS NULL) or ``sql`` (any expression)."""

    target_partition_mb: float = 256
    copy_path: str = "auto"
    fetch_size: int = 10_000
    backfill_filters: str = "safe"

    def __post_init__(self) -> None:
        checks = Checks()
        _positive(checks, "target_partition_mb", self.target_partition_mb)
        problem = choice(self.copy_path, COPY_PATHS)
        if problem:
            checks.add("copy_path", problem)
        _positive_int(checks, "fetch_size", self.fetch_size)
        problem = choice(self.backfill_filters, GRAMMARS)
        if problem:
            checks.add("backfill_filters", problem)
        checks.raise_any("baseline config")

    def to_mapping(self) -> dict[str, Any]:
        return {"target_partition_mb": self.target_partition_mb, "copy_path": self.copy_path,
                "fetch_size": self.fetch_size, "backfill_filters": self.backfill_filters}  # fmt: skip


_INT4_MAX = 2**31 - 1  # counts reach PostgreSQL (upto_nchanges) and JDBC (fetch size) as int4
_INT8_MAX = 2**63 - 1


def _positive(checks: Checks, path: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= _INT4_MAX:
        checks.add(path, f"must be a positive number up to {_INT4_MAX}, not {shown(value)}")


def _positive_int(checks: Checks, path: str, value: object, most: int = _INT4_MAX) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= most:
        checks.add(path, f"must be a positive integer up to {most}, not {shown(value)}")


@dataclass(frozen=True)
class BatchLimits:
    """Batch sizes: changes of one capture peek, and changes and bytes of one apply batch; and
    how long each statement of capture's peek and slot advance may run (0: no limit, the
    default: ``CaptureSettings.peek_statement_timeout`` says why)."""

    max_changes: int = 1_000_000
    batch_rows: int = 1_000_000
    batch_bytes: int = 256 * 2**20
    peek_statement_timeout: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        checks = Checks()
        for name in ("max_changes", "batch_rows"):
            _positive_int(checks, name, getattr(self, name))
        _positive_int(checks, "batch_bytes", self.batch_bytes, most=_INT8_MAX)
        timeout = self.peek_statement_timeout
        if not isinstance(timeout, timedelta) or timeout < timedelta(0):
            checks.add("peek_statement_timeout", f"must be a duration of zero or more, not {timeout!r}")
        elif timeout % timedelta(seconds=1):
            checks.add("peek_statement_timeout", f"must be whole seconds, not {timeout}")
        checks.raise_any("limits")

    def to_mapping(self) -> dict[str, Any]:
        return {
            "max_changes": self.max_changes,
            "batch_rows": self.batch_rows,
            "batch_bytes": self.batch_bytes,
            "peek_statement_timeout": format_duration(self.peek_statement_timeout),
        }


RECONCILE_REPAIRS = ("none", "backfill")


@dataclass(frozen=True)
class ReconcileConfig:
    """The reconcile DAG: its ``schedule`` (cron or preset; None: triggered by hand), ``repair``
    (``none``: report; ``backfill``: also stage a backfill of exactly the differing keys), the
    differing keys shown per kind (``sample_size``) and how long to wait for a destination to
    pass the source snapshot (``wait_timeout``, seconds)."""

    schedule: str | None = None
    repair: str = "none"
    sample_size: int = 10
    wait_timeout: float = 600

    def __post_init__(self) -> None:
        checks = Checks()
        problem = schedule_problem(self.schedule)
        if problem:
            checks.add("schedule", problem)
        problem = choice(self.repair, RECONCILE_REPAIRS)
        if problem:
            checks.add("repair", problem)
        _positive_int(checks, "sample_size", self.sample_size, 1000)
        _positive(checks, "wait_timeout", self.wait_timeout)
        checks.raise_any("reconcile config")

    def to_mapping(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "repair": self.repair, "sample_size": self.sample_size,
                "wait_timeout": self.wait_timeout}  # fmt: skip


SECTIONS: dict[str, type] = {
    "state": StateConfig,
    "changelog": ChangelogConfig,
    "spark": SparkConfig,
    "baseline": BaselineConfig,
    "schedules": Schedules,
    "limits": BatchLimits,
    "reconcile": ReconcileConfig,
}
"""The sections of a pipeline config (its keys) and the class of each."""
