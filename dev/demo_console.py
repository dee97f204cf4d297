"""The demo's console: pgsync's own steps on the terminal, everything else in a log file.

`make demo` runs PostgreSQL clients, Airflow's ``dag.test()`` and Spark jobs in one process
tree, and together they print hundreds of lines where a dozen matter. ``QuietConsole`` points
the process's standard output and error (file descriptors 1 and 2, so child processes such as
spark-submit follow) at a pipe; a thread copies every line into the log file and shows on the
terminal only what ``shown`` picks: the messages of pgsync's own loggers (its operators, hooks
and tasks, and its Spark jobs' progress lines) and every error. The demo's own lines
(``say``) pass through the same pipe, marked, so the terminal shows every line in the order
it was written.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import IO

# Airflow's console lines: "<time> [<level>   ] <message>  [<logger>] key=value ..."
_LINE = re.compile(r"^\S+ \[(?P<level>\w+)\s*\] (?P<message>.*?)\s+\[(?P<logger>[\w.]+)\](?: .*)?$")
# pgsync's messages a demo user needs no more than once a run: in the log file only
_ROUTINE = re.compile(
    r"^(wrote segment |table \S+: schema version |DDL trigger installed|retention: |"
    r"Could not load connection string|Spark connection '|Spark-Submit cmd|"
    r"baseline \S+: .* in DataSync under lineage |pgsync baseline: \S+: reading with |"
    r"\S+: in sync in \S+ from |"
    r"pgsync compaction: (?!.*%))"  # the operator sums a compaction up; its progress is shown
)
_SPARK_SUBMIT_LOGGER = ".hooks.spark_submit."
_ERRORS = ("error", "critical", "exception")
_END = "\0pgsync demo console end\0\n"
# the start of a line of the demo's own (``say``): shown on the terminal as it is
_SAY = "\0pgsync demo says\0"


def shown(line: str) -> str | None:
    """What the terminal shows of one line of output, or None for the log file only."""
    match = _LINE.match(line.rstrip("\n"))
    if match is None:
        return None
    level, message, logger = match.group("level"), match.group("message"), match.group("logger")
    if level in _ERRORS:
        return f"  {level.upper()}: {message}"
    if "airflow_provider_pgsync" not in logger or _ROUTINE.match(message):
        return None
    if _SPARK_SUBMIT_LOGGER in logger and not message.startswith("pgsync "):
        return None  # a Spark job's own output; its pgsync lines (progress) are shown
    if level == "warning":
        return f"  WARNING: {message}"
    return f"  {message}"


class QuietConsole:
    """While entered, standard output and error go to ``log_path``; ``say`` and the lines
    ``shown`` picks reach the terminal."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.lines = 0
        self._terminal: IO[str] | None = None
        self._saved: tuple[int, int] = (-1, -1)
        self._writer = -1
        self._thread: threading.Thread | None = None

    def __enter__(self) -> QuietConsole:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2))
        self._terminal = os.fdopen(os.dup(1), "w", buffering=1)
        reader, self._writer = os.pipe()
        os.dup2(self._writer, 1)
        os.dup2(self._writer, 2)
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        self._thread = threading.Thread(target=self._copy, args=(reader,), name="demo console", daemon=True)
        self._thread.start()
        return self

    def say(self, text: str) -> None:
        """One line of the demo's own on the terminal (and in the log, to read them together).
        It goes through the pipe like every other line, so the terminal shows the lines in the
        order they were written (a child's line still in the pipe comes first)."""
        print(_SAY + text.replace("\n", " "), flush=True)

    def _copy(self, reader: int) -> None:
        with os.fdopen(reader, errors="replace") as source, self.log_path.open("w") as log:
            for line in source:
                if line == _END:
                    return
                said = line.startswith(_SAY)
                line = line.removeprefix(_SAY)
                log.write(line)
                log.flush()
                self.lines += 1
                try:
                    text = line.rstrip("\n") if said else shown(line)
                    if text is not None:
                        assert self._terminal is not None
                        self._terminal.write(text + "\n")
                except (OSError, ValueError) as exc:  # the terminal went away: keep draining
                    log.write(f"demo console: could not show a line: {exc}\n")

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        # a process that outlives the demo (the comparison's Spark JVM) may hold the pipe open,
        # so the copy thread stops at an end mark written after everything of ours, not at EOF
        os.write(self._writer, _END.encode())
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        os.close(self._writer)
        if self._thread is not None:
            self._thread.join()
        for fd in self._saved:
            os.close(fd)
        if self._terminal is not None:
            self._terminal.close()
