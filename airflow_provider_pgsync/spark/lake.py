"""The lake destination inside a Spark job: a new base version written aside, then swapped in.

A new base (from a baseline or a compaction) is written to a fresh versioned folder, then
made current: the table's next generation (``destinations/lake_tables.py``) is published,
its lineage gets its changes table, and the view ``<database>.<schema>__<name>`` is
replaced by one reading the new base and the segments after its watermark, one metastore
operation, so a reader sees the old state or the new one, never a part. The catalog table
``<database>.<schema>__<name>__base`` is pointed at the new base too (``ALTER TABLE ... SET
LOCATION``; dropped and created again when the columns changed). Older versions are removed
after the swap, keeping the previous one for queries that are still reading it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.destinations.lake import LakeDestination, catalog_name, new_version
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_tables import (
    RECORD_FIELDS,
    LakeTableMeta,
    changes_dir,
    changes_table,
    merge_sql,
    quote,
    view_name,
)
from airflow_provider_pgsync.errors import PublishConflictError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.spark.metastore_lock import MetastoreLock

log = logging.getLogger("pgsync.spark")


@dataclass(frozen=True)
class CatalogView:
    """What the catalog holds for a base table before the swap: its database, and the table's
    location and schema (None when the table does not exist yet)."""

    database_exists: bool
    location: str | None
    schema: str | None


@dataclass(frozen=True)
class _Cleanup:
    """What ``clean_up`` may remove after the publish of ``meta``: base versions but ``kept``
    (all of them but ``kept`` when ``unpublished``: a baseline's), and segment lineages but
    ``lineages`` (None: none)."""

    meta: LakeTableMeta
    kept: set[str | None]
    lineages: set[str] | None
    unpublished: bool


@dataclass(frozen=True)
class StagedBase:
    """A base version written and counted, not yet visible to readers."""

    location: str
    rows: int
    schema: StructType


class LakeBaseWriter:
    """Writes one table's base into the lake destination ``destination``; ``keys`` are the
    table's key columns (none: the whole row is its identity)."""

    def __init__(
        self, spark: SparkSession, destination: LakeDestination, table: TableRef, keys: tuple[str, ...] = ()
    ) -> None:
        self.spark, self.destination, self.table, self.keys = spark, destination, table, keys
        self.name = destination.base_table(table)
        self.files = LakeFiles(destination)
        self._metastore = MetastoreLock(spark, destination)
        self._warming: threading.Thread | None = None
        self._wanted = threading.Event()  # the swap waits for the catalog: no rehearsal now
        self._view: CatalogView | None = None
        self._upcoming: tuple[str, StructType] | None = None  # the base being written, for warm_up
        self._ready_lineage: str | None = None  # whose changes table exists already
        self._early_changes: str | None = None  # made by warm_up for a first baseline
        self._early_database: str | None = None  # made by warm_up for a new lake's first baseline
        self._alone = False  # warm_up found the embedded metastore this process's alone
        self._cleanup: _Cleanup | None = None

    def new_location(self, version: str | None = None) -> str:
        """A fresh version folder for the next base, named ``version`` (a baseline's lineage id)
        or a new id (nothing reads it until it is swapped in)."""
        version = version or new_version()
        return f"{self.destination.table_dir(self.table)}/base/{version}"

    def backfill_location(self, backfill_id: str) -> str:
        """Where a backfill's rows are staged for apply (``stage`` writes them, nothing publishes them)."""
        return self.destination.backfill_dir(self.table, backfill_id)

    def stage(self, df: DataFrame, location: str | None = None) -> StagedBase:
        """Write ``df`` as the next base (at ``location``, else a new one) with Spark's Parquet writer."""
        location = location or self.new_location()
        counted = Observation("pgsync_rows")
        writer = df.observe(counted, F.count(F.lit(1)).alias("rows")).write.mode("errorifexists")
        # Dictionary pages of 64 kB instead of 1 MB: columns with few distinct values keep their
        # dictionary, the others give up on it sooner (measured: the write ~25 % faster)
        writer.option("parquet.dictionary.page.size", 64 * 1024).parquet(location)
        return StagedBase(location, int(counted.get["rows"]), df.schema)

    def stage_files(self, location: str, rows: int, schema: StructType) -> StagedBase:
        """A base whose Parquet files tasks wrote into ``location``: marked complete (``_SUCCESS``,
        as Spark's committer does)."""
        filesystem, marker = self._filesystem(f"{location}/_SUCCESS")
        filesystem.create(marker, True).close()
        return StagedBase(location, rows, schema)

    def make_location(self, location: str) -> None:
        filesystem, folder = self._filesystem(location)
        filesystem.mkdirs(folder)

    def discard(self, location: str) -> None:
        """Remove a version folder that never became the base (a failed write), and the changes
        table (and a new lake's database) ``warm_up`` made for it when it was the table's first
        base."""
        filesystem, folder = self._filesystem(location)
        filesystem.delete(folder, True)
        early, self._early_changes = self._early_changes, None
        database, self._early_database = self._early_database, None
        if (early is not None or database is not None) and self._alone:
            self.ready()
            try:
                if early is not None:
                    self.spark.sql(f"DROP TABLE IF EXISTS {early}")
                if database is not None:  # RESTRICT: another table's job may have used it since
                    self.spark.sql(f"DROP DATABASE IF EXISTS {quote(database)}")
            except Exception as exc:  # the next rebaseline drops it with the other old lineages
                log.warning("could not drop %s after the failed baseline: %s", database or early, exc)

    def _filesystem(self, location: str) -> tuple[Any, Any]:
        """Hadoop's FileSystem and Path of ``location`` (any URI Spark can write)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        path = jvm.org.apache.hadoop.fs.Path(location)
        return path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration()), path

    def warm_up(self, location: str | None = None, schema: StructType | None = None) -> None:
        """Start the catalog (Spark's Hive client, seconds of work) and read what it holds for
        the table while the data is written; given the ``location`` and ``schema`` of the base
        being written, also create the changes table of its lineage (and the database, for a
        table's first base). With the embedded metastore it also rehearses the swap
        (``_rehearse``), so the swap's ``ALTER TABLE`` and ``ALTER VIEW`` run warm.

        An embedded Derby metastore admits one process at a time: when it is free now, this
        job holds it from here to the end of its swap (nobody else can change the table in
        between); when another job holds it, nothing is started and the swap waits for it
        instead (``catalog``).
        """
        self._upcoming = (location, schema) if location is not None and schema is not None else None
        local = self._metastore.folder()
        if local is not None and not self._metastore.held_here() and not self._metastore.try_take():
            return
        # this process holds the embedded metastore (this job's lock, or another table's block)
        self._alone = self._metastore.taken or self._metastore.held_here()
        self._warming = threading.Thread(target=self._start_catalog, name="pgsync-catalog", daemon=True)
        self._warming.start()

    def ready(self, *, rehearsed: bool = False) -> None:
        """Wait for the catalog's early start (``warm_up``), without the rehearsal of the swap
        when that has not begun (it would only delay the swap it warms up), unless ``rehearsed``."""
        if not rehearsed:
            self._wanted.set()
        if self._warming is not None:
            self._warming.join()
            self._warming = None

    def _create_database(self) -> None:
        """The lake's catalog database, unless it exists, in its own folder of the warehouse."""
        location = self.destination.database_location
        self.spark.sql(
            f"CREATE DATABASE IF NOT EXISTS {quote(self.destination.database)}"
            + (f" LOCATION {_literal(location)}" if location else "")
        )

    def _start_catalog(self) -> None:
        try:
            if self._alone:  # nobody can change the table before the swap
                self._view = self._read_view()
                if self._upcoming is not None and not self._view.database_exists:
                    # a new lake: its database now rather than in the swap (a cold first
                    # metastore write, about a second); nobody reads it before the swap, and
                    # should the write fail, ``discard`` drops it again
                    self._create_database()
                    self._early_database = self.destination.database
                    self._view = CatalogView(True, None, None)
                # the lineage's changes table: nobody reads it before the swap; should the write
                # fail, ``discard`` drops it for a first baseline, and the next rebaseline drops
                # it with the other old lineages otherwise
                if self._upcoming is not None and self._view.database_exists:
                    location, schema = self._upcoming
                    lineage = str(_version(location))
                    self._changes_table(lineage, schema.jsonValue()["fields"])
                    if self._view.location is None:  # a first baseline: a failed copy drops it
                        self._early_changes = changes_table(self.destination, self.table, lineage)
                if self._view.location is not None and not self._wanted.is_set():
                    self._rehearse(self._view.location)
            else:  # a shared metastore: read the table at the swap, just start the client now
                self.spark.catalog.databaseExists(self.destination.database)
        except Exception as exc:  # the swap reports it, with the lock held properly
            log.info("the catalog did not start early: %s", exc)

    def _rehearse(self, location: str) -> None:
        """Run the swap's metastore work once while the base is written, changing nothing: the
        base table set to the location it has, the view replaced by its own definition.

        The first metastore write of a process compiles Derby's statements and loads the Hive
        client's and the analyser's code: measured on 2 busy cores, the swap's ``ALTER TABLE``
        and ``ALTER VIEW`` took 3-20 s cold and 1-3 s once warm. Only with the
        embedded metastore, which this job holds alone (no reader sees the rehearsal), and only
        while the base is still being written: once the swap waits (``ready``), it does not
        begin, or leaves out the view's part (measured: a rehearsal that ended 1.6 s after the
        copy made the swap 2.35 s, where the statements themselves, run right after the
        catalog's start, took about 1 s).
        """
        self.spark.sql(f"ALTER TABLE {self.name} SET LOCATION {_literal(location)}")
        if self._wanted.is_set():
            return
        view = view_name(self.destination, self.table)
        try:
            rows = self.spark.sql(f"DESCRIBE TABLE EXTENDED {view}").collect()
            text = next((str(r[1]) for r in rows if r[0] == "View Text"), None)
            if text is not None:
                self.spark.sql(f"ALTER VIEW {view} AS {text}")
        except Exception as exc:  # e.g. no view yet: the swap creates it
            log.info("the view %s was not rehearsed: %s", view, exc)

    def _read_view(self) -> CatalogView:
        if not self.spark.catalog.databaseExists(self.destination.database):
            return CatalogView(False, None, None)
        if not self.spark.catalog.tableExists(self.name):
            return CatalogView(True, None, None)
        # a catalog schema says every column is nullable: compare names and types
        return CatalogView(True, self._location(), self.spark.table(self.name).schema.simpleString())

    @contextmanager
    def catalog(self) -> Iterator[None]:
        """Exclusive use of an embedded Derby metastore (one process at a time), released at
        exit; inside another table's ``catalog()`` block of this process, that block's."""
        self.ready()
        with self._metastore.hold():
            yield

    def publish(
        self,
        staged: StagedBase,
        *,
        compacted: LakeTableMeta | None = None,
        watermark: Key | None = None,
        buckets: int = 0,
    ) -> dict[str, Any]:
        """Make ``staged`` the table's current base: a compaction's merge of generation
        ``compacted``, holding every change of its lineage up to ``watermark``, or (None) a
        baseline's, a new lineage over whatever generation is current; ``buckets``: its files are
        laid out by key hash (``LakeTableMeta.buckets``). Returns what was written.

        The generation is published first, as a compare-and-set (``LakeFiles.publish_generation``):
        a compaction whose generation is no longer current (rebaselined or compacted meanwhile)
        gets ``PublishConflictError`` before the catalog is touched; a baseline publishes over
        whatever another writer published meanwhile. Then the catalog follows it."""
        for attempt in range(1, 4):
            before = compacted if compacted is not None else self.files.current(self.table)
            meta = LakeTableMeta(
                number=before.number + 1 if before is not None else 1,
                base=staged.location,
                lineage=compacted.lineage if compacted is not None else str(_version(staged.location)),
                watermark=watermark,
                schema=staged.schema.jsonValue(),
                # a key that is the whole row identifies nothing more than the row: rows are counted
                keys=self.keys if len(self.keys) < len(staged.schema.fields) else (),
                buckets=buckets,
            )
            try:
                self.files.publish_generation(self.table, meta, before)
                break
            except PublishConflictError:
                if compacted is not None or attempt == 3:
                    raise
                log.info(
                    "%s: another writer published meanwhile; the baseline publishes after it", self.table
                )
        view = self._view or self._read_view()
        self._view = None  # read once per swap
        if not view.database_exists:
            self._create_database()
        previous = view.location
        if view.schema is not None:
            if view.schema == staged.schema.simpleString():
                self.spark.sql(f"ALTER TABLE {self.name} SET LOCATION {_literal(staged.location)}")
            else:
                log.info("the columns of %s changed: the table is created again", self.name)
                self.spark.sql(f"DROP TABLE {self.name}")
                self._create(staged.location)
        else:
            self._create(staged.location)
        self._open_generation(meta)
        self._early_changes = None  # the swap made it the view's
        kept = {_version(staged.location), _version(previous), _version(before.base if before else None)}
        if compacted is not None:  # others' versions may be on their way: only superseded ones go
            self._cleanup = _Cleanup(meta, kept, lineages=None, unpublished=False)
        else:  # a baseline: the table's only writer (compactions yield to it)
            rebaselined = before is not None and before.lineage != meta.lineage
            lineages = {meta.lineage, before.lineage} if rebaselined and before is not None else None
            self._cleanup = _Cleanup(meta, kept, lineages=lineages, unpublished=True)
        return {
            "kind": "lake",
            "table": self.name,
            "view": view_name(self.destination, self.table),
            "location": staged.location,
            "rows": staged.rows,
        }

    def _open_generation(self, meta: LakeTableMeta) -> None:
        """Give the lineage of the published ``meta`` its changes table, then swap the view (what
        readers see)."""
        if self._ready_lineage != meta.lineage:
            self._changes_table(meta.lineage, meta.schema["fields"])
        query = merge_sql(
            base=f"parquet.{quote(meta.base)}",
            changes=changes_table(self.destination, self.table, meta.lineage),
            columns=meta.columns,
            keys=meta.keys,
            after=meta.watermark,
        )
        view = view_name(self.destination, self.table)
        # ALTER VIEW changes the view in place, one metastore call; Spark's CREATE OR REPLACE VIEW
        # drops it and creates it again, and a reader of a shared metastore between the two
        # (measured: spark-sql during a rebaseline) finds no view at all
        verb = "ALTER" if self.spark.catalog.tableExists(view) else "CREATE"
        self.spark.sql(f"{verb} VIEW {view} AS {query}")

    def clean_up(self) -> None:
        """After a swap: remove the base versions and generations no view reads any more (the
        previous ones stay for queries still reading them), and after a rebaseline the older
        lineages' segments. A compaction removes only versions of superseded generations, never a
        folder it did not publish (a baseline's copy on its way); a baseline also what failed or
        killed writers left."""
        if self._cleanup is None:
            return
        plan, self._cleanup = self._cleanup, None
        if plan.lineages is not None:
            self._remove_lineages(keep=plan.lineages)
            # rows a backfill staged for the old lineage: the rebaseline dropped that backfill
            fs, staged = self._filesystem(f"{self.destination.table_dir(self.table)}/backfill")
            fs.delete(staged, True)
        superseded = self._remove_generations(plan.meta, plan.kept)
        if plan.unpublished:
            self._remove_versions(keep=plan.kept)
        else:
            for version in superseded - plan.kept:
                fs, folder = self._filesystem(f"{self.destination.table_dir(self.table)}/base/{version}")
                log.info("removing old base version %s", folder.toString())
                fs.delete(folder, True)

    def _remove_generations(self, meta: LakeTableMeta, kept: set[str | None]) -> set[str | None]:
        """Delete the meta files of generations before the one ``meta`` replaced; the versions
        their bases are in (which ``kept`` may still need)."""
        superseded: set[str | None] = set()
        for number in self.files.generations(self.table):
            if number >= meta.number - 1:
                continue
            old = self.files.generation(self.table, number)
            superseded.add(_version(old.base))
            self.files.remove_generation(self.table, number)
        return superseded - kept

    def _changes_table(self, lineage: str, columns: list[dict[str, Any]]) -> None:
        """The lineage's changes table over its folder, created or given new ``columns``
        (fields of a Spark schema's JSON)."""
        name = changes_table(self.destination, self.table, lineage)
        fields = [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in RECORD_FIELDS]
        schema = StructType.fromJson({"type": "struct", "fields": [*fields, *columns]})
        if not self.spark.catalog.tableExists(name):
            location = changes_dir(self.destination, self.table, lineage)
            self.make_location(location)
            self.spark.catalog.createTable(name, path=location, source="parquet", schema=schema)
        else:
            have = {f.name for f in self.spark.table(name).schema.fields}
            missing = [f for f in schema.fields if f.name not in have]
            if missing:
                added = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in missing)
                self.spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({added})")
        self._ready_lineage = lineage

    def _remove_lineages(self, keep: set[str]) -> None:
        """Drop the changes tables and segments of lineages no view reads any more."""
        kept = {changes_table(self.destination, self.table, lineage).split(".", 1)[1] for lineage in keep}
        prefix = f"{catalog_name(self.table)}__changes_"
        database = self.destination.database
        for row in self.spark.sql(f"SHOW TABLES IN {database} LIKE {_literal(prefix + '*')}").collect():
            if row.tableName not in kept:
                log.info("dropping %s.%s (an older lineage)", database, row.tableName)
                self.spark.sql(f"DROP TABLE IF EXISTS {database}.{quote(row.tableName)}")
        fs, folder = self._filesystem(f"{self.destination.table_dir(self.table)}/changes")
        if fs.exists(folder):
            for status in fs.listStatus(folder):
                if status.getPath().getName() not in keep:
                    fs.delete(status.getPath(), True)

    def _create(self, location: str) -> None:
        self.spark.sql(f"CREATE TABLE {self.name} USING parquet LOCATION {_literal(location)}")

    def _location(self) -> str | None:
        for row in self.spark.sql(f"DESCRIBE TABLE EXTENDED {self.name}").collect():
            if row[0] == "Location":
                return str(row[1])
        return None

    def _remove_versions(self, keep: set[str | None]) -> None:
        fs, base = self._filesystem(f"{self.destination.table_dir(self.table)}/base")
        for status in fs.listStatus(base):
            if status.getPath().getName() not in keep:
                log.info("removing old base version %s", status.getPath().toString())
                fs.delete(status.getPath(), True)


def _version(location: str | None) -> str | None:
    return location.rstrip("/").rsplit("/", 1)[-1] if location else None


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
