"""The changelog: durable Parquet segments of changes on any pyarrow filesystem.

Publishing is atomic, so a reader sees a segment whole or not at all:

- local filesystem: the file is written under a temporary name in its final folder
  (``.<name>.<random>.tmp``), fsynced, renamed over the final name (``os.replace``)
  and the folders are fsynced, so the rename itself is durable;
- object stores (S3, GCS, Azure): the whole Parquet file is built in memory and
  uploaded to its final key; an object becomes visible only when its upload completes
  and a cut-off upload can only leave a prefix without the Parquet footer, which no
  reader accepts (segments are bounded by capture's change limit, so the buffer is too);
- any other filesystem (e.g. HDFS): written under a temporary name, then moved.

Paths are deterministic (see ``changelog.paths``), so a capture re-run rewrites the
same segment. A crash can leave a temporary file behind on a local filesystem; readers
never list folders (they take segment paths from state), so it is harmless garbage.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_pgsync.changelog import metadata as meta_
from airflow_provider_pgsync.changelog import private
from airflow_provider_pgsync.changelog.merge import Key, Source, merge_changes
from airflow_provider_pgsync.changelog.paths import first_lsn_of, segment_path
from airflow_provider_pgsync.changelog.prune import segments_to_prune
from airflow_provider_pgsync.changelog.schema import COMMIT_LSN, COMMIT_TS, OP, SEQ, XID, segment_schema
from airflow_provider_pgsync.changelog.xids import widen_xids
from airflow_provider_pgsync.errors import ChangelogError, ChangelogStorageError, ConfigError
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo, SchemaChange, SegmentInfo
from airflow_provider_pgsync.state.phases import table_key

__all__ = ["ROW_GROUP_ROWS", "Changelog", "segments_to_prune"]

ROW_GROUP_ROWS = 128 * 1024
COMPRESSION = "zstd"
READ_ROWS = 65536
"""The most rows read from one segment at a time."""
_OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})


class Changelog:
    """Durable Parquet segments of changes under one root folder of a pyarrow filesystem."""

    def __init__(self, uri: str) -> None:
        if not isinstance(uri, str) or not uri.strip():
            raise ConfigError(f"changelog location {uri!r} is empty; give a folder or a URI such as s3://b/p")
        self.uri = uri
        if "://" in uri:
            try:
                fs, root = pafs.FileSystem.from_uri(uri)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ConfigError(
                    f"changelog location {uri!r} is not a usable filesystem URI ({exc}); "
                    "percent-encode special characters (e.g. %20 for a space) or give a local folder"
                ) from None
        else:
            fs, root = pafs.LocalFileSystem(), os.path.abspath(uri)
        self.filesystem: pafs.FileSystem = fs
        self.root: str = root.rstrip("/") or "/"

    def __repr__(self) -> str:
        return f"Changelog({self.uri!r})"

    # ---- writing

    def write_segment(
        self,
        table: TableRef,
        schema_version: int,
        columns: Sequence[ColumnInfo],
        data: pa.Table,
        *,
        part: int = 0,
        change: SchemaChange | None = None,
    ) -> SegmentInfo:
        """Durably publish the changes in ``data`` (sorted, in ``segment_schema(columns)``) as one
        segment; ``change``: the DDL the schema version started with (its first segments keep it)."""
        if not isinstance(table, TableRef):
            raise ConfigError(f"write_segment needs a TableRef, not {table!r}; use TableRef.parse(text)")
        for what, value in (("schema_version", schema_version), ("part", part)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"segment of table {table}: {what} {value!r} must be an integer >= 0")
        schema = segment_schema(columns, table=table)
        what = f"segment of table {table} (schema version {schema_version}, part {part})"
        data = meta_.conform(data, schema, what)
        meta = meta_.build_metadata(str(table), schema_version, columns, data, part)
        if change is not None and not change.empty:
            meta["change"] = change.flags_json()
        first, last = data.column(COMMIT_LSN)[0].as_py(), data.column(COMMIT_LSN)[-1].as_py()
        path = segment_path(table, schema_version, first, last, part)
        data = data.replace_schema_metadata(meta_.encode(meta))
        try:
            self._publish(path, data)
        except OSError as exc:
            raise ChangelogStorageError(
                f"cannot write changelog segment {path} of table {table} under {self.uri}: {exc}; "
                "check that the location is writable and has space, then run capture again"
            ) from exc
        return meta_.info_of(meta, path)

    def _publish(self, path: str, data: pa.Table) -> None:
        final = self._abs(path)
        folder = final.rsplit("/", 1)[0]
        kind = self.filesystem.type_name
        if kind == "local":
            _publish_local(final, data)
        elif kind in _OBJECT_STORES:
            sink = pa.BufferOutputStream()
            _write_parquet(data, sink)
            body = sink.getvalue()
            stream = self.filesystem.open_output_stream(final)
            stream.write(body)
            stream.close()
        else:
            private.create_dir(self.filesystem, folder)
            temp = _temp_name(final)
            try:
                with private.open_output(self.filesystem, temp) as stream:
                    _write_parquet(data, stream)
                self.filesystem.move(temp, final)
            except BaseException:
                _ignore_missing(self.filesystem.delete_file, temp)
                raise

    # ---- reading

    def read_changes(
        self,
        table: TableRef | str,
        segments: Sequence[SegmentInfo],
        *,
        after: tuple[int, int] | None = None,
        batch_rows: int = 65536,
        batch_bytes: int | None = None,
        xid_reference: int | None = None,
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Yield (schema_version, batch) with the table's changes once each, in (commit LSN, seq) order.

        Only ``segments`` of ``table`` are read; with ``after`` = (commit_lsn, seq) only
        changes strictly after that key. Batches hold at most ``batch_rows`` rows (fewer when
        they would hold more than about ``batch_bytes``). Files are read in pieces of at most
        ``READ_ROWS`` rows, so memory is bounded by the segments overlapping at one point and
        one batch, not by the segments' total size.

        ``_xid`` is 64-bit in segments written by this version. A legacy segment (32-bit
        xids, no ``xid_bits`` in its metadata) has its xids widened to the 64-bit values
        nearest to ``xid_reference`` (64 bits; apply gives its baseline snapshot's xmax, which
        is less than 2^31 from every transaction the hand-off needs); without a reference
        they are yielded as they are stored.
        """
        _check_positive("batch_rows", batch_rows)
        if batch_bytes is not None:
            _check_positive("batch_bytes", batch_bytes)
        if xid_reference is not None and (
            isinstance(xid_reference, bool)
            or not isinstance(xid_reference, int)
            or not 0 <= xid_reference < 2**63
        ):
            raise ConfigError(f"xid_reference {xid_reference!r} must be a 64-bit transaction id (0..2^63-1)")
        key = table_key(table)
        start = None if after is None else _check_after(after)
        chosen: dict[str, SegmentInfo] = {}
        for seg in segments:
            if seg.table == key and (start is None or seg.last_commit_lsn.value >= start[0]):
                chosen.setdefault(seg.path, seg)
        sources = [
            Source(
                seg.path,
                seg.first_commit_lsn.value,
                partial(self._open_segment, seg, start, min(batch_rows, READ_ROWS), xid_reference),
            )
            for seg in chosen.values()
        ]
        return merge_changes(sources, after=start, batch_rows=batch_rows, batch_bytes=batch_bytes)

    def _open_segment(
        self, seg: SegmentInfo, after: Key | None, batch_rows: int, xid_reference: int | None
    ) -> tuple[int, Iterator[pa.RecordBatch]]:
        file = self._open_input(seg.path)
        try:
            parquet = pq.ParquetFile(file)
            meta = meta_.decode(parquet.schema_arrow.metadata, seg.path)
            self._check_matches(seg, meta, parquet)
            groups = _row_groups_after(parquet, after)
            legacy = meta_.xid_bits_of(meta, seg.path) == meta_.LEGACY_XID_BITS
        except pa.ArrowInvalid as exc:
            file.close()
            raise ChangelogError(
                f"changelog segment {seg.path} under {self.uri} is not a readable Parquet file ({exc}): "
                "it is damaged; restore it or rebaseline the table"
            ) from None
        except BaseException:
            file.close()
            raise
        batches = _batches(parquet, file, groups, batch_rows, seg.path)
        if legacy and xid_reference is not None:
            batches = _widened(batches, xid_reference)
        return int(meta["schema_version"]), batches

    def _check_matches(self, seg: SegmentInfo, meta: dict[str, Any], parquet: pq.ParquetFile) -> None:
        info = meta_.info_of(meta, seg.path)
        if (info.table, info.schema_version, info.first_commit_lsn, info.last_commit_lsn) != (
            seg.table,
            seg.schema_version,
            seg.first_commit_lsn,
            seg.last_commit_lsn,
        ):
            raise ChangelogError(
                f"segment {seg.path} holds {info.table} v{info.schema_version} "
                f"{info.first_commit_lsn}..{info.last_commit_lsn}, but state records {seg.table} "
                f"v{seg.schema_version} {seg.first_commit_lsn}..{seg.last_commit_lsn}: the file was replaced "
                "outside pgsync; restore it or rebaseline the table"
            )
        expected = segment_schema(meta_.columns_of(meta, seg.path), table=info.table)
        if not parquet.schema_arrow.remove_metadata().equals(expected):
            raise ChangelogError(
                f"segment {seg.path} does not have the segment schema of its recorded columns; "
                "the file was written by something else: restore it or rebaseline the table"
            )

    # ---- metadata and housekeeping

    def segment_metadata(self, path: str) -> dict[str, Any]:
        """The ``pgsync`` metadata of the segment at ``path`` (relative to the root)."""
        file = self._open_input(path)
        try:
            return meta_.decode(pq.read_schema(file).metadata, path)
        except pa.ArrowInvalid as exc:
            raise ChangelogError(f"{path} under {self.uri} is not a readable Parquet file ({exc})") from None
        finally:
            file.close()

    def segment_info(self, path: str) -> SegmentInfo:
        """The SegmentInfo of the segment at ``path``, read back from its metadata."""
        return meta_.info_of(self.segment_metadata(path), path)

    def delete_segments(self, paths: Iterable[str]) -> None:
        """Delete segments by relative path; already missing ones are fine (re-runs)."""
        for path in paths:
            try:
                _ignore_missing(self.filesystem.delete_file, self._abs(path))
            except OSError as exc:
                raise ChangelogStorageError(
                    f"cannot delete changelog segment {path} under {self.uri}: {exc}"
                ) from exc

    def segment_files(self) -> list[tuple[str, int, datetime]]:
        """Every segment file under the root, listed in a state or not: ``(relative path, first
        commit LSN, modification time in UTC)``."""
        found = []
        for info in self._segment_infos():
            first = first_lsn_of(info.path)
            assert first is not None and info.mtime is not None  # as _segment_infos keeps them
            mtime = info.mtime if info.mtime.tzinfo else info.mtime.replace(tzinfo=UTC)
            found.append((info.path[len(self.root) :].lstrip("/"), first, mtime))
        return found

    def retained_bytes(self) -> int:
        """The bytes every segment file under the root takes (what the changelog retains)."""
        return sum(self.segment_sizes().values())

    def segment_sizes(self) -> dict[str, int]:
        """The size in bytes of every segment file under the root, by relative path (its first
        part is the table's folder, ``paths.table_folder``)."""
        return {info.path[len(self.root) :].lstrip("/"): info.size or 0 for info in self._segment_infos()}

    def _segment_infos(self) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(self.root, recursive=True, allow_not_found=True)
        return [
            info
            for info in self.filesystem.get_file_info(selector)
            if info.type == pafs.FileType.File
            and info.mtime is not None
            and first_lsn_of(info.path) is not None
        ]

    def created_at(self, paths: Iterable[str]) -> dict[str, datetime]:
        """Modification times (UTC) of the segments that exist, by relative path."""
        paths = list(paths)
        infos = self.filesystem.get_file_info([self._abs(p) for p in paths])
        result = {}
        for path, info in zip(paths, infos, strict=True):
            if info.type == pafs.FileType.File and info.mtime is not None:
                mtime = info.mtime
                result[path] = mtime if mtime.tzinfo else mtime.replace(tzinfo=UTC)
        return result

    # ---- helpers

    def _abs(self, path: str) -> str:
        if not path or path.startswith("/") or ".." in path.split("/"):
            raise ChangelogError(
                f"segment path {path!r} must be relative to the changelog root, without '..'"
            )
        return f"{self.root.rstrip('/')}/{path}"

    def _open_input(self, path: str) -> pa.NativeFile:
        try:
            return self.filesystem.open_input_file(self._abs(path))
        except FileNotFoundError:
            raise ChangelogError(
                f"changelog segment {path} is missing under {self.uri}: it was deleted while still needed; "
                "rebaseline the table (or restore the file)"
            ) from None
        except OSError as exc:
            raise ChangelogStorageError(
                f"cannot open changelog segment {path} under {self.uri}: {exc}"
            ) from exc


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} {value!r} must be an integer >= 1")


def _write_parquet(data: pa.Table, sink: Any) -> None:
    # Dictionaries and statistics only where they pay: the change metadata repeats within a
    # transaction, and readers skip row groups by (_commit_lsn, _seq). Row values are left
    # to zstd; this halves the encoding time of a segment (dev/bench capture).
    pq.write_table(
        data,
        sink,
        row_group_size=ROW_GROUP_ROWS,
        compression=COMPRESSION,
        use_dictionary=[OP, COMMIT_LSN, XID, COMMIT_TS],
        write_statistics=[COMMIT_LSN, SEQ, XID],
    )


def _temp_name(final: str) -> str:
    folder, name = final.rsplit("/", 1)
    return f"{folder}/.{name}.{uuid.uuid4().hex}.tmp"


def _publish_local(final: str, data: pa.Table) -> None:
    folder = os.path.dirname(final)
    private.make_dirs(folder)  # rows of every captured change: 0700 folders, 0600 files
    temp = _temp_name(final)
    try:
        with os.fdopen(private.create_file(temp), "wb") as sink:
            _write_parquet(data, sink)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temp, final)
    except BaseException:
        _ignore_missing(os.remove, temp)
        raise
    # the rename and any folders just created must survive a power loss too
    for path in (folder, os.path.dirname(folder), os.path.dirname(os.path.dirname(folder))):
        _fsync_dir(path)


def _check_after(after: tuple[int, int]) -> Key:
    pair = tuple(after) if isinstance(after, tuple | list) else ()
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise ConfigError(f"after={after!r} must be a (commit_lsn, seq) pair of integers")
    if not 0 <= pair[0] < 2**64:
        raise ConfigError(f"after={after!r}: commit_lsn must be in 0..2^64-1")
    return int(pair[0]), int(pair[1])


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ignore_missing(delete: Any, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        delete(path)


def _row_groups_after(parquet: pq.ParquetFile, after: Key | None) -> list[int]:
    """Row groups that may hold changes after ``after`` (by their _commit_lsn statistics)."""
    groups = list(range(parquet.metadata.num_row_groups))
    if after is None:
        return groups
    index = parquet.schema_arrow.get_field_index(COMMIT_LSN)
    kept = []
    for i in groups:
        stats = parquet.metadata.row_group(i).column(index).statistics
        if stats is None or not stats.has_min_max or stats.max >= after[0]:
            kept.append(i)
    return kept


def _widened(batches: Iterator[pa.RecordBatch], reference: int) -> Iterator[pa.RecordBatch]:
    """The batches of a legacy segment with their 32-bit ``_xid`` widened to 64 bits near ``reference``."""
    for batch in batches:
        index = batch.schema.get_field_index(XID)
        low = batch.column(index).to_numpy(zero_copy_only=False)
        yield batch.set_column(
            index, batch.schema.field(index), pa.array(widen_xids(low, reference), pa.int64())
        )


def _batches(
    parquet: pq.ParquetFile, file: pa.NativeFile, groups: list[int], batch_rows: int, path: str
) -> Iterator[pa.RecordBatch]:
    try:
        if groups:
            for batch in parquet.iter_batches(batch_size=batch_rows, row_groups=groups):
                yield batch.replace_schema_metadata(None)
    except OSError as exc:
        raise ChangelogStorageError(f"cannot read changelog segment {path}: {exc}") from exc
    finally:
        file.close()
