"""Decoding fetched payloads into durable segment parts, in this process or in a worker process.

Fetching rows from the server and decoding them both need the interpreter lock, so
threads do not overlap them. For a large backlog capture therefore hands the joined
payloads of each fetch to a worker process (started while the server still decodes
the peek) that decodes them and writes the segments, while this process fetches the
next rows. A small backlog is decoded in place: starting a process would cost more.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import socket
import struct
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import NoReturn, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_pgsync.capture.columns import IGNORED, ColumnBatcher, TableVersion, columns_of
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.errors import PgSyncError
from airflow_provider_pgsync.failpoints import EXIT_CODE, arm, armed, fail_point
from airflow_provider_pgsync.pgoutput import LogicalMessage, Relation, RelationColumn
from airflow_provider_pgsync.source.ddl import (
    DDL_PREFIX,
    DROP_PREFIX,
    REWRITE_PREFIX,
    TableColumns,
    parse_columns,
    parse_drop,
    parse_rewrite,
)
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.partition_events import (
    PARTITIONS_PREFIX,
    TRUNCATE_PREFIX,
    parse_partition_event,
)
from airflow_provider_pgsync.state.model import (
    ColumnInfo,
    PipelineState,
    SchemaChange,
    SegmentInfo,
    SourceDrop,
    TableState,
)

log = logging.getLogger(__name__)
_IN_FLIGHT = 2
# The worker allocates and frees NumPy arrays of a few MB for every fetch; by default glibc
# hands such blocks back to the kernel each time and faults them in again. Keeping them
# in the heap makes the worker as fast on its first fetches as on later ones.
_MALLOC_TUNING = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(512 * 2**20)}


@dataclass(frozen=True)
class DecodeResult:
    """What the decoding of one peek produced."""

    payloads: int
    changes: int
    transactions: int
    last_end_lsn: int | None
    segments: tuple[SegmentInfo, ...]
    tables: dict[str, TableState] = field(default_factory=dict)
    rows_by_table: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    """Changes of tables the pipeline does not follow, by name: left out (``version_of``)."""


class Decoder(Protocol):
    """Takes the joined payloads of each fetch; ``finish`` makes every part durable."""

    def feed(self, data: bytes, lens: np.ndarray) -> None: ...

    def finish(self) -> DecodeResult: ...

    def close(self) -> None: ...


class DecodeWriter:
    """Decodes payloads with a ColumnBatcher and publishes column batches as segment parts.

    Parts are encoded by one background thread (Parquet encoding releases the
    interpreter lock); at most ``_IN_FLIGHT`` wait for it, which bounds memory.
    ``xid_reference`` (64 bits, read with the peek's bound) widens the xids to 64 bits
    (see ``ColumnBatcher``).
    """

    def __init__(
        self,
        changelog_uri: str,
        state: PipelineState,
        part_bytes: int,
        *,
        xid_reference: int,
        catalog: dict[int, TableColumns] | None = None,
    ) -> None:
        self.changelog = Changelog(changelog_uri)
        self.state = state
        self.part_bytes = part_bytes
        skip_before = state.last_end_lsn.value if state.last_end_lsn else 0
        self.batcher = ColumnBatcher(
            self.version_of, skip_before=skip_before, xid_reference=xid_reference, on_message=self.on_message
        )
        self.catalog = catalog or {}
        self.tables: dict[str, TableState] = {}
        self.keys: dict[int, TableRef] = {}  # relation OID -> the pipeline's name of the table
        self.versions: dict[tuple[str, int], TableVersion] = {}
        self.version_columns: dict[tuple[str, int], tuple[ColumnInfo, ...]] = {}
        self.version_changes: dict[tuple[str, int], SchemaChange] = {}
        self.bootstrapped: set[str] = set()
        self.rewrites: dict[int, int] = {}
        self.pending: dict[tuple[str, int], list[pa.Table]] = {}
        self.pending_bytes = 0
        self.parts: dict[tuple[str, int], int] = {}
        self.writes: list[Future[SegmentInfo]] = []
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgsync-segment-writer")
        self.rows_by_table: dict[str, int] = {}

    def _table(self, key: str) -> TableState | None:
        return self.tables.get(key) or self.state.tables.get(key)

    def version_of(self, relation: Relation) -> int:
        """The schema version of a Relation message: a new one when its columns changed, or
        when DDL since the last one may have changed rows (``TableState.with_relation``);
        ``IGNORED`` for a table the pipeline does not follow.

        Such Relations are no error: with ``publish_via_partition_root`` pgoutput sends a
        partition's Relation beside its root's (the changes carry the root's OID), a table
        taken out of the pipeline's config leaves changes in the slot that were decoded before
        setup took it out of the publication, and a table created under the name of a followed
        table that was dropped (or renamed) is another table. Their changes are left out and
        counted (capture's log says why, ``capture/dropped.py``)."""
        current = self._table_state_for(relation)
        if current is None:
            return IGNORED
        key = current.key
        self.keys[relation.relation_id] = current.table
        catalog = None
        read = self.catalog.get(relation.relation_id)
        known = bool(current.columns) and all(c.attnum for c in current.columns)
        if read is not None and current.ddl is None and not known:
            catalog = read.columns  # only while nothing better is known (a first capture, an older state)
        updated, change = current.with_relation(columns_of(relation), catalog)
        if catalog is not None and updated.columns == catalog:
            self.bootstrapped.add(key)
        self.tables[key] = updated
        version = (key, updated.schema_version)
        self.version_columns[version] = updated.columns
        if updated.schema_version != current.schema_version:
            self.version_changes[version] = change
        return updated.schema_version

    def on_message(self, message: LogicalMessage, xid: int) -> TableVersion | None:
        """Take a message of the source's DDL trigger into the state of its table; a schema version
        it starts there (``ColumnBatcher``: rows changed outside the stream), or None."""
        if message.prefix in (PARTITIONS_PREFIX, TRUNCATE_PREFIX):
            return self._partition_event(message, xid)
        if message.prefix == REWRITE_PREFIX:
            rewrite = parse_rewrite(message.content)
            self.rewrites[rewrite.oid] = self.rewrites.get(rewrite.oid, 0) | rewrite.reason
            return None
        if message.prefix == DROP_PREFIX:
            drop = parse_drop(message.content)
            gone = self._followed(drop.oid, drop.table)
            if gone is not None and gone.relation_id in (None, drop.oid):
                # after every change of the table in the stream: all of them are captured; the OID
                # is kept, so that a table created later under its name is never taken for it
                gone = gone.with_source(drop.oid, gone.source_table)
                self.tables[gone.key] = gone.with_dropped(SourceDrop(drop.oid, message.lsn))
            return None
        if message.prefix != DDL_PREFIX:
            return None
        facts = parse_columns(message.content)
        current = self._followed(facts.oid, facts.table)
        if current is None:
            return None  # a table of another pipeline
        key = current.key
        # a rewrite's message comes first in the same transaction (table_rewrite fires before
        # ddl_command_end); a typed table rewritten by ALTER TYPE gets no such message, but its
        # Relation then shows another type without attnums: unproven, so back to baseline
        change = SchemaChange(facts.columns, self.rewrites.pop(facts.oid, 0), facts.using, xids=(xid,))
        if key in self.bootstrapped:
            # the catalog read when capture started may already hold this DDL: the columns
            # given to Relations before it are not proven
            change = change.with_unproven(f"a DDL on {key} raced with capture's catalog read")
        self.tables[key] = current.with_ddl(change)
        return None

    def _partition_event(self, message: LogicalMessage, xid: int) -> TableVersion | None:
        """A change of a followed partitioned table's partitions (``source/partition_events.py``).
        One that changed rows outside the stream (a partition attached with rows, detached with
        rows, dropped or truncated) starts a new schema version of the table here, with the
        table's columns as the message gives them and a change that says why
        (``SchemaChange.outside``): from there each destination takes the table back through
        baseline (apply). Any other (a new partition, an empty one attached or detached) changes
        nothing: the partitions' later changes stream through the table."""
        event = parse_partition_event(message.prefix, message.content)
        root = event.root
        current = self._followed(root.oid, root.table)
        if current is None:
            return None  # a table of another pipeline
        why = event.rows_outside
        if not why:
            log.info("table %s: %s: its changes stream through the table", current.key, event.describe())
            return None
        log.warning("table %s: %s; it goes back to baseline in every destination", current.key, why)
        if current.relation_id != root.oid or current.source_table != root.table:
            current = current.with_source(root.oid, root.table)
        change = (current.ddl or SchemaChange()).joined(SchemaChange(root.columns, xids=(xid,), outside=why))
        updated = dataclasses.replace(
            current, columns=root.columns, schema_version=current.schema_version + 1, ddl=None
        )
        key = current.key
        self.tables[key] = updated
        self.keys[root.oid] = current.table
        version = (key, updated.schema_version)
        self.version_columns[version] = updated.columns
        self.version_changes[version] = dataclasses.replace(change, columns=None)
        relation = Relation(
            None,
            root.oid,
            root.table.schema,
            root.table.name,
            "d",
            tuple(RelationColumn(int(c.is_key), c.name, c.type_oid, c.type_modifier) for c in root.columns),
        )
        return TableVersion.of(relation, updated.schema_version)

    def _table_state_for(self, relation: Relation) -> TableState | None:
        """The pipeline's table a Relation message describes, with its relation OID and source name
        recorded: the table followed by that OID (renamed in the source or not), else the table of
        that name (in a state that has no OID for it yet); None for a table it does not follow,
        also one under the name of a followed table that has another OID (that one was dropped or
        renamed: ``_followed``)."""
        name = TableRef(relation.namespace, relation.relation_name)
        current = self._followed(relation.relation_id, name)
        if current is None:
            return None
        if current.relation_id != relation.relation_id or current.source_table != name:
            if current.source_table != name:
                log.warning("table %s is named %s in the source now (renamed there)", current.key, name)
            current = current.with_source(relation.relation_id, name)
        return current

    def _followed(self, oid: int, name: TableRef) -> TableState | None:
        """The pipeline's table of relation ``oid`` (else of ``name``, when it has no OID yet)."""
        known = [*self.tables.values(), *self.state.tables.values()]
        found = next((ts for ts in known if ts.relation_id == oid), None)
        if found is None:
            named = self._table(str(name))
            found = named if named is not None and named.relation_id is None else None
        return None if found is None else self.tables.get(found.key, found)

    def feed(self, data: bytes, lens: np.ndarray) -> None:
        for table_version, table in self.batcher.feed_joined(data, lens):
            self._add(table_version, table)

    def finish(self) -> DecodeResult:
        """Write every pending part, wait until all are durable, and say what was done."""
        try:
            for key in list(self.pending):
                self._flush(key)
            segments = tuple(w.result() for w in self.writes)
        finally:
            self.close()
        changed = {k: ts for k, ts in self.tables.items() if ts != self.state.table(k)}
        return DecodeResult(
            payloads=self.batcher.payloads,
            changes=self.batcher.changes,
            transactions=self.batcher.transactions,
            last_end_lsn=self.batcher.last_end_lsn,
            segments=segments,
            tables=changed,
            rows_by_table=dict(self.rows_by_table),
            skipped=dict(self.batcher.skipped),
        )

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)

    def _add(self, table_version: TableVersion, data: pa.Table) -> None:
        key = (str(self._table_of(table_version)), table_version.version)
        self.versions[key] = table_version
        self.pending.setdefault(key, []).append(data)
        self.pending_bytes += data.nbytes
        self.rows_by_table[key[0]] = self.rows_by_table.get(key[0], 0) + data.num_rows
        while self.pending_bytes >= self.part_bytes:
            largest = max(self.pending, key=lambda k: sum(t.nbytes for t in self.pending[k]))
            self._flush(largest)

    def _table_of(self, tv: TableVersion) -> TableRef:
        """The pipeline's name of the table (its name in the source may be another)."""
        return self.keys[tv.relation.relation_id]

    def _flush(self, key: tuple[str, int]) -> None:
        tables = self.pending.pop(key)
        self.pending_bytes -= sum(t.nbytes for t in tables)
        part = self.parts.get(key, 0)
        self.parts[key] = part + 1
        busy = [w for w in self.writes if not w.done()]
        if len(busy) >= _IN_FLIGHT:
            busy[0].result()
        self.writes.append(self.executor.submit(self._write, key, part, pa.concat_tables(tables)))

    def _write(self, key: tuple[str, int], part: int, data: pa.Table) -> SegmentInfo:
        tv = self.versions[key]
        columns = self.version_columns.get(key) or columns_of(tv.relation)
        change = self.version_changes.get(key)
        table = self._table_of(tv)
        segment = self.changelog.write_segment(table, tv.version, columns, data, part=part, change=change)
        fail_point("after_segment_write")
        return segment


class ProcessDecodeWriter:
    """A DecodeWriter in a worker process, fed through a socket pair.

    The worker is a fresh interpreter running this module (not a multiprocessing child,
    which would import the caller's main module again). A sender thread here and a
    receiver thread there keep a fetch or two in flight, so fetching, sending and
    decoding overlap; ``feed`` blocks only while that many wait.
    """

    def __init__(
        self,
        changelog_uri: str,
        state: PipelineState,
        part_bytes: int,
        *,
        xid_reference: int,
        catalog: dict[int, TableColumns] | None = None,
    ) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                env={**os.environ, **_MALLOC_TUNING},
            )
        self.conn = Connection(ours.detach())
        self.conn.send((changelog_uri, state.to_json(), part_bytes, xid_reference, catalog, armed()))
        self.outbox: queue.Queue[tuple[bytes, bytes] | None] = queue.Queue(maxsize=_IN_FLIGHT)
        self.send_error: BaseException | None = None
        self.sender = threading.Thread(target=self._send, name="pgsync-capture-sender", daemon=True)
        self.sender.start()

    def feed(self, data: bytes, lens: np.ndarray) -> None:
        if self.send_error is not None:
            self._worker_died()
        self.outbox.put((data, lens.astype(np.int64).tobytes()))

    def finish(self) -> DecodeResult:
        self.outbox.put(None)
        self.sender.join()
        if self.send_error is not None:
            self._worker_died()
        try:
            outcome, value = self.conn.recv()
        except (EOFError, ConnectionResetError):
            self._worker_died()
        if outcome == "error":
            raise value
        assert isinstance(value, DecodeResult)
        return value

    def close(self) -> None:
        if self.sender.is_alive():
            self.conn.close()  # unblocks the sender
            self.sender.join(timeout=60)
        self.conn.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:  # pragma: no cover - only when the worker hangs
            self.process.kill()
            self.process.wait()

    def _send(self) -> None:
        try:
            while (item := self.outbox.get()) is not None:
                self.conn.send_bytes(item[0])
                self.conn.send_bytes(item[1])
            self.conn.send_bytes(b"")
        except BaseException as exc:
            self.send_error = exc
            while self.outbox.get() is not None:  # let feed and finish return
                pass

    def _worker_died(self) -> NoReturn:
        code = self.process.wait(timeout=60)
        if code == EXIT_CODE:
            os._exit(EXIT_CODE)  # a fail point killed the worker: the capture dies with it
        raise PgSyncError(
            f"capture's decoding worker died (exit code {code}); nothing was advanced: run capture "
            "again, and check the worker's memory limits if it keeps failing"
        )


def _worker_main(fd: int) -> None:
    """The worker process: decode what arrives until an empty buffer, then send the result."""
    conn = Connection(fd)
    writer: DecodeWriter | None = None
    inbox: queue.Queue[tuple[bytes, np.ndarray] | BaseException | None] = queue.Queue(maxsize=_IN_FLIGHT)

    def receive() -> None:
        try:
            while data := conn.recv_bytes():
                inbox.put((data, np.frombuffer(conn.recv_bytes(), dtype=np.int64)))
            inbox.put(None)
        except BaseException as exc:  # the capture process went away
            inbox.put(exc)

    try:
        _warm_up()  # while the server still decodes the peek
        changelog_uri, state_json, part_bytes, xid_reference, catalog, fail_at = conn.recv()
        arm(fail_at)  # a test armed it in its capture; None in production
        state = PipelineState.from_json(state_json)
        writer = DecodeWriter(changelog_uri, state, part_bytes, xid_reference=xid_reference, catalog=catalog)
        threading.Thread(target=receive, name="pgsync-capture-receiver", daemon=True).start()
        while (item := inbox.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            writer.feed(*item)
        conn.send(("ok", writer.finish()))
    except Exception as exc:
        if writer is not None:
            writer.close()
        try:
            conn.send(("error", exc))
        except Exception:  # an error that does not pickle, or no one listening: send its text
            with contextlib.suppress(Exception):
                conn.send(("error", PgSyncError(f"{type(exc).__name__}: {exc}")))
    finally:
        conn.close()


def _warm_up(rows: int = 20_000) -> None:
    """Decode and encode a small synthetic batch, so the first real fetch does not pay for
    first-use set-up in NumPy, Arrow and Parquet (the worker would otherwise sit idle)."""
    relation = b"R" + struct.pack("!I", 1) + b"public\0warm\0d" + struct.pack("!h", 2)
    relation += b"\x01id\0" + struct.pack("!Ii", 20, -1) + b"\0v\0" + struct.pack("!Ii", 25, -1)
    begin = b"B" + struct.pack("!QqI", 2, 0, 1)
    commit = b"C" + struct.pack("!BQQq", 0, 2, 3, 0)
    inserts = [
        b"I"
        + struct.pack("!I", 1)
        + b"N"
        + struct.pack("!h", 2)
        + b"t"
        + struct.pack("!i", len(k))
        + k
        + b"t"
        + struct.pack("!i", 5)
        + b"value"
        for k in (str(i).encode() for i in range(rows))
    ]
    batcher = ColumnBatcher(lambda relation: 0, xid_reference=2)
    for _, table in batcher.feed([begin, relation, *inserts, commit]):
        pq.write_table(table, pa.BufferOutputStream(), compression="zstd")


if __name__ == "__main__":
    # run the copy imported under the real module name, so results pickle by that name
    from airflow_provider_pgsync.capture import worker

    worker._worker_main(int(sys.argv[1]))
    # the result is sent and every segment is durable; capture waits for this process to end
    # before it returns, and the interpreter's clean-up with NumPy and Arrow loaded takes a
    # noticeable part of a second: skip it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
