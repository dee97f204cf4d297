"""The lake destination's configuration and naming: Spark catalog tables over versioned Parquet.

Pure logic, shared by operators and Spark jobs. A table ``schema.name`` of the source is
kept under ``<warehouse>/<database>/<schema>__<name>/``; its base versions are folders
``base/v<UTC time>-<random>`` and the catalog table ``<database>.<schema>__<name>__base``
points at the current one; the view ``<database>.<schema>__<name>`` adds the changes apply
wrote since (``lake_tables.py``). By default the catalog is Spark's Hive catalog on an embedded
Derby metastore in ``<warehouse>/metastore_db`` (one process at a time: jobs take a file
lock around their short catalog step); ``metastore="postgres"`` keeps it in a PostgreSQL
database (Airflow connection ``metastore_conn_id``) that many processes use at once
(``spark/metastore_postgres.py``); ``metastore="external"`` leaves the catalog to the Spark
configuration (e.g. ``spark.hadoop.hive.metastore.uris``).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import uuid
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import TableRef, shown

METASTORES = ("derby", "postgres", "external")
# at most 58 characters: the destination is called lake_<database> (63 at most, like every name)
_CATALOG_NAME = re.compile(r"[a-z_][a-z0-9_]{0,57}")
_SIMPLE_PART = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")


def default_warehouse() -> str:
    """``$PGSYNC_LAKE``, else ``$AIRFLOW_HOME/pgsync/lake`` (``~/airflow`` when AIRFLOW_HOME is unset)."""
    if os.environ.get("PGSYNC_LAKE"):
        return os.environ["PGSYNC_LAKE"]
    home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return str(Path(home) / "pgsync" / "lake")


def catalog_name(table: TableRef) -> str:
    """``<schema>__<name>`` for simple names (lower-case words joined by single ``_``).

    Any other name is folded to such characters and gets a hash of its exact parts, so two
    tables never share a name (``"Orders"`` and ``orders``, ``a_.b`` and ``a._b``).
    """
    if _SIMPLE_PART.fullmatch(table.schema) and _SIMPLE_PART.fullmatch(table.name):
        return f"{table.schema}__{table.name}"
    folded = re.sub(r"[^a-z0-9]+", "_", f"{table.schema}__{table.name}".lower()).strip("_")
    digest = hashlib.sha256(f"{table.schema}\0{table.name}".encode()).hexdigest()[:8]
    return f"{folded or 't'}_{digest}"


def new_version() -> str:
    """A new id of a base version, and of the lineage a baseline starts: ``v<UTC time>-<8 hex>``."""
    return f"v{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def lake_name(lake: LakeDestination) -> str:
    """The name apply knows a lake destination by (its watermarks, a backfill's staged rows):
    ``lake``, or ``lake_<database>`` for a database other than ``pgsync``."""
    return "lake" if lake.database == "pgsync" else f"lake_{lake.database}"


@dataclass(frozen=True)
class LakeDestination:
    """Where and how the lake keeps its tables."""

    warehouse: str
    database: str = "pgsync"
    metastore: str = "derby"
    metastore_conn_id: str = ""
    """The Airflow connection of the PostgreSQL metastore's database (``metastore="postgres"``)."""
    metastore_url: str = ""
    """That database's JDBC URL and ``metastore_conninfo`` its libpq string, neither with the
    password: resolved from the connection by the operator that submits a job
    (``hooks/lake_metastore.py``); the job finds the password in its password file."""
    metastore_conninfo: str = ""
    kind: str = "lake"

    def __post_init__(self) -> None:
        if not _CATALOG_NAME.fullmatch(self.database):
            raise ConfigError(
                f"lake database {shown(self.database)} must be a lower-case name of 1-58 letters, "
                "digits and _, not starting with a digit"
            )
        if self.metastore not in METASTORES:
            raise ConfigError(f"lake metastore {self.metastore!r} is unknown; use one of {METASTORES}")
        if self.metastore == "derby" and not self.local_path:
            raise ConfigError(
                f"lake warehouse {self.warehouse!r} is not a local folder: an embedded Derby metastore "
                "lives on local disk; set metastore='postgres' with a metastore_conn_id, or 'external' "
                "and configure the Hive metastore in Spark"
            )
        if self.metastore == "postgres" and not self.metastore_conn_id and not self.metastore_url:
            raise ConfigError(
                "lake metastore 'postgres' needs metastore_conn_id: the Airflow connection of the "
                "PostgreSQL database that keeps the lake's catalog"
            )
        if self.metastore != "postgres" and (self.metastore_conn_id or self.metastore_url):
            raise ConfigError(
                f"lake option metastore_conn_id is for metastore 'postgres', not {self.metastore!r}"
            )

    @classmethod
    def from_config(cls, config: dict[str, Any] | None = None) -> LakeDestination:
        data = dict(config or {})
        data.pop("kind", None)
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(
                f"lake destination option(s) {', '.join(sorted(unknown))} unknown; "
                "use warehouse, database, metastore, metastore_conn_id"
            )
        warehouse = str(data.get("warehouse") or default_warehouse())
        if warehouse.startswith("file:") and not warehouse.startswith("file://"):
            warehouse = warehouse[len("file:") :]  # Hadoop's file:/path
        if "://" not in warehouse:
            warehouse = str(Path(warehouse).expanduser().resolve())
        data["warehouse"] = warehouse
        return cls(**data)

    def to_config(self) -> dict[str, Any]:
        """The options as ``from_config`` takes them (the metastore's connection only when set)."""
        return {k: v for k, v in asdict(self).items() if v != "" or not k.startswith("metastore_")}

    @property
    def local_path(self) -> str | None:
        """The warehouse as a local path, None when it is a URI of another filesystem."""
        if self.warehouse.startswith("file://"):
            return self.warehouse[len("file://") :]
        return None if "://" in self.warehouse else self.warehouse

    def table_dir(self, table: TableRef) -> str:
        return f"{self.warehouse.rstrip('/')}/{self.database}/{catalog_name(table)}"

    def backfill_dir(self, table: TableRef, backfill_id: str) -> str:
        """Where the rows of backfill ``backfill_id`` of ``table`` wait for apply."""
        return f"{self.table_dir(table)}/backfill/{backfill_id}"

    def base_table(self, table: TableRef) -> str:
        """The catalog name of the table's base, ``database.schema__name__base``."""
        return f"{self.database}.{catalog_name(table)}__base"

    @property
    def database_location(self) -> str | None:
        """Where the catalog database's own folder is, ``<warehouse>/warehouse/<database>.db``
        (the tables have locations of their own): given explicitly, since a PostgreSQL
        metastore may serve sessions of several warehouses; None with an external metastore
        (its own warehouse decides)."""
        if self.metastore == "external":
            return None
        return f"{self.catalog_warehouse}/{self.database}.db"

    @property
    def catalog_warehouse(self) -> str:
        """The catalog's own folder of the warehouse, ``<warehouse>/warehouse``."""
        return f"{self.warehouse.rstrip('/')}/warehouse"

    def spark_conf(self) -> dict[str, str]:
        """Spark settings the catalog needs (set when the job's session starts)."""
        conf = {"spark.sql.catalogImplementation": "hive"}
        if self.metastore == "derby":
            local = self.local_path
            assert local is not None  # checked in __post_init__
            conf["spark.sql.warehouse.dir"] = f"{local}/warehouse"
            conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = (
                f"jdbc:derby:;databaseName={local}/metastore_db;create=true"
            )
        elif self.metastore == "postgres":
            conf["spark.sql.warehouse.dir"] = self.catalog_warehouse
            # no process creates the schema on the fly (concurrent sessions deadlock doing so):
            # the job makes it once, under a lock (spark/metastore_postgres.py), and Hive checks it
            conf["spark.hadoop.datanucleus.schema.autoCreateAll"] = "false"
            conf["spark.hadoop.hive.metastore.schema.verification"] = "true"
            conf["spark.hadoop.javax.jdo.option.ConnectionDriverName"] = "org.postgresql.Driver"
            if self.metastore_url:
                conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = self.metastore_url
        return conf
