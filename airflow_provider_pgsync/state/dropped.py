"""A table dropped in the source: where capture saw it go; pure values, no I/O.

The drop is a fact about the source table, kept on the table's state (``TableState.dropped``)
for all its destinations: their phases stay as they are, since each holds the table exactly as
it was when it was dropped (every change committed before the DROP is captured and applied).
Capture records it (``capture/dropped.py``), the status page and every cdc run's capture log
report it, and the pipeline never takes a table created later under its name for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_pgsync.errors import StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN


@dataclass(frozen=True)
class SourceDrop:
    """Relation ``relation_id`` was dropped in the source: at ``lsn`` (the DDL trigger's message,
    inside the DROP's transaction: ``exact``), or, where that trigger is not active, at or before
    ``lsn`` (the bound of the capture that found it gone from the catalog after reading every
    change up to that bound)."""

    relation_id: int
    lsn: LSN
    exact: bool = True

    def __post_init__(self) -> None:
        oid = self.relation_id
        if isinstance(oid, bool) or not isinstance(oid, int) or oid <= 0:
            raise StateError(f"a dropped table's relation_id {oid!r} is not a positive OID")
        if not isinstance(self.lsn, LSN):
            raise StateError(f"a dropped table's lsn must be an LSN, not {self.lsn!r}")
        if not isinstance(self.exact, bool):
            raise StateError(f"a dropped table's exact flag must be true or false, not {self.exact!r}")

    def describe(self) -> str:
        """``dropped in the source at 0/1A2B3C4 (relation OID 16384)``, or, found by the catalog,
        ``at or before``."""
        at = "at" if self.exact else "at or before"
        return f"dropped in the source {at} {self.lsn} (relation OID {self.relation_id})"

    def to_json(self) -> dict[str, Any]:
        return {"relation_id": self.relation_id, "lsn": str(self.lsn), "exact": self.exact}

    @classmethod
    def from_json(cls, data: Any) -> SourceDrop:
        """Read what ``to_json`` wrote; StateError when malformed."""
        if not isinstance(data, dict) or not isinstance(data.get("lsn"), str):
            raise StateError(f"a dropped table's record must be an object with an 'lsn' text, not {data!r}")
        return cls(data.get("relation_id"), LSN.parse(data["lsn"]), data.get("exact", True))  # type: ignore[arg-type]
