"""Fail points: let tests kill capture at the worst moments to prove nothing is lost.

``PGSYNC_FAIL_POINT`` names one point; when capture reaches it the process dies at
once (``os._exit``), without cleaning up, like a killed worker.
"""

from __future__ import annotations

import os

ENV = "PGSYNC_FAIL_POINT"
EXIT_CODE = 77
POINTS = ("after_peek", "after_segment_write", "before_state_write", "after_state_write", "after_advance")


def fail_point(name: str) -> None:
    """Die here if ``PGSYNC_FAIL_POINT`` names this point."""
    assert name in POINTS, name
    if os.environ.get(ENV) == name:
        os._exit(EXIT_CODE)
