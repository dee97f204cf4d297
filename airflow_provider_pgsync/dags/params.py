"""The trigger-form Params of the baseline and teardown DAGs, and the checks of their values.

Nothing destructive is chosen by default: the baseline DAG's ``tables`` and ``mode`` have no
default (the form asks for both, and Airflow refuses a run without them), and teardown needs
the pipeline's name typed in (also to tear down only some tables, param ``tables``, which must
no longer be in the config; ``drop_tables`` drops their destination tables too). The checks run
again in the DAGs' first task, so a bad or missing value fails the run before anything is
touched, with an error naming the param and what to choose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Param

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.pipeline.config import PipelineConfig
from airflow_provider_pgsync.source.names import TableRef, shown
from airflow_provider_pgsync.source.row_condition import SAFE_GRAMMAR, parse_condition
from airflow_provider_pgsync.source.sql_tokens import MAX_LENGTH

MODES = ("rebaseline", "backfill")
TABLE_NAME_CHARS = 300
"""The longest table name the teardown form takes: two quoted 63-byte identifiers fit."""


def baseline_params(config: PipelineConfig) -> dict[str, Param]:
    """``tables`` (a multi-select of the config's tables, no default), ``destinations`` (a
    multi-select of its destinations, default all), ``mode`` (no default) and ``backfill_filter``.

    A param without a default is required: the trigger form asks for it and Airflow refuses to
    create a run without it, so a click on Trigger with the form untouched copies nothing."""
    keys = list(config.table_keys)
    names = [d.name for d in config.destinations]
    return {
        "tables": Param(
            type="array",
            items={"type": "string", "enum": keys},
            examples=keys,
            uniqueItems=True,
            minItems=1,
            title="Tables",
            description="The tables to rebaseline or backfill (required: none is chosen by default).",
        ),
        "destinations": Param(
            names,
            type="array",
            items={"type": "string", "enum": names},
            examples=names,
            uniqueItems=True,
            minItems=1,
            title="Destinations",
            description=(
                "rebaseline only: the destinations to copy the tables into (default: all of them); "
                "the tables keep streaming into the others."
            ),
        ),
        "mode": Param(
            type="string",
            enum=list(MODES),
            title="Mode",
            description=(
                "Required, no default. rebaseline: copy each table again from one snapshot and hand "
                "it off to the stream; the other tables keep streaming. backfill: re-send the rows "
                "matching backfill_filter (all rows when empty) into the lake and PostgreSQL destinations "
                "without dropping the rest; the table keeps streaming and the next cdc run applies them."
            ),
        ),
        "backfill_filter": Param(
            None,
            type=["null", "string"],
            maxLength=MAX_LENGTH,
            title="Backfill filter",
            description=(
                "backfill only: a condition on the table's columns selecting the rows to re-send, "
                f"e.g. id > 1000 (empty: every row). {filter_help(config.baseline.backfill_filters)}"
            ),
        ),
    }


def filter_help(grammar: str) -> str:
    """What a backfill filter of ``grammar`` may hold, as the trigger form and the DAG doc say it."""
    if grammar == "sql":
        return (
            "Any one SQL boolean expression the source role may evaluate (functions, subqueries): no ';', "
            "no comments; it runs in a read-only transaction."
        )
    return f"Allowed (this pipeline's backfill_filters: safe): {SAFE_GRAMMAR}."


def chosen_tables(config: PipelineConfig, params: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The work the baseline run is asked for: ``rebaseline``, ``PgBaselineOperator`` arguments
    per table (``table`` and the chosen ``destinations``), and ``backfill``,
    ``PgBackfillOperator`` arguments per table (config order); one of them is empty.
    ConfigError naming the param for a value that cannot be run."""
    mode = params.get("mode")
    if mode is None:
        raise ConfigError(
            "param 'mode' is required: choose rebaseline (copy the chosen tables again) or backfill "
            f"(re-send rows into the destinations) in the trigger form of pipeline {config.name!r}; "
            "nothing was copied"
        )
    if mode not in MODES:
        raise ConfigError(f"param 'mode' must be one of {', '.join(MODES)}, not {shown(mode)}")
    condition = params.get("backfill_filter")
    if condition is not None and not isinstance(condition, str):
        raise ConfigError(f"param 'backfill_filter' must be SQL text, not {condition!r}")
    condition = (condition or "").strip()
    if mode == "backfill" and not config.backfill_destinations():
        raise ConfigError(
            f"param 'mode': pipeline {config.name!r} has no lake or PostgreSQL destination, and a filter "
            "backfill writes only those; choose mode 'rebaseline' to copy the tables into its "
            "destinations again"
        )
    if mode == "rebaseline" and condition:
        raise ConfigError(
            "param 'backfill_filter' is for mode 'backfill' only; clear it to rebaseline, or choose mode "
            "'backfill' to re-send only the matching rows"
        )
    if condition:  # read before any task runs; the tables' columns are checked by the backfill
        parse_condition(condition, config.baseline.backfill_filters, "param 'backfill_filter'")
    asked = params.get("tables")
    if asked is None:
        raise ConfigError(
            f"param 'tables' is required: choose the tables to {mode} in the trigger form (pipeline "
            f"{config.name!r} has {', '.join(config.table_keys)}); nothing was copied"
        )
    if isinstance(asked, str) or not isinstance(asked, Sequence) or not asked:
        raise ConfigError(
            f"param 'tables' must be a non-empty list of the pipeline's tables "
            f"({', '.join(config.table_keys)}), not {shown(asked)}"
        )
    unknown = [t for t in asked if not isinstance(t, str) or not _known(config, t)]
    if unknown:
        raise ConfigError(
            f"param 'tables': pipeline {config.name!r} has no table {', '.join(map(shown, unknown))}; "
            f"its tables: {', '.join(config.table_keys)}"
        )
    wanted = {config.table(t).key for t in asked}
    entries = [t.to_entry() for t in config.tables if t.key in wanted]
    if mode == "rebaseline":
        destinations = chosen_destinations(config, params)
        return {"rebaseline": [{"table": e, "destinations": destinations} for e in entries], "backfill": []}
    return {"rebaseline": [], "backfill": [{"table": e, "backfill_filter": condition} for e in entries]}


def chosen_destinations(config: PipelineConfig, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The configs of the destinations param ``destinations`` names (default: all), config order."""
    names = [d.name for d in config.destinations]
    asked = params.get("destinations")
    if asked is None:
        asked = names
    if isinstance(asked, str) or not isinstance(asked, Sequence) or not asked:
        raise ConfigError(
            f"param 'destinations' must be a non-empty list of the pipeline's destinations "
            f"({', '.join(names)}), not {shown(asked)}"
        )
    unknown = [d for d in asked if not isinstance(d, str) or d not in names]
    if unknown:
        raise ConfigError(
            f"param 'destinations': pipeline {config.name!r} has no destination "
            f"{', '.join(map(shown, unknown))}; its destinations: {', '.join(names)}"
        )
    return [d.to_mapping() for d in config.destinations if d.name in asked]


def _known(config: PipelineConfig, table: str) -> bool:
    try:
        config.table(table)
    except (ConfigError, ValueError):
        return False
    return True


def teardown_params(config: PipelineConfig) -> dict[str, Param]:
    """``confirm``: must be the pipeline's name for teardown to drop anything; ``tables`` (default
    none: the whole pipeline) and ``drop_tables`` (default false) tear down only some tables."""
    return {
        "confirm": Param(
            "",
            type="string",
            title="Confirm",
            description=(
                f"Type the pipeline name ({config.name}) to drop its replication slot, publication "
                "and state (or, with tables, those tables' state). The changelog and the destinations' "
                "tables are kept (unless drop_tables)."
            ),
        ),
        "tables": Param(
            [],
            type="array",
            items={"type": "string", "minLength": 1, "maxLength": TABLE_NAME_CHARS},
            uniqueItems=True,
            title="Tables",
            description=(
                "Empty (default): tear the whole pipeline down. Otherwise only these tables, taken out "
                "of the pipeline's config first (and setup run, which takes them out of the "
                "publication): their state is removed, the other tables stream on."
            ),
        ),
        "drop_tables": Param(
            False,
            type="boolean",
            title="Drop their destination tables",
            description=(
                "With tables only: also drop those tables in the destinations that can (PostgreSQL; a "
                "custom destination with drop_table); the lake's are kept, and the log says how to drop them."
            ),
        ),
    }


def teardown_tables(config: PipelineConfig, params: Mapping[str, Any]) -> tuple[list[str], bool]:
    """The tables param ``tables`` names for a teardown of those alone (empty: the whole pipeline)
    and whether to drop their destination tables (``drop_tables``). ConfigError naming the param
    for a value that cannot be run, or a table the config still lists."""
    asked = params.get("tables") or []
    if isinstance(asked, str) or not isinstance(asked, Sequence):
        raise ConfigError(
            f"param 'tables' must be a list of tables taken out of pipeline {config.name!r} (empty: the "
            f"whole pipeline), not {shown(asked)}; nothing was dropped"
        )
    drop = params.get("drop_tables", False)
    if drop is None:
        drop = False
    if not isinstance(drop, bool):
        raise ConfigError(
            f"param 'drop_tables' must be true or false, not {shown(drop)}; nothing was dropped"
        )
    keys = []
    for table in asked:
        if not isinstance(table, str) or len(table) > TABLE_NAME_CHARS:
            raise ConfigError(f"param 'tables': {shown(table)} is not a table name; nothing was dropped")
        try:
            key = str(TableRef.parse(table))
        except (ConfigError, ValueError):
            raise ConfigError(
                f"param 'tables': {shown(table)} is not a table name ('schema.table'); nothing was dropped"
            ) from None
        if _known(config, key):
            raise ConfigError(
                f"param 'tables': table {key} is still in pipeline {config.name!r}'s config; take it out "
                "of the config and run the setup DAG first (it takes the table out of the publication), "
                "then tear it down; nothing was dropped"
            )
        keys.append(key)
    if drop and not keys:
        raise ConfigError(
            "param 'drop_tables' is for a teardown of some tables (param 'tables'); the whole pipeline's "
            "teardown keeps the destinations' tables: clear it, or name the tables; nothing was dropped"
        )
    return list(dict.fromkeys(keys)), drop


def check_confirmation(config: PipelineConfig, params: Mapping[str, Any]) -> None:
    """ConfigError unless param ``confirm`` equals the pipeline's name."""
    given = params.get("confirm")
    if given != config.name:
        raise ConfigError(
            f"param 'confirm' must be the pipeline name {config.name!r} to tear pipeline {config.name!r} "
            f"down, not {shown(given)}; nothing was dropped"
        )
