"""Progress of a running Spark job as task-log lines: partitions done / total, rows, rows/s;
and where a job's log lines go."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from pyspark import SparkContext

log = logging.getLogger("pgsync.spark")


def log_to_stderr(prefix: str) -> None:
    """Send the job's log lines to stderr, where spark-submit's caller (the task log) reads them."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prefix}: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


class Progress:
    """Logs every ``interval`` seconds the progress of the jobs of Spark job group ``group``.

    Partition counts come from the status tracker; row counts from ``rows`` when given (e.g. an
    accumulator of finished tasks), else from the driver's own REST API (``/api/v1``) when the
    Spark UI runs, and are left out otherwise.
    """

    def __init__(
        self,
        sc: SparkContext,
        group: str,
        label: str,
        interval: float,
        *,
        rows: Callable[[], int] | None = None,
    ) -> None:
        self._sc, self._group, self._label, self._interval = sc, group, label, interval
        self._count_rows = rows
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pgsync-progress", daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> Progress:
        self._sc.setJobGroup(self._group, self._label)
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 5)
        if exc_type is None:
            self._log_line()

    def _log_line(self) -> None:
        try:
            line = self.line()
        except Exception as exc:  # progress must never fail the job
            log.info("%s: progress unavailable (%s)", self._label, exc)
            return
        if line:
            log.info("%s", line)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._log_line()

    def line(self) -> str | None:
        tracker = self._sc.statusTracker()
        stages = []
        for job_id in tracker.getJobIdsForGroup(self._group):
            job = tracker.getJobInfo(job_id)
            if job is not None:
                stages += [s for s in (tracker.getStageInfo(i) for i in job.stageIds) if s is not None]
        total = sum(s.numTasks for s in stages)
        if not total:
            return None
        done = sum(s.numCompletedTasks for s in stages)
        elapsed = max(time.monotonic() - self._started, 1e-9)
        text = f"{self._label}: {done}/{total} partitions ({100 * done // total}%)"
        try:
            rows = self._count_rows() if self._count_rows else self._rows([s.stageId for s in stages])
        except OSError:  # the UI is busy or gone: partitions only
            rows = None
        if rows is not None:
            text += f", {rows:,} rows, {rows / elapsed:,.0f} rows/s"
        return text

    def _rows(self, stage_ids: list[int]) -> int | None:
        url = self._sc.uiWebUrl
        if not url:
            return None
        rows = 0
        for stage_id in stage_ids:
            with urllib.request.urlopen(
                f"{url}/api/v1/applications/{self._sc.applicationId}/stages/{stage_id}?details=false",
                timeout=5,
            ) as response:
                attempts: list[dict[str, Any]] = json.load(response)
            rows += max(
                (max(a.get("inputRecords", 0), a.get("outputRecords", 0)) for a in attempts), default=0
            )
        return rows
