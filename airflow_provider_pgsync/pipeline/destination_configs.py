"""Where a pipeline's changes go: the configs of the lake, PostgreSQL and custom destinations.

``to_mapping()`` gives a destination's config as the operators take it (the ``from_config``
of ``destinations/lake.py`` and ``destinations/postgres.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_pgsync.destinations.configs import CLASS_PATH, check_destination_name
from airflow_provider_pgsync.destinations.lake import METASTORES, LakeDestination
from airflow_provider_pgsync.destinations.postgres import DEFAULT_FILLFACTOR
from airflow_provider_pgsync.pipeline.problems import Checks, choice, conn_id_problem, location_problem
from airflow_provider_pgsync.source.names import TableRef, shown

DESTINATION_KINDS = ("lake", "postgres", "custom")

_LAKE_DATABASE = re.compile(r"[a-z_][a-z0-9_]{0,57}")  # the destination is lake_<database>


@dataclass(frozen=True)
class LakeDestinationConfig:
    """The lake destination (Spark catalog tables over versioned Parquet).

    ``warehouse`` None means ``$PGSYNC_LAKE``, else ``$AIRFLOW_HOME/pgsync/lake``, resolved
    where the task runs. The destination's name (the key of its watermark) is ``lake``, or
    ``lake_<database>`` for another catalog database.
    """

    warehouse: str | None = None
    database: str = "pgsync"
    metastore: str = "derby"
    metastore_conn_id: str | None = None
    kind: ClassVar[str] = "lake"

    def __post_init__(self) -> None:
        checks = Checks()
        if self.warehouse is not None:
            problem = location_problem(self.warehouse)
            if problem:
                checks.add("warehouse", problem)
        if not isinstance(self.database, str) or not _LAKE_DATABASE.fullmatch(self.database):
            checks.add(
                "database",
                f"{shown(self.database)} is not allowed: use 1-58 lower-case letters, digits and _, "
                "not starting with a digit",
            )
        problem = choice(self.metastore, METASTORES)
        if problem:
            checks.add("metastore", problem)
        elif self.metastore == "derby" and self.warehouse and _remote(self.warehouse):
            checks.add(
                "metastore",
                f"the embedded derby metastore needs a local warehouse, not {self.warehouse!r}; "
                "use metastore 'postgres' with a metastore_conn_id, or 'external' and configure the "
                "Hive metastore in spark.conf",
            )
        if self.metastore == "postgres":
            problem = conn_id_problem(self.metastore_conn_id)
            if problem:
                checks.add("metastore_conn_id", f"{problem} (the PostgreSQL database of the lake's catalog)")
        elif self.metastore_conn_id is not None:
            checks.add("metastore_conn_id", f"is for metastore 'postgres', not {self.metastore!r}")
        if not checks.found:  # the destination's own checks, in case they are stricter
            checks.catch("", lambda: LakeDestination.from_config(self.to_mapping()))
        checks.raise_any("lake destination")

    @property
    def name(self) -> str:
        return "lake" if self.database == "pgsync" else f"lake_{self.database}"

    def to_mapping(self) -> dict[str, Any]:
        """The destination config the operators take (no warehouse: the default where the task runs)."""
        data: dict[str, Any] = {"kind": self.kind, "database": self.database, "metastore": self.metastore}
        if self.metastore_conn_id is not None:
            data["metastore_conn_id"] = self.metastore_conn_id
        if self.warehouse is not None:
            data["warehouse"] = self.warehouse
        return data


def _remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


@dataclass(frozen=True)
class PostgresDestinationConfig:
    """A PostgreSQL replica: its Airflow connection, its name (the key of its watermark), the
    schema of its control tables and the fillfactor of the tables it creates (10 to 100; the
    default leaves room on each page for updated rows, 100 suits append-only data)."""

    conn_id: str
    name: str = "postgres"
    control_schema: str = "pgsync"
    fillfactor: int = DEFAULT_FILLFACTOR
    kind: ClassVar[str] = "postgres"

    def __post_init__(self) -> None:
        checks = Checks()
        problem = conn_id_problem(self.conn_id)
        if problem:
            checks.add("conn_id", problem)
        checks.catch("name", lambda: check_destination_name(self.name, self.kind))
        checks.catch("control_schema", lambda: TableRef(self.control_schema, "watermarks"))
        # PostgresDestination's own rule, checked here too: the destination checks it only as it connects
        fillfactor = self.fillfactor
        if isinstance(fillfactor, bool) or not isinstance(fillfactor, int) or not 10 <= fillfactor <= 100:
            checks.add("fillfactor", f"must be an integer from 10 to 100, not {fillfactor!r}")
        checks.raise_any("postgres destination")

    def to_mapping(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "conn_id": self.conn_id,
            "name": self.name,
            "control_schema": self.control_schema,
            "fillfactor": self.fillfactor,
        }


@dataclass(frozen=True)
class CustomDestinationConfig:
    """A destination you wrote: the dotted path of its ``Destination`` subclass, its name (the
    key of its phases and lineage in the state) and the options it is built with
    (``Class.from_config(config)`` or ``Class(**options)``, ``destinations/configs.py``).

    The class path is imported where the tasks run, like DAG code: it comes from the
    pipeline's author and is trusted as much as a DAG file; here it is only checked to be a
    dotted path of Python identifiers (the DAG processor need not have the package).
    """

    class_path: str
    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    kind: ClassVar[str] = "custom"

    def __post_init__(self) -> None:
        checks = Checks()
        if not isinstance(self.class_path, str) or not CLASS_PATH.fullmatch(self.class_path):
            checks.add(
                "class",
                f"must be the dotted path of a Destination subclass (package.module.Class), "
                f"not {self.class_path!r}",
            )
        checks.catch("name", lambda: check_destination_name(self.name, self.kind))
        if not isinstance(self.options, Mapping):
            checks.add("options", f"must be a mapping, not {self.options!r}")
        else:
            for key in self.options:
                if not isinstance(key, str) or key in ("kind", "class", "name"):
                    checks.add(str(key), "is not allowed as an option of a custom destination")
        checks.raise_any("custom destination")

    def to_mapping(self) -> dict[str, Any]:
        """The destination config the operators take: kind, class, name and the options."""
        return {"kind": self.kind, "class": self.class_path, "name": self.name, **dict(self.options)}


DestinationConfig = LakeDestinationConfig | PostgresDestinationConfig | CustomDestinationConfig
