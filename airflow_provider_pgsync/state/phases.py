"""Table phases and their legal transitions (DESIGN §3); pure values, no I/O.

::

    Init -> DataSync{lineage} -> SyncDone{lineage, snapshot, baseline_lsn, xmin, xmax, xip,
                                          schema_version} -> Ready
    any phase but Errored -> Errored{reason, solution, retry, previous}
    Errored -> the phase it left (SyncDone or Ready; or on to Ready), when apply resumes after
               the cause is fixed

The phases are those of one table in one destination (``state.destination``). A
**rebaseline** sends it back to Init from Errored, DataSync (a baseline that crashed or
must be redone), SyncDone or Ready; the next baseline then starts afresh under a new
lineage (the id of one baseline attempt). Everything else is illegal, including
DataSync -> DataSync: a second baseline must not start over a running or interrupted one
without an explicit rebaseline.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias, get_args

from airflow_provider_pgsync.errors import PhaseTransitionError, StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef

XID_MAX = 2**64 - 1
Retry: TypeAlias = Literal["none", "manual", "timed"]


def table_key(table: TableRef | str) -> str:
    """The canonical dict key of a table: ``str(TableRef)``; text is parsed like PostgreSQL does."""
    return str(table if isinstance(table, TableRef) else TableRef.parse(table))


def check_xid(value: int, what: str) -> int:
    """Return ``value`` if it is a 64-bit transaction id; StateError naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= XID_MAX:
        raise StateError(f"{what} {value!r} is not a 64-bit transaction id (0..2^64-1)")
    return value


# ---- table phases -------------------------------------------------------------------------


@dataclass(frozen=True)
class Init:
    """The table is published and waits for its baseline.

    ``reason`` is why apply sent it back (a schema change the destination follows only by a
    rebaseline) and ``request`` names that rebaseline request: while both are set the
    rebaseline is pending and the cdc DAG triggers it (under a run id made from ``request``,
    so a retry or a later run does not start a second one) and fails its runs naming it. ""
    for a table that waits for its first baseline, or was sent back for another reason.
    The next baseline (Init -> DataSync) ends the request.
    """

    reason: str = ""
    request: str = ""
    kind: ClassVar[str] = "Init"

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not isinstance(self.request, str):
            raise StateError(f"Init reason and request must be text, not {self.reason!r}, {self.request!r}")

    @property
    def pending(self) -> bool:
        """Whether a rebaseline was requested for the table (apply sent it back, with ``reason``)."""
        return bool(self.reason)


@dataclass(frozen=True)
class DataSync:
    """A baseline of the table is running; ``lineage`` names this baseline attempt."""

    lineage: str = ""
    kind: ClassVar[str] = "DataSync"


@dataclass(frozen=True)
class SyncDone:
    """The baseline is written from exported snapshot ``snapshot``; apply hands off by the visibility rule.

    ``xmin``, ``xmax`` and ``xip`` are the parts of ``pg_current_snapshot()`` (64-bit xids)
    taken with ``baseline_lsn`` in the first statement of the baseline transaction;
    ``lineage`` names the baseline attempt and ``schema_version`` is the table's schema
    version the state knew when the baseline read it (the hand-off starts there).
    """

    snapshot: str
    baseline_lsn: LSN
    xmin: int
    xmax: int
    xip: tuple[int, ...] = ()
    lineage: str = ""
    schema_version: int = 0
    kind: ClassVar[str] = "SyncDone"

    def __post_init__(self) -> None:
        if not isinstance(self.snapshot, str) or not self.snapshot:
            raise StateError(f"SyncDone needs the exported snapshot id, not {self.snapshot!r}")
        if not isinstance(self.baseline_lsn, LSN):
            raise StateError(f"SyncDone baseline_lsn must be an LSN, not {self.baseline_lsn!r}")
        xmin, xmax = check_xid(self.xmin, "snapshot xmin"), check_xid(self.xmax, "snapshot xmax")
        xip = tuple(sorted({check_xid(x, "snapshot xip entry") for x in self.xip}))
        if xmin > xmax or any(not xmin <= x < xmax for x in xip):
            raise StateError(
                f"snapshot {xmin}:{xmax}:{','.join(map(str, xip))} is inconsistent: "
                "PostgreSQL guarantees xmin <= xip < xmax"
            )
        if isinstance(self.schema_version, bool) or not isinstance(self.schema_version, int):
            raise StateError(f"SyncDone schema_version must be an integer, not {self.schema_version!r}")
        if not isinstance(self.lineage, str):
            raise StateError(f"SyncDone lineage must be text, not {self.lineage!r}")
        object.__setattr__(self, "xip", xip)


@dataclass(frozen=True)
class Ready:
    """The table is in sync: every destination applies its changes without the visibility rule."""

    kind: ClassVar[str] = "Ready"


@dataclass(frozen=True)
class Errored:
    """The table stopped; ``solution`` says what a human does, ``previous`` the phase it left."""

    reason: str
    solution: str
    retry: Retry = "manual"
    previous: str = ""
    kind: ClassVar[str] = "Errored"

    def __post_init__(self) -> None:
        if self.retry not in get_args(Retry):
            raise StateError(f"Errored retry must be one of {get_args(Retry)}, not {self.retry!r}")


TablePhase: TypeAlias = Init | DataSync | SyncDone | Ready | Errored
PHASES: dict[str, type[TablePhase]] = {p.kind: p for p in (Init, DataSync, SyncDone, Ready, Errored)}

_NEXT: dict[str, frozenset[str]] = {
    "Init": frozenset({"DataSync", "Errored"}),
    "DataSync": frozenset({"SyncDone", "Errored", "Init"}),
    "SyncDone": frozenset({"Ready", "Errored", "Init"}),
    "Ready": frozenset({"Errored", "Init"}),
    "Errored": frozenset({"Init"}),
}
_RESUMABLE = frozenset({"SyncDone", "Ready"})

# how far a phase is from streaming, the worst first: a table shows its worst destination
_SEVERITY = {"Errored": 0, "Init": 1, "DataSync": 2, "SyncDone": 3, "Ready": 4}


def worst(phases: Iterable[TablePhase]) -> TablePhase | None:
    """The phase furthest from streaming among ``phases`` (None when there are none)."""
    return min(phases, key=lambda p: _SEVERITY[p.kind], default=None)


def resumes(current: TablePhase, new: TablePhase) -> bool:
    """Whether ``current -> new`` is an Errored destination going back to the phase it left
    (SyncDone or Ready), or from a left SyncDone on to Ready (the resumed hand-off finished)."""
    if not isinstance(current, Errored) or current.previous not in _RESUMABLE:
        return False
    return new.kind == current.previous or (current.previous == "SyncDone" and new.kind == "Ready")


def check_transition(
    table: TableRef | str, current: TablePhase | None, new: TablePhase, *, destination: str | None = None
) -> None:
    """Raise PhaseTransitionError unless ``current -> new`` is legal (None: the table is new);
    ``destination`` names the destination the phases are the table's in."""
    name = table_key(table)
    if current is None:
        if new.kind != "Init":
            raise PhaseTransitionError(
                name,
                "(absent)",
                new.kind,
                "the table is not in the pipeline yet: add it in phase Init first",
                destination=destination,
            )
        return
    allowed = _NEXT[current.kind]
    if new.kind in allowed or resumes(current, new):
        return
    if isinstance(current, Errored):
        remedy = (
            f"the table is Errored ({current.reason}); fix the cause ({current.solution}), "
            "then rebaseline it (Errored -> Init)"
        )
    elif current.kind == "DataSync" and new.kind == "DataSync":
        remedy = (
            "a baseline is already running or was interrupted; wait for it to finish, "
            "or rebaseline the table (DataSync -> Init) before starting another"
        )
    elif new.kind in ("SyncDone", "Ready"):
        remedy = "run the baseline of the table first (Init -> DataSync -> SyncDone -> Ready)"
    else:
        remedy = "rebaseline the table (-> Init) to start it over"
    targets = ", ".join(sorted(allowed))
    raise PhaseTransitionError(
        name,
        current.kind,
        new.kind,
        f"{remedy} (from {current.kind} it may go to {targets})",
        destination=destination,
    )
