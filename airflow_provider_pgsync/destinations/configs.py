"""A destination config as the operators take it (``{"kind": "lake" | "postgres", ...}``): the
name it gives its destination, and the destination for apply."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_pgsync.destinations.lake import LakeDestination, lake_name
from airflow_provider_pgsync.destinations.protocol import Destination
from airflow_provider_pgsync.errors import ConfigError

KINDS = ("lake", "postgres")


def destination_kind(config: Mapping[str, Any]) -> str:
    """The config's ``kind`` (default ``lake``); ConfigError naming the kinds for another."""
    kind = config.get("kind", "lake")
    if kind not in KINDS:
        raise ConfigError(f"destination kind {kind!r} is unknown; use 'lake' or 'postgres'")
    return str(kind)


def destination_name(config: Mapping[str, Any]) -> str:
    """The name the config's destination goes by in the state (as its ``name``): ``lake`` or
    ``lake_<database>`` for a lake, the config's ``name`` (default ``postgres``) for a replica."""
    if destination_kind(config) == "postgres":
        return str(config.get("name", "postgres"))
    return lake_name(LakeDestination.from_config(dict(config)))


def open_destination(config: Mapping[str, Any]) -> Destination:
    """The destination apply writes through for ``config`` (connects a replica)."""
    # imported here: each kind's module brings its own I/O libraries
    if destination_kind(config) == "postgres":
        from airflow_provider_pgsync.destinations.postgres import PostgresDestination

        return PostgresDestination.from_config(config)
    from airflow_provider_pgsync.destinations.lake_changes import LakeChanges

    return LakeChanges.from_config(dict(config))
