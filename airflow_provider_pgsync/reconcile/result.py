"""What a reconciliation found, per (table, destination) and for the run; pure logic.

``ReconcileResult.to_json()`` is the XCom value ``result`` of ``PgReconcileOperator`` and what
the status page shows::

    {"snapshot_lsn": "0/1A2B3C4", "finished_at": "2026-01-01T00:00:00+00:00",
     "tables": [{"table": "public.t", "destination": "lake", "status": "equal", "source_rows": 10,
                 "left_out": 0, "missing": 0, "extra": 0, "different": 0,
                 "samples": {"missing": [], "extra": [], "different": []},
                 "repair": "none", "reason": ""}]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_pgsync.reconcile.canonical import parse_row_text
from airflow_provider_pgsync.reconcile.compare import Differences

STATUSES = ("equal", "different", "error")
KINDS = ("missing", "extra", "different")

KeyDict = dict[str, str | None]


def key_dict(names: Sequence[str], key_text: str) -> KeyDict:
    """A key text as ``{column: value text}`` (a whole row for a table without a key)."""
    values = parse_row_text(key_text)
    return dict(zip(names, values, strict=True))


@dataclass(frozen=True)
class TableResult:
    """One (table, destination): ``status`` equal, different or error (``reason`` says why);
    ``keys`` every differing key (missing, extra, different; not in the JSON), ``samples``
    the first few of each kind."""

    table: str
    destination: str
    status: str
    source_rows: int = 0
    left_out: int = 0
    missing: int = 0
    extra: int = 0
    different: int = 0
    samples: Mapping[str, tuple[KeyDict, ...]] = field(default_factory=dict)
    keys: tuple[KeyDict, ...] = ()
    repair: str = "none"
    reason: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")

    @classmethod
    def from_differences(
        cls,
        table: str,
        destination: str,
        found: Differences,
        key_names: Sequence[str],
        *,
        left_out: int,
        sample_size: int,
        key_text_for: Mapping[str, KeyDict] | None = None,
    ) -> TableResult:
        """The result of a comparison; ``key_text_for`` gives a key's values as the source's
        text where the comparison's key text is another engine's (the lake)."""

        def as_dict(text: str) -> KeyDict:
            if key_text_for is not None and text in key_text_for:
                return dict(key_text_for[text])
            return key_dict(key_names, text)

        samples = {
            kind: tuple(as_dict(k) for k in _unique(getattr(found, kind))[:sample_size])
            for kind in KINDS
        }
        every = _unique([*found.missing, *found.extra, *found.different])
        return cls(
            table=table,
            destination=destination,
            status="equal" if found.equal else "different",
            source_rows=found.source_rows,
            left_out=left_out,
            missing=len(found.missing),
            extra=len(found.extra),
            different=len(found.different),
            samples=samples,
            keys=tuple(as_dict(k) for k in every),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "destination": self.destination,
            "status": self.status,
            "source_rows": self.source_rows,
            "left_out": self.left_out,
            "missing": self.missing,
            "extra": self.extra,
            "different": self.different,
            "samples": {kind: [dict(k) for k in self.samples.get(kind, ())] for kind in KINDS},
            "repair": self.repair,
            "reason": self.reason,
        }

    def summary(self) -> str:
        """One line for the task log."""
        head = f"{self.table} in {self.destination}: {self.status}"
        if self.status == "error":
            return f"{head}: {self.reason}"
        counts = (
            f"{self.source_rows:,} source rows, {self.left_out:,} keys left out (changed after the "
            f"snapshot), {self.missing:,} missing, {self.extra:,} extra, {self.different:,} different"
        )
        shown = "; ".join(f"{k}: {list(v)}" for k, v in self.samples.items() if v)
        tail = f"; {self.reason}" if self.reason else ""
        return f"{head} ({counts}){'; samples ' + shown if shown else ''}{tail}"


def _unique(keys: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(keys))


@dataclass(frozen=True)
class ReconcileResult:
    """A whole run: the source snapshot's LSN, when it finished, each (table, destination)."""

    snapshot_lsn: str
    finished_at: str
    tables: tuple[TableResult, ...] = ()

    @property
    def failed(self) -> tuple[TableResult, ...]:
        return tuple(t for t in self.tables if t.status != "equal")

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot_lsn": self.snapshot_lsn,
            "finished_at": self.finished_at,
            "tables": [t.to_json() for t in self.tables],
        }
