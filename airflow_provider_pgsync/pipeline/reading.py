"""Pipeline config files and lists of pipelines: ``load_pipelines`` reads a YAML file,
``parse_pipelines`` the plain data of one, ``pipelines_from`` any of these or PipelineConfigs.

A file holds one pipeline mapping or ``pipelines: [...]``. Every problem of a file is reported
at once, each with its key path (``pipelines[0].tables[1].row_filter``) and, where there is a
fixed set, the allowed values; pipelines must not share a name, a slot or publication (on one
source) or a changelog.

A complete file (every key shown; only the first three are required)::

    pipelines:
      - name: shop                      # letters, digits, _ (DAG ids, slot, Variable keys)
        source_conn_id: shop_db         # Airflow connection of the source database
        slot_name: pgsync_shop          # default pgsync_<name>
        publication_name: pgsync_shop   # default pgsync_<name>
        tables:
          - orders                      # = public.orders
          - table: public.customers
            columns: [id, name, country]    # published columns (PostgreSQL 15+)
            row_filter: "country = 'NL'"    # published rows (PostgreSQL 15+); one SQL expression
        destinations:                   # default: one lake destination
          - kind: lake
            warehouse: /data/lake       # default $PGSYNC_LAKE or $AIRFLOW_HOME/pgsync/lake
            database: pgsync
            metastore: derby            # derby | postgres (+ metastore_conn_id) | external
          - kind: postgres
            conn_id: replica_db
            name: replica               # key of its watermark; default postgres
            control_schema: pgsync
            fillfactor: 70              # 10-100, of the tables it creates; 100 for append-only data
          # - kind: custom              # a Destination subclass you wrote (docs/writing-a-destination.md)
          #   class: my_pkg.dest.SqliteDestination   # imported where the tasks run, like DAG code
          #   name: sqlite              # required: key of its phases, watermark and lineage
          #   path: /data/shop.sqlite   # any other key: an option of the class
        state:
          backend: postgres             # variables | postgres
          conn_id: control_db           # default: the source connection
          schema: pgsync
        changelog:
          uri: s3://bucket/pgsync/shop  # default <$PGSYNC_CHANGELOG or $AIRFLOW_HOME/pgsync/changelog>/<name>
          retention: 7d                 # kept after every destination applied it (s, m, h, d, w)
        spark:
          conn_id: spark_default
          conf:
            spark.sql.shuffle.partitions: "8"
          jars: /usr/share/java/postgresql.jar
          submit_options:
            driver_memory: 4g
        baseline:
          target_partition_mb: 256
          copy_path: auto               # auto | off
          fetch_size: 10000
          backfill_filters: safe        # safe | sql: what a backfill filter typed in the trigger form may use
        schedules:
          cdc: "*/5 * * * *"            # cron, a preset like "@hourly", or null (manual only)
          # cdc: {on_changes: 1000, max_wait: 60s, poll_interval: 5s}  # event-driven (needs a triggerer)
          compact: "@daily"
          retries: 2                    # of the cdc DAG's capture and apply tasks
          retry_delay: 10s
        limits:
          max_changes: 1000000          # capture: changes of one peek
          batch_rows: 1000000           # apply: changes handed to a destination at once
          batch_bytes: 268435456        # apply: about the bytes of changes held for one batch
          peek_statement_timeout: 0s    # capture: each statement of a peek or advance (0s: no limit)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pipeline.config import PipelineConfig, read_pipeline
from airflow_provider_pgsync.pipeline.problems import ConfigProblem, PipelineConfigError, join_path
from airflow_provider_pgsync.pipeline.reading_parts import LIST, read_mapping
from airflow_provider_pgsync.source.names import shown

MAX_YAML_VALUES = 100_000
"""Values a config file may hold once its aliases are expanded: far more than any pipeline needs,
far fewer than a "billion laughs" document, whose few lines of aliases expand to billions."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader (plain data only: no tags that build Python objects) that refuses a
    key given twice in one mapping (safe_load keeps the last), an alias inside its own anchor,
    and a document of more than MAX_YAML_VALUES values with its aliases expanded."""

    def compose_document(self) -> yaml.Node | None:
        node: yaml.Node | None = super().compose_document()
        if node is not None:
            _check_expanded_size(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base class names it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"found the key {key!r} twice",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_expanded_size(root: yaml.Node) -> None:
    """ComposerError when the aliases under ``root`` expand to too many values, or to a cycle."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise yaml.composer.ComposerError(
                None, None, "an alias refers to a list or mapping that holds it (a recursive anchor)",
                node.start_mark,
            )  # fmt: skip
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children: list[yaml.Node] = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_YAML_VALUES:
                raise yaml.composer.ComposerError(
                    None, None,
                    f"its anchors and aliases expand to more than {MAX_YAML_VALUES} values "
                    "(a 'billion laughs' document?); write the values out or use fewer aliases",
                    node.start_mark,
                )  # fmt: skip
        open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root)


def load_pipelines(path: str | os.PathLike[str]) -> tuple[PipelineConfig, ...]:
    """The pipelines of a YAML file: one pipeline mapping, or ``pipelines: [...]``.

    Every problem is reported at once, in a PipelineConfigError naming the file; a YAML syntax
    error is a ConfigError naming the file, line and column.
    """
    source = str(path)
    try:
        with open(path, encoding="utf-8") as stream:
            data = yaml.load(stream, Loader=_UniqueKeyLoader)  # a SafeLoader: plain data only
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline config {source}: {exc.strerror or exc}") from exc
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(f"pipeline config {source} is not valid YAML: {_yaml_problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"pipeline config {source} is not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(
            f"pipeline config {source} is nested too deeply to read; a pipeline needs a few levels"
        ) from None
    return parse_pipelines(data, source=source)


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    context = f" ({exc.context})" if exc.context else ""
    return f"{where}{exc.problem or 'syntax error'}{context}"


def parse_pipelines(data: object, *, source: str = "pipeline config") -> tuple[PipelineConfig, ...]:
    """The pipelines of plain data as a file holds it: one pipeline mapping or ``pipelines: [...]``."""
    problems: list[ConfigProblem] = []
    found: list[tuple[str, PipelineConfig]] = []
    problems.extend(_nul_problems(data, "", set()))
    if problems:
        raise PipelineConfigError(problems, source=source)
    if data is None:
        problems.append(ConfigProblem("", "is empty; give a pipeline mapping or 'pipelines: [...]'"))
    elif isinstance(data, Mapping) and "pipelines" in data:
        values = read_mapping(data, "", problems, {"pipelines": LIST}, required=("pipelines",))
        items = values.get("pipelines", []) if values else []
        if values and not items:
            problems.append(ConfigProblem("pipelines", "is empty; list at least one pipeline"))
        for i, item in enumerate(items):
            config = read_pipeline(item, f"pipelines[{i}]", problems)
            if config is not None:
                found.append((f"pipelines[{i}]", config))
    else:
        config = read_pipeline(data, "", problems)
        if config is not None:
            found.append(("", config))
    problems.extend(_clashes(found))
    if problems:
        raise PipelineConfigError(problems, source=source)
    return tuple(config for _, config in found)


def _nul_problems(data: object, path: str, seen: set[int]) -> list[ConfigProblem]:
    """A problem for each string holding a NUL character (no SQL text, argument, environment
    variable or path can carry one), keys included; each list or mapping looked at once."""
    if isinstance(data, str):
        if "\0" not in data:
            return []
        return [ConfigProblem(path, f"{shown(data)} contains a NUL character; remove it")]
    if not isinstance(data, Mapping | list | tuple) or id(data) in seen:
        return []
    seen.add(id(data))
    found = []
    items = data.items() if isinstance(data, Mapping) else ((f"[{i}]", v) for i, v in enumerate(data))
    for key, value in items:
        if isinstance(key, str) and "\0" in key:
            found.append(ConfigProblem(path, f"the key {shown(key)} contains a NUL character; remove it"))
            continue
        found.extend(_nul_problems(value, join_path(path, str(key)), seen))
    return found


def pipelines_from(
    source: str | os.PathLike[str] | PipelineConfig | Mapping[str, Any] | Iterable[PipelineConfig],
) -> tuple[PipelineConfig, ...]:
    """Pipelines from a YAML file path, a mapping (as in a file), one PipelineConfig or a list of
    them; names, slots, publications and changelogs must not clash."""
    if isinstance(source, str | os.PathLike):
        return load_pipelines(source)
    if isinstance(source, Mapping):
        return parse_pipelines(source)
    configs = (source,) if isinstance(source, PipelineConfig) else tuple(source)
    problems = [ConfigProblem(f"[{i}]", f"must be a PipelineConfig, not {c!r}")
                for i, c in enumerate(configs) if not isinstance(c, PipelineConfig)]  # fmt: skip
    problems += _clashes([(f"[{i}]", c) for i, c in enumerate(configs) if isinstance(c, PipelineConfig)])
    if problems:
        raise PipelineConfigError(problems, source="pipelines")
    return configs


def _clashes(configs: Sequence[tuple[str, PipelineConfig]]) -> list[ConfigProblem]:
    """Pipelines that would share a name, a slot or publication (same source) or a changelog."""
    problems = []
    owners: dict[tuple[str, object], str] = {}
    for path, config in configs:
        claims = [
            # ignoring case: a case-insensitive file system or metadata database (MySQL) would
            # give two such pipelines one changelog folder, DAG ids or Variable keys
            ("name", config.name.lower(), "pipeline names must be unique, ignoring case"),
            ("slot_name", (config.source_conn_id, config.slot_name), "a source's slots must be unique"),
            ("publication_name", (config.source_conn_id, config.publication_name),
             "a source's publications must be unique"),
            ("changelog.uri", config.changelog_uri, "each pipeline needs its own changelog"),
        ]  # fmt: skip
        for key, value, rule in claims:
            owner = owners.setdefault((key, value), path)
            if owner != path:
                shown = value[1] if isinstance(value, tuple) else config.name if key == "name" else value
                problems.append(
                    ConfigProblem(
                        join_path(path, key),
                        f"{shown!r} is used by {owner or 'another pipeline'} too; {rule}",
                    )
                )
    return problems
