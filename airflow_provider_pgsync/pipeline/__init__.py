"""Pipeline configs: what a pgsync pipeline replicates, where to and how often (YAML or Python).

One pipeline's source tables, destinations, state, changelog, Spark settings, schedules and
batch limits are frozen dataclasses, read from YAML (``load_pipelines``; the file format, with
a complete example, is in ``reading.py``) or built in Python (``PipelineConfig(...)``).
A minimal pipeline needs ``name``, ``source_conn_id`` and ``tables``; everything else has a
default (one lake destination, Variables state, a local changelog, ``spark_default``). The
slot and the publication are ``pgsync_<name>`` (lower case) unless given. Passwords never
appear here: connections hold them.

The modules, each using only those above it:

- ``problems``: ConfigProblem, PipelineConfigError, the checks that collect problems, durations
- ``schedules``: cron and event-driven schedules (``OnChanges``), the cdc tasks' retries
- ``parts``: tables, state, changelog, Spark, baseline and limits
- ``destination_configs``: the lake and PostgreSQL destinations
- ``reading_parts``: reading those parts from plain data, each problem with its key path
- ``config``: PipelineConfig, reading one from a mapping, and its operators' arguments
- ``reading``: YAML files and lists of pipelines, and the names they must not share
"""

from airflow_provider_pgsync.pipeline.config import PipelineConfig
from airflow_provider_pgsync.pipeline.destination_configs import (
    CustomDestinationConfig,
    DestinationConfig,
    LakeDestinationConfig,
    PostgresDestinationConfig,
)
from airflow_provider_pgsync.pipeline.parts import (
    BaselineConfig,
    BatchLimits,
    ChangelogConfig,
    SparkConfig,
    StateConfig,
    TableConfig,
    default_changelog_root,
)
from airflow_provider_pgsync.pipeline.problems import (
    ConfigProblem,
    PipelineConfigError,
    format_duration,
    parse_duration,
)
from airflow_provider_pgsync.pipeline.reading import load_pipelines, parse_pipelines, pipelines_from
from airflow_provider_pgsync.pipeline.schedules import OnChanges, Schedules

__all__ = [
    "BaselineConfig",
    "BatchLimits",
    "ChangelogConfig",
    "ConfigProblem",
    "CustomDestinationConfig",
    "DestinationConfig",
    "LakeDestinationConfig",
    "OnChanges",
    "PipelineConfig",
    "PipelineConfigError",
    "PostgresDestinationConfig",
    "Schedules",
    "SparkConfig",
    "StateConfig",
    "TableConfig",
    "default_changelog_root",
    "format_duration",
    "load_pipelines",
    "parse_duration",
    "parse_pipelines",
    "pipelines_from",
]
