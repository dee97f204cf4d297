"""Operator tests: the capture fixtures, for baselines handed off to capture and apply."""

from __future__ import annotations

from tests.capture.conftest import make_pipeline  # noqa: F401 (the fixture, shared)
