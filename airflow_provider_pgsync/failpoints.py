"""Fail and pause points: tests kill capture and apply at the worst moments to prove nothing is lost.

They are inert unless code in the same process arms them: no setting, file or environment
variable can make a task exit or wait here. A test arms them in its own process, or in a child
process through code of its own (a test's script, or the test deployment's ``sitecustomize``).

- Fail points: ``arm(name)`` makes the process die at that point at once (``os._exit``, without
  cleaning up, like a killed worker). Capture's decoding worker process inherits the armed point
  from its capture (``armed()``), so a point inside the worker kills both.
- Pause points serve tests that kill a task from outside (SIGKILL under a real scheduler):
  after ``pause_in(folder)``, a task reaching pause point ``<name>`` while the file
  ``<folder>/<name>`` exists removes it (so the retry passes), writes its pid to
  ``<folder>/<name>.pid`` and waits there until it is killed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

EXIT_CODE = 77
PAUSE_POINTS = ("capture_before_state_write", "apply_before_state_write")
PAUSE_LIMIT_S = 600.0
POINTS = ("after_peek", "after_segment_write", "before_state_write", "after_state_write", "after_advance")

_armed: str | None = None
_pause_folder: Path | None = None


def arm(name: str | None) -> None:
    """Die at fail point ``name`` from now on in this process (None: at none)."""
    global _armed
    if name is not None and name not in POINTS:
        raise ValueError(f"no fail point {name!r}: choose one of {', '.join(POINTS)}")
    _armed = name


def armed() -> str | None:
    """The fail point armed in this process, if any."""
    return _armed


def pause_in(folder: str | os.PathLike[str] | None) -> None:
    """Let the files in ``folder`` arm pause points in this process (None: no pause points)."""
    global _pause_folder
    _pause_folder = None if folder is None else Path(folder)


def fail_point(name: str) -> None:
    """Die here if this process armed this point."""
    assert name in POINTS, name
    if _armed == name:
        os._exit(EXIT_CODE)


def pause_point(name: str) -> None:
    """Wait here, until killed, if pause points are on here and ``<folder>/<name>`` exists."""
    assert name in PAUSE_POINTS, name
    if _pause_folder is None:
        return
    armed_file = _pause_folder / name
    try:
        armed_file.unlink()
    except FileNotFoundError:
        return
    (_pause_folder / f"{name}.pid").write_text(str(os.getpid()))
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while time.monotonic() < deadline:  # the test kills us long before
        time.sleep(0.5)
    os._exit(EXIT_CODE)
