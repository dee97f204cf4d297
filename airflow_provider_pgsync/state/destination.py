"""One table in one destination: its phase, the baseline it holds and its watermark (DESIGN §3).

Every destination of a table has its own lifecycle: a baseline writes each destination
(``lineage`` names the attempt), apply hands each one off and moves it to Ready, and a
destination that fails or must be rebaselined moves only itself. A move is decided on a
state that may be stale by the time it is saved (a rebaseline may have started since), so
each move names the lineage it was decided for and is refused when that lineage is no
longer the destination's (``StaleDecisionError``): the decision is dropped, never recorded
over a newer baseline. Pure values, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from airflow_provider_pgsync.errors import StaleDecisionError, StateError
from airflow_provider_pgsync.state.phases import (
    DataSync,
    Errored,
    Init,
    Ready,
    SyncDone,
    TablePhase,
    check_transition,
)

__all__ = ["DestinationState", "check_destination_name"]


def check_destination_name(name: str) -> str:
    """Return ``name`` if it can name a destination (non-empty text, at most 200 characters)."""
    if not isinstance(name, str) or not name or len(name) > 200 or "\0" in name:
        raise StateError(f"a destination needs a name of 1-200 characters, not {name!r}")
    return name


@dataclass(frozen=True)
class DestinationState:
    """A table in one destination.

    ``lineage`` is the baseline attempt the destination's data belongs to ("" before the
    first baseline starts); ``baseline`` the hand-off of that attempt (set at SyncDone, kept
    through Ready and Errored so apply can resume); ``watermark`` the destination's watermark
    (``"commit_lsn/seq"``) as apply last saw it, for the status page and retention (the
    destination's own watermark, stored with its data, is what apply goes by).
    """

    phase: TablePhase = field(default_factory=Init)
    lineage: str = ""
    baseline: SyncDone | None = None
    watermark: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.lineage, str):
            raise StateError(f"destination lineage must be text, not {self.lineage!r}")
        if isinstance(self.phase, SyncDone) and self.baseline is None:
            object.__setattr__(self, "baseline", self.phase)

    def moved(
        self, table: str, name: str, phase: TablePhase, *, lineage: str | None = None
    ) -> DestinationState:
        """This destination in ``phase`` (checked). ``lineage``: the lineage the move was decided
        for; StaleDecisionError when the destination has moved to another one since.

        DataSync starts a new lineage (``phase.lineage``, required); Init forgets the baseline;
        SyncDone must belong to the current lineage (also when an Errored one resumes there);
        Errored and Ready keep what the destination holds.
        """
        if lineage is not None and lineage != self.lineage:
            raise StaleDecisionError(
                f"table {table} in destination {name}: a decision made for baseline "
                f"{lineage or '(none)'} was dropped: the destination is now at baseline "
                f"{self.lineage or '(none)'} ({self.phase.kind}); nothing was recorded"
            )
        check_transition(table, self.phase, phase, destination=name)
        if isinstance(phase, Init):
            return DestinationState(phase, watermark=None)
        if isinstance(phase, DataSync):
            if not phase.lineage:
                raise StateError(f"table {table} in destination {name}: a baseline needs a lineage id")
            return DestinationState(phase, lineage=phase.lineage)
        if isinstance(phase, SyncDone):
            if phase.lineage != self.lineage:
                raise StaleDecisionError(
                    f"table {table} in destination {name}: baseline {phase.lineage or '(none)'} finished, "
                    f"but the destination is at baseline {self.lineage or '(none)'} now; nothing was recorded"
                )
            return replace(self, phase=phase, baseline=phase)
        if isinstance(phase, Errored) and not phase.previous:
            phase = replace(phase, previous=self.phase.kind)
        return replace(self, phase=phase)  # Errored, or Ready (from SyncDone, or resumed)

    def applying(self) -> SyncDone | Ready | None:
        """The phase apply works in: SyncDone or Ready; for an Errored destination whose retry is
        not ``none`` and that left SyncDone or Ready, that phase again (a resumed apply starts
        from the destination's own watermark); None: apply has nothing to do here now."""
        phase = self.phase
        if isinstance(phase, SyncDone | Ready):
            return phase
        if isinstance(phase, Errored) and phase.retry != "none":
            if phase.previous == "Ready":
                return Ready()
            if phase.previous == "SyncDone" and self.baseline is not None:
                return self.baseline
        return None

    def with_watermark(self, watermark: str | None) -> DestinationState:
        return replace(self, watermark=watermark)
