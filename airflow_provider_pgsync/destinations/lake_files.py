"""LakeFiles: a lake table's generations and lake segments on the warehouse's filesystem.

Shared by apply (in the Airflow worker) and the Spark jobs' drivers; pyarrow's filesystems
reach a local warehouse and object stores alike (``s3://``, ``gs://``, ``hdfs://``...).

Every publish is a compare-and-set (DESIGN §2 rule 11): a generation is published only as the
successor of the one its writer decided from (``publish_generation``: on a local warehouse the
new meta file is linked into place, which fails if another writer took that number), and a
lake segment only into the lineage that is still current (``publish_segment``). A writer whose
decision went stale gets ``PublishConflictError`` and nothing of it is visible. On an object
store the check and the write are two requests: two writers of one table must not overlap there
(the cdc DAG runs one apply at a time; a compaction yields to a baseline it meets).

Files and folders written here are private on a local warehouse (``changelog/private.py``).
"""

from __future__ import annotations

import os
import uuid

import pyarrow.fs as pafs

from airflow_provider_pgsync.changelog import private
from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_tables import (
    LakeTableMeta,
    changes_dir,
    meta_dir,
    meta_name,
    meta_number,
    segment_key,
    segment_name,
)
from airflow_provider_pgsync.errors import DestinationError, PublishConflictError
from airflow_provider_pgsync.source.names import TableRef


class LakeFiles:
    """The files of the lake destination ``lake``."""

    def __init__(self, lake: LakeDestination) -> None:
        self.lake = lake
        if lake.local_path is not None:
            self.fs: pafs.FileSystem = pafs.LocalFileSystem()
            self._root = lake.local_path
        else:
            self.fs, self._root = pafs.FileSystem.from_uri(lake.warehouse)

    def path(self, location: str) -> str:
        """``location`` (a location under the warehouse) as a path of ``fs``."""
        prefix = self.lake.warehouse.rstrip("/")
        if location.startswith("file:") and not prefix.startswith("file:"):
            location = "/" + location[len("file:") :].lstrip("/")  # Hadoop's spelling of a local path
        if not location.startswith(prefix):
            raise DestinationError(f"{location} is not inside the lake warehouse {self.lake.warehouse}")
        return self._root.rstrip("/") + location[len(prefix) :]

    def location(self, path: str) -> str:
        """A path of ``fs`` as the location Spark reads (the inverse of ``path``)."""
        return self.lake.warehouse.rstrip("/") + path[len(self._root.rstrip("/")) :]

    def current(self, table: TableRef) -> LakeTableMeta | None:
        """The table's current generation (its highest meta file), None before a baseline."""
        numbers = self.generations(table)
        return self.generation(table, numbers[-1]) if numbers else None

    def generations(self, table: TableRef) -> list[int]:
        """The numbers of the table's meta files, in order (the last is current)."""
        folder = self.path(meta_dir(self.lake, table))
        return sorted(n for n in (meta_number(name) for name in self.list(folder)) if n is not None)

    def generation(self, table: TableRef, number: int) -> LakeTableMeta:
        """The table's generation ``number``."""
        path = f"{self.path(meta_dir(self.lake, table))}/{meta_name(number)}"
        with self.fs.open_input_stream(path) as stream:
            return LakeTableMeta.from_json(stream.read().decode())

    def remove_generation(self, table: TableRef, number: int) -> None:
        """Delete the meta file of the table's generation ``number`` (a superseded one)."""
        self.remove(f"{self.path(meta_dir(self.lake, table))}/{meta_name(number)}")

    def publish_generation(self, table: TableRef, meta: LakeTableMeta, decided: LakeTableMeta | None) -> None:
        """Publish ``meta`` as the successor of ``decided``, the generation its writer decided
        from (None: the table had none); PublishConflictError, publishing nothing, when another
        generation was published since (written aside, then linked into place)."""
        after = decided.number if decided is not None else 0
        if meta.number != after + 1:
            raise ValueError(f"generation {meta.number} of lake table {table} cannot follow {after}")
        self._check_current(table, decided, f"generation {meta.number}")
        folder = self.path(meta_dir(self.lake, table))
        private.create_dir(self.fs, folder)
        staging = f"{folder}/_writing-{uuid.uuid4().hex}"
        with private.open_output(self.fs, staging) as stream:
            stream.write(meta.to_json().encode())
        final = f"{folder}/{meta_name(meta.number)}"
        if not isinstance(self.fs, pafs.LocalFileSystem):  # checked above; see the module docstring
            self.fs.move(staging, final)
            return
        try:
            os.link(staging, final)  # fails if another writer published this number meanwhile
        except FileExistsError:
            raise PublishConflictError(
                f"lake table {table}: generation {meta.number} was published by another writer while "
                "this one decided from the generation before; nothing of this one was published"
            ) from None
        finally:
            os.remove(staging)

    def _check_current(self, table: TableRef, decided: LakeTableMeta | None, what: str) -> None:
        current = self.current(table)
        if (current.number if current else 0) != (decided.number if decided else 0):
            now = f"generation {current.number} (lineage {current.lineage})" if current else "no generation"
            was = f"generation {decided.number} (lineage {decided.lineage})" if decided else "none"
            raise PublishConflictError(
                f"lake table {table}: {what} was decided from {was}, but the table is at {now} now "
                "(rebaselined or compacted meanwhile); nothing of it was published"
            )

    def publish_segment(self, table: TableRef, meta: LakeTableMeta, staging: str, upto: Key) -> None:
        """Move the written lake segment ``staging`` into place as the segment at ``upto`` of the
        lineage of ``meta``; PublishConflictError (``staging`` removed) when the table's current
        generation belongs to another lineage now (a rebaseline published meanwhile)."""
        current = self.current(table)
        if current is None or current.lineage != meta.lineage:
            self.remove(staging)
            now = f"lineage {current.lineage}" if current is not None else "no generation at all"
            raise PublishConflictError(
                f"lake table {table}: a batch up to {upto} was written for lineage {meta.lineage}, but the "
                f"table holds {now}; nothing of the batch was published"
            )
        self.fs.move(staging, f"{self.segments_dir(table, meta)}/{segment_name(upto)}")

    def make_dir(self, path: str) -> None:
        """Create the folder ``path`` (private on a local warehouse)."""
        private.create_dir(self.fs, path)

    def new_file(self, path: str) -> str:
        """Create ``path`` empty (private on a local warehouse) for a writer that opens it by name
        (pyarrow's writers keep its mode); returns ``path``."""
        private.open_output(self.fs, path).close()
        return path

    def segments_dir(self, table: TableRef, meta: LakeTableMeta) -> str:
        return self.path(changes_dir(self.lake, table, meta.lineage))

    def segments(self, table: TableRef, meta: LakeTableMeta) -> list[tuple[Key, str]]:
        """The lineage's lake segments, ``(watermark, path)`` in watermark order."""
        folder = self.segments_dir(table, meta)
        found = ((segment_key(name), name) for name in self.list(folder))
        return sorted((key, f"{folder}/{name}") for key, name in found if key is not None)

    def list(self, folder: str) -> list[str]:
        """Names of the files in ``folder`` (none when it does not exist)."""
        infos = self.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        return [i.base_name for i in infos if i.type == pafs.FileType.File]

    def remove(self, path: str) -> None:
        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            self.fs.delete_file(path)
        elif info.type == pafs.FileType.Directory:
            self.fs.delete_dir(path)
