"""Counts the Spark driver JVMs the tests start, with each one's test and seconds (test-only).

Every Spark driver started here (spark-submit of a job, a PySpark session's ``getOrCreate``, a
session script, ``spark-sql``) takes ``SPARK_SUBMIT_OPTS`` from its environment. Before each test
this module adds to it a JVM unified-logging option that makes the driver write a small log into
the test's own folder: its GC settings at start (with the wall-clock time) and its heap at exit
(with the JVM's uptime). So every driver is counted whatever starts it (the test process, an
operator in ``dag.test()``, a script it runs), and its seconds are the JVM's own.

Not counted: executors and standalone daemons (not drivers), drivers of tests that set their
own ``SPARK_SUBMIT_OPTS`` (the class-archive tests), and JVMs killed without exit (counted,
with the time to their log's last line).

At the end of the run the controller writes ``.dev/spark-starts.json`` and prints the total and
the files that start the most drivers, beside ``--durations``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

RUN_VARIABLE = "PGSYNC_TEST_SPARK_STARTS"
"""The folder of this run's driver logs, set by the controller and inherited by its workers."""
_OPTIONS = "SPARK_SUBMIT_OPTS"
_LOG_OPTION = "-Xlog:gc+init=info,gc+heap+exit=info:file={folder}/jvm-%p-%t.log:time,uptime"
_LOG_KEY = _LOG_OPTION.split("=", 1)[0]  # how the counting option begins, whatever its folder
_UNSAFE = re.compile(r"[\s,:='\"]")  # the JVM's -Xlog syntax would split the path there
_LINE = re.compile(r"^\[(?P<time>[^\]]+)\]\[(?P<uptime>[0-9.]+)s\] (?P<text>.*)$")
_base_options: str | None = None


@dataclass(frozen=True)
class DriverStart:
    """One driver JVM: the test that started it, its pid, when, and how long it ran (seconds
    of uptime at exit; ``exited`` false when it was killed and has no exit record)."""

    test: str
    pid: int
    started: str
    seconds: float
    exited: bool


def run_folder(repo: Path) -> Path | None:
    """This run's folder of driver logs (the controller's, for its workers too); None when its
    path cannot be given to the JVM's -Xlog option."""
    named = os.environ.get(RUN_VARIABLE)
    if not named:  # the controller: its own folder, and none left by runs that were killed
        for old in (repo / ".dev" / "spark-starts").glob("run-*"):
            pid = old.name.removeprefix("run-")
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(old, ignore_errors=True)
    folder = Path(named) if named else repo / ".dev" / "spark-starts" / f"run-{os.getpid()}"
    if _UNSAFE.search(str(folder)):
        return None
    os.environ[RUN_VARIABLE] = str(folder)
    return folder


def enter(folder: Path, nodeid: str) -> None:
    """Make the drivers started from now on (until the next test) log into ``nodeid``'s folder."""
    global _base_options
    if _base_options is None:  # after pytest_configure: the tests' own options (tests/spark_cds.py)
        _base_options = os.environ.get(_OPTIONS, "")
    test_folder = _test_folder(folder, nodeid)
    test_folder.mkdir(parents=True, exist_ok=True)  # the JVM does not start without it
    (test_folder / "test.txt").write_text(nodeid)
    os.environ[_OPTIONS] = f"{_base_options} {_LOG_OPTION.format(folder=test_folder)}".strip()


def count_option() -> str:
    """Of ``SPARK_SUBMIT_OPTS``, only the option by which a driver's start is counted (this
    test's log folder), for a test that gives its drivers none of the others."""
    return " ".join(w for w in os.environ.get(_OPTIONS, "").split() if w.startswith(_LOG_KEY))


def base_options() -> str:
    """``SPARK_SUBMIT_OPTS`` without the option that makes a driver log into a test's folder (for
    the resident drivers, ``tests/support/resident_spark.py``, which are counted apart)."""
    if _base_options is not None:
        return _base_options
    return " ".join(w for w in os.environ.get(_OPTIONS, "").split() if not w.startswith(_LOG_KEY))


def resident(jobs: int) -> None:
    """Record a resident driver of this worker and the jobs it ran (``finish`` counts them)."""
    named = os.environ.get(RUN_VARIABLE)
    if named and Path(named).is_dir():
        (Path(named) / f"resident-{os.getpid()}.json").write_text(json.dumps({"jobs": jobs}))


def logs_of(folder: Path, nodeid: str) -> list[Path]:
    """The logs of the drivers test ``nodeid`` started so far (from its setup on)."""
    return sorted(_test_folder(folder, nodeid).glob("jvm-*.log"))


def _test_folder(folder: Path, nodeid: str) -> Path:
    return folder / hashlib.sha1(nodeid.encode()).hexdigest()[:16]


def driver_starts(folder: Path) -> list[DriverStart]:
    """Every driver that logged into ``folder`` (a run's), by start time."""
    starts = []
    for test_folder in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        named = test_folder / "test.txt"
        test = named.read_text() if named.exists() else test_folder.name
        for log in test_folder.glob("jvm-*.log"):
            start = parse_log(test, log)
            if start is not None:
                starts.append(start)
    return sorted(starts, key=lambda s: s.started)


def parse_log(test: str, log: Path) -> DriverStart | None:
    """The ``DriverStart`` a driver's log tells (None: the JVM wrote nothing, it failed to start)."""
    lines = [m for m in map(_LINE.match, log.read_text(errors="replace").splitlines()) if m]
    if not lines:
        return None
    exited = any(m["text"] == "Heap" for m in lines)
    pid = int(log.name.split("-")[1])
    started = datetime.strptime(lines[0]["time"], "%Y-%m-%dT%H:%M:%S.%f%z").isoformat()
    return DriverStart(test, pid, started, float(lines[-1]["uptime"]), exited)


def summary(starts: Iterable[DriverStart], *, top: int = 10) -> list[str]:
    """Lines for the end of the run: the total and the files that started the most drivers."""
    starts = list(starts)
    lines = [f"Spark driver JVMs: {len(starts)} started, {sum(s.seconds for s in starts):,.0f} s in all"]
    by_file: dict[str, list[DriverStart]] = {}
    for s in starts:
        by_file.setdefault(s.test.split("::")[0], []).append(s)
    ranked = sorted(by_file.items(), key=lambda item: -sum(s.seconds for s in item[1]))
    for name, of_file in ranked[:top]:
        lines.append(f"  {len(of_file):4d} starts {sum(s.seconds for s in of_file):8,.0f} s  {name}")
    killed = sum(not s.exited for s in starts)
    if killed:
        lines.append(f"  ({killed} ended without exit: seconds to their last log line)")
    return lines


def finish(folder: Path, out: Path) -> list[str]:
    """Write the run's driver starts to ``out`` (JSON), remove the logs, return the summary."""
    starts = driver_starts(folder)
    residents = [json.loads(p.read_text()) for p in folder.glob("resident-*.json")] if folder.is_dir() else []
    resident_jobs = sum(int(r["jobs"]) for r in residents)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "starts": len(starts),
                "seconds": round(sum(s.seconds for s in starts), 3),
                "resident_drivers": len(residents),
                "resident_jobs": resident_jobs,
                "drivers": [asdict(s) for s in starts],
            },
            indent=1,
        )
    )
    shutil.rmtree(folder, ignore_errors=True)
    lines = summary(starts)
    if residents:
        lines.append(
            f"  and {len(residents)} resident driver(s) (one per worker) that ran {resident_jobs} "
            "job(s) and lake check(s) of the tests"
        )
    return [*lines, f"  (every driver with its test: {out})"]
