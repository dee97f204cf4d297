"""Apply against real servers: the capture fixtures (``replica``, the second database, is in
``tests/conftest.py``)."""

from __future__ import annotations

from tests.capture.conftest import make_pipeline  # noqa: F401 (the fixture, shared)
