"""LakeFiles: a lake table's generations and lake segments on the warehouse's filesystem.

Shared by apply (in the Airflow worker) and the Spark jobs' drivers; pyarrow's filesystems
reach a local warehouse and object stores alike (``s3://``, ``gs://``, ``hdfs://``...).
"""

from __future__ import annotations

import uuid

import pyarrow.fs as pafs

from airflow_provider_pgsync.changelog.merge import Key
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_tables import (
    LakeTableMeta,
    changes_dir,
    meta_dir,
    meta_name,
    meta_number,
    segment_key,
)
from airflow_provider_pgsync.errors import DestinationError
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
        folder = self.path(meta_dir(self.lake, table))
        numbers = [n for n in (meta_number(name) for name in self.list(folder)) if n is not None]
        if not numbers:
            return None
        with self.fs.open_input_stream(f"{folder}/{meta_name(max(numbers))}") as stream:
            return LakeTableMeta.from_json(stream.read().decode())

    def write_meta(self, table: TableRef, meta: LakeTableMeta) -> None:
        """Publish the generation ``meta`` (written aside, then renamed into place)."""
        folder = self.path(meta_dir(self.lake, table))
        self.fs.create_dir(folder, recursive=True)
        staging = f"{folder}/_writing-{uuid.uuid4().hex}"
        with self.fs.open_output_stream(staging) as stream:
            stream.write(meta.to_json().encode())
        self.fs.move(staging, f"{folder}/{meta_name(meta.number)}")

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
