"""A backfill of a key list into a PostgreSQL destination, end to end with real servers (no Spark):
the replica loses a row, gets one changed and one added by hand; a backfill of those three keys,
taken while a writer keeps writing (one of the keys too), then apply, leave the replica equal to
the source, whole table. Plus the refusals of bad key lists, before anything is staged.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.state.model import Ready
from tests.capture.conftest import Pipeline
from tests.conftest import Database
from tests.support.backfill import EVENTS, REPLICA, TABLE, backfill_keys, cdc, writer
from tests.support.replica import rows


def test_a_key_backfill_repairs_missing_changed_and_extra_rows_under_writes(
    ready_replica: tuple[Pipeline, Database], database: Database, source_conn_id: str
) -> None:
    pipeline, replica = ready_replica
    # by hand in the destination: a row lost, one changed, one the source never had
    replica.execute("DELETE FROM items WHERE id = 10")
    replica.execute("UPDATE items SET name = 'damaged', n = -1 WHERE id = 20")
    replica.execute("INSERT INTO items (id, name, n) VALUES (1000, 'extra', 0)")
    assert rows(replica, TABLE) != rows(database, TABLE)

    with writer(database, touched=20) as writes:
        # open while the snapshot is taken (in its xip): committed after it, so newer than the staged row
        with psycopg.connect(database.conninfo) as open_tx:
            open_tx.execute("UPDATE items SET name = 'open tx' WHERE id = 20")
            result = backfill_keys(
                pipeline, source_conn_id, [{"id": "10"}, {"id": 20}, {"id": "1000"}, {"id": "010"}], [REPLICA]
            )
            open_tx.commit()
        assert (result["keys"], result["rows"], result["absent"]) == (4, 2, 1)  # '010' is 10 again
        staging = result["staged"]["replica"]
        assert replica.execute(f"SELECT count(*) FROM {staging}") == [(3,)]  # noqa: S608 (its own name)
        pending = pipeline.state().table(TABLE).backfill
        assert pending is not None and pending.pending == ("replica",)
        cdc(pipeline, source_conn_id, [REPLICA])  # the backfill is applied here, the writer still going
        assert pipeline.state().table(TABLE).backfill is None, "the backfill was not applied"
        cdc(pipeline, source_conn_id, [REPLICA])
    assert writes.done > 10, "the writer hardly wrote"
    cdc(pipeline, source_conn_id, [REPLICA])

    assert rows(replica, TABLE) == rows(database, TABLE)
    assert replica.execute("SELECT to_regclass(%s)", (staging,)) == [(None,)], "the staging table was left"
    assert pipeline.state().table(TABLE).phase == Ready()


def test_bad_key_lists_are_refused_before_anything_is_staged(
    ready_replica: tuple[Pipeline, Database], database: Database, source_conn_id: str
) -> None:
    pipeline, replica = ready_replica
    state = pipeline.state()

    def refused(keys: Any, match: str, **kwargs: Any) -> None:
        with pytest.raises(ConfigError, match=match):
            backfill_keys(pipeline, source_conn_id, keys, [REPLICA], **kwargs)

    refused(
        [{"idd": "1"}],
        r"backfill_keys of table public.items, key 0 .*'idd' is not a key column.*key is \(id\)",
    )
    refused(
        [{"id": "1", "name": "x"}],
        r"column 'name' is not a key column of the table; the table's key is \(id\)",
    )
    refused([{}], r"column 'id' is missing; the table's key is \(id\)")
    refused([{"id": None}], r"key column 'id' is NULL")
    refused([{"id": 1.5}], r"the value of 'id' must be text as PostgreSQL writes it .* not float")
    refused([{"id": "1'); DROP TABLE items; --"}], r"invalid input syntax for type integer")
    refused([{"id": "abc"}], r"backfill_keys of table public.items: a value is not text of its column's type")
    refused(
        [{"id": "1"}], r"takes backfill_filter .* or backfill_keys .*, not both", backfill_filter="id > 1"
    )
    refused("id = 1", r"must be a list of keys, each a dict .* not str")
    refused([], r"is empty: name at least one key")
    refused(
        [{"id": str(i)} for i in range(100_001)], r"100,001 keys, more than the 100,000 one backfill takes"
    )
    refused([{"kind": "a"}], r"column 'at' is missing; the table's key is \(kind, at\)", table=EVENTS)

    assert pipeline.state() == state
    assert replica.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE %s", ("backfill%",)) == [(0,)]


def test_a_row_backfill_repairs_a_keyless_table_as_a_multiset_under_writes(
    ready_replica: tuple[Pipeline, Database], database: Database, source_conn_id: str
) -> None:
    pipeline, replica = ready_replica
    database.execute("INSERT INTO events SELECT chr(97 + mod(g, 5)), mod(g, 7) FROM generate_series(1, 60) g")
    database.execute("INSERT INTO events VALUES (NULL, 1), (NULL, 1), ('b', 50), (NULL, 2), (NULL, 2)")
    cdc(pipeline, source_conn_id, [REPLICA])
    assert rows(replica, EVENTS) == rows(database, EVENTS)
    # by hand: one of two equal rows lost, one row changed, one row the source never had
    replica.execute("DELETE FROM events WHERE ctid = (SELECT min(ctid) FROM events WHERE kind IS NULL)")
    replica.execute("UPDATE events SET at = 99 WHERE kind = 'b' AND at = 50")
    replica.execute("INSERT INTO events VALUES ('x', 0)")
    keys = [
        {"kind": None, "at": "1"},
        {"kind": "b", "at": "50"},
        {"kind": "b", "at": 99},
        {"kind": "x", "at": "0"},
        {"kind": None, "at": "2"},  # equal in both, and changed after the snapshot: left to the stream
        {"kind": "x'), (NULL, 0); DROP TABLE events; --\\ \"{}", "at": "0"},  # a row no one has
    ]

    with writer(database, touched=20) as writes:  # writes to items; events get their own below
        result = backfill_keys(pipeline, source_conn_id, keys, [REPLICA], table=EVENTS)
        database.execute("INSERT INTO events VALUES ('a', 1), ('y', 5), (NULL, 2)")
        database.execute("DELETE FROM events WHERE ctid = (SELECT min(ctid) FROM events WHERE kind = 'c')")
        cdc(pipeline, source_conn_id, [REPLICA])
        assert pipeline.state().table(EVENTS).backfill is None, "the backfill was not applied"
    assert writes.done > 0
    cdc(pipeline, source_conn_id, [REPLICA])

    assert (result["keys"], result["rows"], result["absent"]) == (
        6,
        5,
        3,
    )  # NULL, 1 and NULL, 2 twice; b, 50 once
    assert rows(replica, EVENTS) == rows(database, EVENTS)
