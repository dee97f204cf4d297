"""A destination config as the operators take it (``{"kind": "lake" | "postgres" | "custom",
...}``): the name it gives its destination, and the destination for apply.

A ``custom`` config names a ``Destination`` subclass a user wrote:
``{"kind": "custom", "class": "package.module.ClassName", "name": "...", **options}``; the
destination is ``Class.from_config(config)`` when the class has one, else ``Class(**options)``
(the options are the config without ``kind`` and ``class``; ``name`` is one of them).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_pgsync.apply.destination import Destination
from airflow_provider_pgsync.destinations.lake import LakeDestination, lake_name
from airflow_provider_pgsync.destinations.pg_typedefs import SourceCatalog
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import shown

KINDS = ("lake", "postgres", "custom")

DESTINATION_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,62}")
"""A destination's name (postgres and custom): it is a key of the state, of the replica's
watermark rows and of the pipeline's Airflow asset alias (``pgsync_<pipeline>_<name>``)."""
DESTINATION_NAME_RULE = "1-63 ASCII letters, digits, _ or -, not starting with - (e.g. 'replica_eu')"

# a dotted path of Python identifiers with at least a module and a class
CLASS_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


def destination_kind(config: Mapping[str, Any]) -> str:
    """The config's ``kind`` (default ``lake``); ConfigError naming the kinds for another."""
    kind = config.get("kind", "lake")
    if kind not in KINDS:
        raise ConfigError(f"destination kind {kind!r} is unknown; use 'lake', 'postgres' or 'custom'")
    return str(kind)


def destination_name(config: Mapping[str, Any]) -> str:
    """The name the config's destination goes by in the state (as its ``name``): ``lake`` or
    ``lake_<database>`` for a lake, the config's ``name`` (default ``postgres``) for a replica,
    the config's ``name`` (required) for a custom destination."""
    kind = destination_kind(config)
    if kind == "postgres":
        return check_destination_name(config.get("name", "postgres"), kind)
    if kind == "custom":
        return custom_name(config)
    return lake_name(LakeDestination.from_config(dict(config)))


def open_destination(config: Mapping[str, Any], *, source: SourceCatalog | None = None) -> Destination:
    """The destination apply writes through for ``config`` (connects a replica, which reads the
    types and generated columns of the tables it creates from the ``source`` catalog)."""
    # imported here: each kind's module brings its own I/O libraries
    kind = destination_kind(config)
    if kind == "postgres":
        from airflow_provider_pgsync.destinations.postgres import PostgresDestination

        return PostgresDestination.from_config(config, source=source)
    if kind == "custom":
        return open_custom(config)
    from airflow_provider_pgsync.destinations.lake_changes import LakeChanges

    return LakeChanges.from_config(dict(config))


def custom_name(config: Mapping[str, Any]) -> str:
    """A custom config's ``name``; ConfigError when it has none."""
    name = config.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"custom destination config {_shown(config)} needs a 'name' (how the state and the "
            "logs call it), e.g. {'kind': 'custom', 'class': ..., 'name': 'sqlite'}"
        )
    return check_destination_name(name, "custom")


def check_destination_name(name: object, kind: str) -> str:
    """``name`` if it can name a destination (``DESTINATION_NAME``); ConfigError naming the rule."""
    if not isinstance(name, str) or not DESTINATION_NAME.fullmatch(name):
        raise ConfigError(
            f"{kind} destination name {shown(name)} is not allowed: use {DESTINATION_NAME_RULE}"
        )
    return name


def custom_class(config: Mapping[str, Any]) -> type[Destination]:
    """The ``Destination`` subclass a custom config's ``class`` names, imported.

    The path comes from the DAG author's config and is imported like DAG code (trusted as
    much as the DAG file itself); it must still be a dotted path of Python identifiers.
    """
    path = config.get("class")
    if not isinstance(path, str) or not CLASS_PATH.fullmatch(path):
        raise ConfigError(
            f"custom destination config {_shown(config)}: 'class' must be the dotted path of a "
            f"Destination subclass, like 'my_package.my_module.MyDestination', not {path!r}"
        )
    module_name, _, class_name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"custom destination config {_shown(config)}: cannot import module {module_name!r} "
            f"({exc}); install the package that holds {path} where the tasks run"
        ) from exc
    found = getattr(module, class_name, None)
    if not isinstance(found, type) or not issubclass(found, Destination):
        raise ConfigError(
            f"custom destination config {_shown(config)}: {path} is not a subclass of "
            "airflow_provider_pgsync.destinations.protocol.Destination; point 'class' at your "
            "destination class (docs/writing-a-destination.md)"
        )
    return found


def open_custom(config: Mapping[str, Any]) -> Destination:
    """A custom config's destination: ``Class.from_config(config)`` or ``Class(**options)``."""
    name = custom_name(config)
    cls = custom_class(config)
    from_config = getattr(cls, "from_config", None)
    if callable(from_config):
        destination = from_config(dict(config))
    else:
        options = {k: v for k, v in config.items() if k not in ("kind", "class")}
        try:
            destination = cls(**options)
        except TypeError as exc:
            raise ConfigError(
                f"custom destination config {_shown(config)}: {config['class']} does not take "
                f"these options ({exc}); give the options its constructor takes, or a from_config"
            ) from exc
    if not isinstance(destination, Destination):
        raise ConfigError(f"custom destination config {_shown(config)}: from_config returned no Destination")
    if getattr(destination, "name", None) != name:
        raise ConfigError(
            f"custom destination config {_shown(config)}: the destination calls itself "
            f"{getattr(destination, 'name', None)!r}, not {name!r}; pass 'name' on to it"
        )
    return destination


def _shown(config: Mapping[str, Any]) -> str:
    """The config in an error message: its kind, class and name (options may hold secrets)."""
    return repr({k: config[k] for k in ("kind", "class", "name") if k in config})
