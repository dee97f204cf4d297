"""A lake's Hive metastore in a PostgreSQL database (``metastore="postgres"``), opened by a job.

Unlike embedded Derby, such a metastore serves many processes at once: jobs, a user's
``spark-sql``, a Thrift server. Spark's Hive client reaches it through DataNucleus and the
PostgreSQL JDBC driver (on the driver's class path). Two things the client does not do well
by itself, done here before the session's first catalog step:

- **The password.** Hive hands DataNucleus the configured password, an empty one included,
  so the JDBC driver never looks in the password file. The job reads it from its password
  file (``PGPASSFILE``, written or mounted as for the baseline's source) and sets it in the
  session's Hadoop configuration: in the driver JVM's memory only, not in Spark's
  configuration (so in no UI page, event log or command line).
- **The schema.** DataNucleus can create the metastore's tables lazily, class by class, as
  sessions first use them; concurrent sessions doing so deadlock. So auto-creation stays off
  (``LakeDestination.spark_conf``) and the first job to find no schema creates all of it at
  once with DataNucleus's own SchemaTool, holding a PostgreSQL advisory lock, then records
  Hive's schema version, which every session then verifies.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pyspark.sql import SparkSession

from airflow_provider_pgsync.baseline.passfile import password_for, private_passfile
from airflow_provider_pgsync.destinations.lake import LakeDestination

log = logging.getLogger("pgsync.spark")

SCHEMA_LOCK = "pgsync hive metastore schema"
"""The advisory lock (its ``hashtext``) held while the metastore's schema is made."""
_VERSION_COMMENT = "Set by pgsync"
_SCHEMA_TOOL = "org.datanucleus.store.schema.SchemaTool"


def open_metastore(spark: SparkSession, lake: LakeDestination) -> None:
    """Make ``lake``'s PostgreSQL metastore usable by ``spark`` (a no-op for other metastores):
    the user and password in its Hadoop configuration, the schema there (made if need be)."""
    if lake.metastore != "postgres":
        return
    if not lake.metastore_conninfo or not lake.metastore_url:
        raise ValueError(
            "the lake's PostgreSQL metastore was not resolved from its connection "
            f"{lake.metastore_conn_id!r}; submit the job through pgsync's operators"
        )
    target = conninfo_to_dict(lake.metastore_conninfo)
    password = _password(target)
    jvm = spark.sparkContext._jvm
    jsc = spark.sparkContext._jsc
    assert jvm is not None and jsc is not None
    hadoop = jsc.hadoopConfiguration()
    hadoop.set("javax.jdo.option.ConnectionUserName", str(target.get("user", "")))
    if password is not None:
        hadoop.set("javax.jdo.option.ConnectionPassword", password)
    with psycopg.connect(_with_passfile(lake.metastore_conninfo), autocommit=True) as conn:
        if _schema_version(conn) is not None:
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (SCHEMA_LOCK,))
            if _schema_version(conn) is not None:
                return  # another job made it while this one waited
            # the version Hive's client verifies (Spark's built-in Hive)
            version = str(jvm.org.apache.hadoop.hive.metastore.MetaStoreSchemaInfo.getHiveSchemaVersion())
            log.info("the lake's metastore %s has no schema: creating Hive %s's", _shown(target), version)
            _create_schema(jvm, lake, target, password)
            conn.execute(
                'INSERT INTO "VERSION" ("VER_ID", "SCHEMA_VERSION", "VERSION_COMMENT") VALUES (1, %s, %s)',
                (version, _VERSION_COMMENT),
            )
    log.info("the lake's metastore %s: Hive schema %s created", _shown(target), version)


def _schema_version(conn: psycopg.Connection[tuple[object, ...]]) -> str | None:
    """The Hive schema version the metastore's database records, None when it has none."""
    row = conn.execute("SELECT to_regclass('\"VERSION\"') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return None
    found = conn.execute('SELECT "SCHEMA_VERSION" FROM "VERSION"').fetchone()
    return None if found is None else str(found[0])


def _create_schema(
    jvm: object, lake: LakeDestination, target: Mapping[str, object], password: str | None
) -> None:
    """Every table of Hive's metastore, made at once by DataNucleus's SchemaTool (a JVM of its
    own on this driver's class path: it reads the model from ``package.jdo`` in Hive's jar).
    Its connection settings, password included, are in a private file removed at once."""
    system = jvm.java.lang.System  # type: ignore[attr-defined]
    java = str(Path(str(system.getProperty("java.home")), "bin", "java"))
    class_path = str(system.getProperty("java.class.path"))
    settings = {
        "javax.jdo.option.ConnectionURL": lake.metastore_url,
        "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "javax.jdo.option.ConnectionUserName": str(target.get("user", "")),
        # the identifiers and value generation Hive's metastore uses (its hive-default settings)
        "datanucleus.identifierFactory": "datanucleus1",
        "datanucleus.rdbms.useLegacyNativeValueStrategy": "true",
    }
    if password is not None:
        settings["javax.jdo.option.ConnectionPassword"] = password
    with tempfile.TemporaryDirectory(prefix="pgsync-metastore-") as work:  # 0700
        properties = Path(work, "datanucleus.properties")
        fd = os.open(properties, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            # java.util.Properties syntax: backslashes, and the separators in keys, escaped
            out.writelines(f"{k}={v.replace(chr(92), chr(92) * 2)}\n" for k, v in settings.items())
        done = subprocess.run(
            [
                java,
                "-cp",
                class_path,
                _SCHEMA_TOOL,
                "-create",
                "-api",
                "JDO",
                "-props",
                str(properties),
                "package.jdo",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0 or "completed successfully" not in done.stdout:
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        raise RuntimeError(
            f"creating the Hive schema in the lake's metastore {_shown(target)} failed: "
            + " | ".join(lines[-5:])
            + "; check that the connection's user may create tables in that database"
        )


def _with_passfile(conninfo: str) -> str:
    """``conninfo`` naming the job's password file (made private, as libpq requires), if any."""
    path = os.environ.get("PGPASSFILE", "")
    return (
        make_conninfo(conninfo, passfile=private_passfile(path))
        if path and os.path.exists(path)
        else conninfo
    )


def _password(target: Mapping[str, object]) -> str | None:
    """The metastore's password from the job's password file (None: none there)."""
    path = os.environ.get("PGPASSFILE", "")
    if not path or not os.path.exists(path):
        return None
    return password_for(
        Path(path).read_text(encoding="utf-8"),
        str(target.get("host", "")),
        str(target.get("port", "")),
        str(target.get("dbname", "")),
        str(target.get("user", "")),
    )


def _shown(target: Mapping[str, object]) -> str:
    return f"{target.get('host', 'localhost')}:{target.get('port', 5432)}/{target.get('dbname', '')}"
