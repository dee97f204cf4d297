"""The last reconciliation of a pipeline as the status page shows it, read from the XCom
``result`` of the reconcile DAG's ``reconcile`` task; pure values and a tolerant parser.

The XCom value (``PgReconcileOperator``'s) is::

    {"snapshot_lsn": "0/1A2B3C4", "finished_at": "2026-01-01T00:00:00+00:00",
     "tables": [{"table": "public.t", "destination": "lake", "status": "equal", "source_rows": 10,
                 "left_out": 0, "missing": 0, "extra": 0, "different": 0,
                 "samples": {"missing": [{"id": "5"}], "extra": [], "different": []},
                 "repair": "none", "reason": ""}]}

Everything in it is data from the metadata database: a value of the wrong shape becomes a
note, never an exception, and every text is shown escaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

KINDS = ("missing", "extra", "different")
SAMPLES_SHOWN = 5
"""Sample keys shown per kind; the task log and the XCom hold all the operator kept."""


@dataclass(frozen=True)
class Reconciled:
    """One (table, destination) in the last reconciliation."""

    status: str
    source_rows: int | None = None
    left_out: int | None = None
    missing: int | None = None
    extra: int | None = None
    different: int | None = None
    samples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    repair: str = ""
    reason: str = ""

    @property
    def counts(self) -> str:
        """``3 missing, 1 extra, 0 different`` (the counts given), or ""."""
        found = [(getattr(self, k), k) for k in KINDS]
        return ", ".join(f"{n:,} {k}" for n, k in found if n is not None)


@dataclass(frozen=True)
class ReconcileRun:
    """The latest reconciliation: when its result was pushed, its run, snapshot and finish time,
    and its results by ``(table, destination)``; ``note`` says what could not be read."""

    run_id: str
    pushed_at: datetime | None
    snapshot_lsn: str = ""
    finished_at: datetime | None = None
    results: Mapping[tuple[str, str], Reconciled] = field(default_factory=dict)
    note: str = ""


def parse_result(value: Any, run_id: str, pushed_at: datetime | None) -> ReconcileRun:
    """The run of an XCom value ``result`` (see the module docstring); entries it cannot read are
    counted in ``note`` and left out."""
    if not isinstance(value, Mapping):
        note = f"the result of reconcile run {run_id} is not a mapping ({type(value).__name__}): not shown"
        return ReconcileRun(run_id, pushed_at, note=note)
    results: dict[tuple[str, str], Reconciled] = {}
    unread = 0
    tables = value.get("tables")
    for entry in tables if isinstance(tables, list) else []:
        item = _entry(entry)
        if item is None:
            unread += 1
        else:
            results[item[0]] = item[1]
    note = f"{unread} entr{'y' if unread == 1 else 'ies'} of the result could not be read" if unread else ""
    if not isinstance(tables, list):
        note = "the result lists no tables"
    return ReconcileRun(
        run_id,
        pushed_at,
        snapshot_lsn=_text(value.get("snapshot_lsn")),
        finished_at=_time(value.get("finished_at")),
        results=results,
        note=note,
    )


def _entry(entry: Any) -> tuple[tuple[str, str], Reconciled] | None:
    if not isinstance(entry, Mapping):
        return None
    table, destination, status = entry.get("table"), entry.get("destination"), entry.get("status")
    if not all(isinstance(v, str) and v for v in (table, destination, status)):
        return None
    samples = entry.get("samples")
    shown = {}
    for kind in KINDS:
        keys = samples.get(kind) if isinstance(samples, Mapping) else None
        shown[kind] = tuple(key_text(k) for k in keys[:SAMPLES_SHOWN]) if isinstance(keys, list) else ()
    item = Reconciled(
        status=str(status),
        source_rows=_count(entry.get("source_rows")),
        left_out=_count(entry.get("left_out")),
        missing=_count(entry.get("missing")),
        extra=_count(entry.get("extra")),
        different=_count(entry.get("different")),
        samples=shown,
        repair=_text(entry.get("repair")),
        reason=_text(entry.get("reason")),
    )
    return (str(table), str(destination)), item


def key_text(key: Any) -> str:
    """A sample key as ``id=5, region=EU`` (NULL for a null value); other values as their text."""
    if isinstance(key, Mapping):
        return ", ".join(f"{name}={'NULL' if v is None else v}" for name, v in key.items())
    return str(key)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        found = datetime.fromisoformat(value)
    except ValueError:
        return None
    return found if found.tzinfo is not None else found.replace(tzinfo=UTC)
