"""A durable changelog segment as the state records it."""

from __future__ import annotations

from dataclasses import dataclass

from airflow_provider_pgsync.errors import StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.phases import check_xid, table_key


@dataclass(frozen=True)
class SegmentInfo:
    """A durable changelog segment: one table and schema version, with its LSN and xid ranges.

    ``xid_bits`` is 64 for segments whose xids capture widened to 64 bits, 32 for segments
    written before (pgoutput's xids, compared modulo 2^32).
    """

    path: str
    table: str
    schema_version: int
    first_commit_lsn: LSN
    last_commit_lsn: LSN
    min_xid: int
    max_xid: int
    rows: int
    xid_bits: int = 32

    def __post_init__(self) -> None:
        object.__setattr__(self, "table", table_key(self.table))
        check_xid(self.min_xid, f"segment {self.path} min_xid")
        check_xid(self.max_xid, f"segment {self.path} max_xid")
        if not self.path or self.rows < 0 or self.schema_version < 0:
            raise StateError(f"segment {self.path!r} needs a path, rows >= 0 and schema_version >= 0")
        if self.xid_bits not in (32, 64):
            raise StateError(f"segment {self.path}: xid_bits {self.xid_bits!r} must be 32 or 64")
        if self.first_commit_lsn > self.last_commit_lsn or self.min_xid > self.max_xid:
            raise StateError(
                f"segment {self.path}: ranges are reversed (LSN {self.first_commit_lsn}.."
                f"{self.last_commit_lsn}, xid {self.min_xid}..{self.max_xid})"
            )
