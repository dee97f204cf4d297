"""Fixtures for state store tests: a real Airflow metadata database and both store backends.

``tests/conftest.py`` points ``AIRFLOW_HOME`` at a fresh folder under ``.dev/`` before
Airflow is imported, so the metadata database is a new SQLite file there. Outside a
task ``VariableStateStore`` reads and writes Variables straight in that database
(``airflow.models.Variable``), so its tables must exist: ``initdb()`` creates them
from the ORM models once per session (about two seconds).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.variable_state_store import VariableStateStore
from airflow_provider_pgsync.state.store import StateStore
from tests.conftest import Database

Connect = Callable[[], "psycopg.Connection[Any]"]


@pytest.fixture
def connect(database: Database) -> Connect:
    """A connection factory for this test's database (the control database of the stores)."""
    return lambda: psycopg.connect(database.conninfo)


@pytest.fixture
def pipeline() -> str:
    """A pipeline name of this test's own (Variables outlive a test's database)."""
    return f"pipe_{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["postgres", "variables"])
def store(request: pytest.FixtureRequest, connect: Connect) -> StateStore:
    """Each backend in turn, with this test's database as control/lock database."""
    if request.param == "postgres":
        return PostgresStateStore(connect)
    request.getfixturevalue("airflow_db")
    return VariableStateStore(lock=connect)
