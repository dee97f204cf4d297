"""The freshness probe of ``dev/bench freshness``: when each destination has applied a sampled commit.

A sample is one committed transaction of the load writer: the tables it changed, its commit
time, and ``lsn``, the WAL insert position read inside the transaction just before its
COMMIT while no other transaction of the writer could commit (``freshness_load.CommitGate``).
Its commit record is therefore the first commit of a writer transaction at or after ``lsn``.

A table's watermark in a destination is the ``(commit LSN, seq)`` of the last change apply
wrote there, kept by the destination with its data (``Destination.watermark``: the replica's
``pgsync.watermarks`` row, committed in the same transaction as each batch; the lake's
published segment files), and apply writes a table's changes in commit order. So a
destination **has passed** a sample when, for every table the sample changed, the table's
watermark there has a commit LSN ``>= lsn``: the sample's change to that table is there and
visible to readers (it is the first candidate at or after ``lsn``). Tables the sample did not
change are not consulted, so a table without changes never holds a sample back. The probe
reads the watermarks every ``POLL_SECONDS``, so a figure is late by at most that much.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

Marks = Mapping[str, Mapping[str, int | None]]
"""Per destination, per table key: the commit LSN of its watermark (None: none yet)."""

POLL_SECONDS = 0.5


@dataclass(frozen=True)
class Sample:
    """A sampled commit: WAL position just before it, tables it changed, when COMMIT returned
    (``time.monotonic()``)."""

    lsn: int
    tables: frozenset[str]
    committed: float


def passed(sample: Sample, marks: Mapping[str, int | None]) -> bool:
    """Whether every table the sample changed has a watermark at or past its LSN."""
    for table in sample.tables:
        mark = marks.get(table)
        if mark is None or mark < sample.lsn:
            return False
    return True


def percentiles(values: Iterable[float], points: Iterable[int] = (50, 95, 99)) -> dict[int, float]:
    """The given percentiles of ``values`` (inclusive method: p100 is the maximum); {} if empty."""
    data = sorted(values)
    if not data:
        return {}
    if len(data) == 1:
        return dict.fromkeys(points, data[0])
    cuts = statistics.quantiles(data, n=100, method="inclusive")
    return {p: cuts[p - 1] for p in points}


@dataclass
class Tracker:
    """Samples waiting per destination and the freshness of those passed (pure: no I/O, no clock)."""

    destinations: tuple[str, ...]
    waiting: dict[str, list[Sample]] = field(default_factory=dict)
    fresh: dict[str, list[float]] = field(default_factory=dict)
    passed_at: dict[tuple[str, Sample], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.destinations:
            self.waiting.setdefault(name, [])
            self.fresh.setdefault(name, [])

    def add(self, sample: Sample) -> None:
        for name in self.destinations:
            self.waiting[name].append(sample)

    def observe(self, marks: Marks, now: float, *, keep: Callable[[Sample], bool] | None = None) -> None:
        """Record the samples the destinations' watermarks ``marks`` show passed (read at ``now``);
        ``keep``: which to count in the figures (others, e.g. the drain marker, are only marked)."""
        for name in self.destinations:
            still = []
            for sample in self.waiting[name]:
                if passed(sample, marks.get(name, {})):
                    self.passed_at[(name, sample)] = now
                    if keep is None or keep(sample):
                        self.fresh[name].append(now - sample.committed)
                else:
                    still.append(sample)
            self.waiting[name] = still

    def has_passed(self, sample: Sample) -> bool:
        return all((name, sample) in self.passed_at for name in self.destinations)


class Probe(threading.Thread):
    """Reads the destinations' watermarks every ``POLL_SECONDS`` (``read_marks()``) and feeds a Tracker."""

    def __init__(self, read_marks: Callable[[], Marks], destinations: tuple[str, ...]) -> None:
        super().__init__(name="freshness probe", daemon=True)
        self.read_marks = read_marks
        self.tracker = Tracker(destinations)
        self.excluded: set[Sample] = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def add(self, sample: Sample, *, counted: bool = True) -> None:
        with self.lock:
            if not counted:
                self.excluded.add(sample)
            self.tracker.add(sample)

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                marks = self.read_marks()
                now = time.monotonic()
                with self.lock:
                    self.tracker.observe(marks, now, keep=lambda s: s not in self.excluded)
                self.stopping.wait(POLL_SECONDS)  # the poll interval, not a synchronisation
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def wait_passed(self, sample: Sample, timeout: float) -> bool:
        """Whether every destination passed ``sample`` within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.error is not None:
                raise RuntimeError(f"the freshness probe failed: {self.error}") from self.error
            with self.lock:
                if self.tracker.has_passed(sample):
                    return True
            time.sleep(POLL_SECONDS)
        return False

    def stop(self) -> Tracker:
        self.stopping.set()
        self.join(timeout=30)
        if self.error is not None:
            raise RuntimeError(f"the freshness probe failed: {self.error}") from self.error
        return self.tracker
