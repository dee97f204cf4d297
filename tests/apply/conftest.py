"""Apply against real servers: the capture fixtures, and a second database as the replica."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from pgcluster import Cluster
from tests.capture.conftest import make_pipeline  # noqa: F401 (the fixture, shared)
from tests.conftest import Database


@pytest.fixture
def replica(pg_cluster: Cluster) -> Iterator[Database]:
    """A second new database in the test cluster, for the PostgreSQL destination."""
    name = f"r_{uuid.uuid4().hex[:12]}"
    pg_cluster.create_database(name)
    try:
        yield Database(pg_cluster, name)
    finally:
        pg_cluster.drop_database(name)
