"""The tests' concurrent writer (tests/support/writer.py) against a real server: it counts the
transactions it committed and no rolled-back one, and an error fails its block."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.conftest import Database
from tests.support.writer import concurrent_writer


def test_committed_transactions_are_counted_and_rolled_back_ones_are_not(database: Database) -> None:
    database.execute("CREATE TABLE w (id int PRIMARY KEY)")

    def workload(conn: Any, n: int) -> None:
        conn.execute("INSERT INTO w VALUES (%s)", (n,))
        if n % 2:
            raise psycopg.Rollback()

    with concurrent_writer(database, workload, first=100) as writes:
        writes.wait_for(5)
    found = [int(str(row[0])) for row in database.execute("SELECT id FROM w ORDER BY id")]
    assert found == writes.numbers and len(found) >= 5
    assert all(n % 2 == 0 for n in found)


def test_an_error_stops_the_writer_and_fails_its_block(database: Database) -> None:
    database.execute("CREATE TABLE w (id int PRIMARY KEY)")
    with (
        pytest.raises(AssertionError, match="duplicate key"),
        concurrent_writer(database, lambda conn, _: conn.execute("INSERT INTO w VALUES (1)")) as writes,
    ):
        writes.wait_for(2)
    assert database.execute("SELECT count(*) FROM w") == [(1,)]
