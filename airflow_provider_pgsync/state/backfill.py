"""A backfill waiting for apply: rows of a Ready table re-read from a snapshot and staged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_provider_pgsync.errors import StateError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.phases import SyncDone


@dataclass(frozen=True)
class Backfill:
    """Rows of a Ready table re-read from exported snapshot ``snapshot`` (those matching
    ``condition``; empty: all) and staged for apply, which merges them into each destination
    of ``staged`` (destination name -> staged location) once capture has passed
    ``baseline_lsn``; ``applied`` names the destinations that have them.

    ``xmin``, ``xmax`` and ``xip`` are the snapshot's parts, as for ``SyncDone``: a change of a
    transaction the snapshot saw is in the staged rows, one it did not see is newer than them.
    """

    id: str
    condition: str
    snapshot: str
    baseline_lsn: LSN
    xmin: int
    xmax: int
    xip: tuple[int, ...]
    staged: Mapping[str, str]
    rows: int = 0
    applied: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # the same checks as a baseline's snapshot
        SyncDone(self.snapshot, self.baseline_lsn, self.xmin, self.xmax, self.xip)
        if not self.id or not self.staged:
            raise StateError(f"backfill {self.id!r} needs an id and at least one staged destination")
        object.__setattr__(self, "xip", tuple(sorted(set(self.xip))))
        object.__setattr__(self, "staged", dict(self.staged))
        object.__setattr__(self, "applied", tuple(sorted(set(self.applied))))

    @property
    def pending(self) -> tuple[str, ...]:
        """The destinations that do not have the rows yet."""
        return tuple(name for name in self.staged if name not in self.applied)
