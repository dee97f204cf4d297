"""Fail points: let tests kill capture and apply at the worst moments to prove nothing is lost.

``PGSYNC_FAIL_POINT`` names one point; when capture reaches it the process dies at
once (``os._exit``), without cleaning up, like a killed worker.

Pause points serve tests that kill a task from outside (SIGKILL under a real scheduler):
with ``PGSYNC_PAUSE_DIR`` set, a task reaching pause point ``<name>`` while the file
``<dir>/<name>`` exists removes it (so the retry passes), writes its pid to
``<dir>/<name>.pid`` and waits there until it is killed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "PGSYNC_FAIL_POINT"
EXIT_CODE = 77
PAUSE_DIR_ENV = "PGSYNC_PAUSE_DIR"
PAUSE_POINTS = ("capture_before_state_write", "apply_before_state_write")
PAUSE_LIMIT_S = 600.0
POINTS = ("after_peek", "after_segment_write", "before_state_write", "after_state_write", "after_advance")


def fail_point(name: str) -> None:
    """Die here if ``PGSYNC_FAIL_POINT`` names this point."""
    assert name in POINTS, name
    if os.environ.get(ENV) == name:
        os._exit(EXIT_CODE)


def pause_point(name: str) -> None:
    """Wait here, until killed, if ``$PGSYNC_PAUSE_DIR/<name>`` exists (armed once by a test)."""
    assert name in PAUSE_POINTS, name
    folder = os.environ.get(PAUSE_DIR_ENV)
    if not folder:
        return
    armed = Path(folder) / name
    try:
        armed.unlink()
    except FileNotFoundError:
        return
    (Path(folder) / f"{name}.pid").write_text(str(os.getpid()))
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while time.monotonic() < deadline:  # the test kills us long before
        time.sleep(0.5)
    os._exit(EXIT_CODE)
