"""A real server's changes, peeked through the hook and decoded: the exact message sequence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    PgOutputDecoder,
    Relation,
    Truncate,
    Update,
)
from tests.conftest import Database

BIG = "x" * 12_000  # stored out of line: the column has STORAGE EXTERNAL


@pytest.fixture
def hook(database: Database, source_conn_id: str) -> PgReplicationHook:
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text, big text)")
    database.execute("ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL")
    database.execute("CREATE TABLE other (id int PRIMARY KEY)")
    database.execute("INSERT INTO other VALUES (1)")
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    hook.ensure_publication("pub", ["items", "other"])
    hook.ensure_slot("slot")
    return hook


def test_every_kind_of_change_decodes_exactly(database: Database, hook: PgReplicationHook) -> None:
    started = datetime.now(UTC)
    x_insert = database.transaction(
        "INSERT INTO items VALUES (1, 'a', repeat('x', 12000)), (2, 'b', 'small')"
    )
    x_update = database.transaction("UPDATE items SET name = 'a2' WHERE id = 1")
    x_key = database.transaction("UPDATE items SET id = 10 WHERE id = 2")
    x_delete = database.transaction("DELETE FROM items WHERE id = 10")
    database.transaction("INSERT INTO items VALUES (99, 'rolled back', NULL)", commit=False)
    x_message = database.transaction("SELECT pg_logical_emit_message(true, 'pgsync', 'hello')")
    database.execute("SELECT pg_logical_emit_message(false, 'pgsync-nt', 'now')")
    x_truncate = database.transaction("TRUNCATE items, other")
    ended = datetime.now(UTC)

    flush = hook.wal_positions().flush
    decoder = PgOutputDecoder(protocol_version=2)
    with hook.peek("slot", ["pub"], upto_lsn=flush, upto_nchanges=None) as rows:
        peeked = [(lsn, xid, decoder.decode(data)) for lsn, xid, data in rows]
    messages = [m for _, _, m in peeked]

    kinds = [type(m).__name__ for m in messages]
    assert kinds == [
        "Begin", "Relation", "Insert", "Insert", "Commit",
        "Begin", "Update", "Commit",
        "Begin", "Update", "Commit",
        "Begin", "Delete", "Commit",
        "Begin", "LogicalMessage", "Commit",
        "LogicalMessage",
        # the server sends a Relation again whenever its cache of the table was
        # invalidated (here by the TRUNCATE): consumers must compare, not count
        "Begin", "Relation", "Relation", "Truncate", "Commit",
    ]  # fmt: skip

    relation = messages[1]
    assert isinstance(relation, Relation)
    assert (relation.namespace, relation.relation_name, relation.replica_identity) == ("public", "items", "d")
    assert [(c.name, c.type_oid, c.is_key) for c in relation.columns] == [
        ("id", 23, True),
        ("name", 25, False),
        ("big", 25, False),
    ]
    items_oid = relation.relation_id

    ins1, ins2 = messages[2], messages[3]
    assert isinstance(ins1, Insert) and isinstance(ins2, Insert)
    assert ins1.relation_id == items_oid
    assert (ins1.new_tuple.kinds, ins1.new_tuple.values) == (b"ttt", (b"1", b"a", BIG.encode()))
    assert (ins2.new_tuple.kinds, ins2.new_tuple.values) == (b"ttt", (b"2", b"b", b"small"))

    update = messages[6]
    assert isinstance(update, Update)
    assert update.old_tuple is None and update.key_tuple is None
    # the TOASTed column did not change: it is sent as 'u', without its value
    assert (update.new_tuple.kinds, update.new_tuple.values) == (b"ttu", (b"1", b"a2", None))

    key_update = messages[9]
    assert isinstance(key_update, Update)
    assert key_update.old_tuple is None and key_update.key_tuple is not None
    assert (key_update.key_tuple.kinds, key_update.key_tuple.values) == (b"tnn", (b"2", None, None))
    assert key_update.new_tuple.values == (b"10", b"b", b"small")

    delete = messages[12]
    assert isinstance(delete, Delete)
    assert delete.old_tuple is None and delete.key_tuple is not None
    assert (delete.key_tuple.kinds, delete.key_tuple.values) == (b"tnn", (b"10", None, None))

    message = messages[15]
    assert isinstance(message, LogicalMessage)
    assert (message.transactional, message.prefix, message.content) == (True, "pgsync", b"hello")
    lone = messages[17]
    assert isinstance(lone, LogicalMessage)
    assert (lone.transactional, lone.prefix, lone.content) == (False, "pgsync-nt", b"now")

    again, other_relation, truncate = messages[19], messages[20], messages[21]
    assert again == relation
    assert isinstance(other_relation, Relation) and isinstance(truncate, Truncate)
    assert other_relation.relation_name == "other"
    assert set(truncate.relation_ids) == {items_oid, other_relation.relation_id}
    assert (truncate.cascade, truncate.restart_identity) == (False, False)

    # transactions: xids, LSNs and timestamps agree between wire, peek rows and the server
    begins = [(i, m) for i, m in enumerate(messages) if isinstance(m, Begin)]
    assert [b.xid for _, b in begins] == [x_insert, x_update, x_key, x_delete, x_message, x_truncate]
    previous_end = None
    for start, begin in begins:
        end = next(i for i in range(start, len(messages)) if isinstance(messages[i], Commit))
        commit = messages[end]
        assert isinstance(commit, Commit)
        assert begin.final_lsn == commit.commit_lsn
        assert commit.commit_lsn < commit.end_lsn
        assert peeked[end][0] == commit.end_lsn, "the peek's lsn column of a Commit is its end_lsn"
        assert all(peeked[i][1] == begin.xid for i in range(start, end + 1))
        assert begin.commit_ts == commit.commit_ts
        assert started - timedelta(seconds=1) <= commit.commit_time <= ended + timedelta(seconds=1)
        if previous_end is not None:
            assert commit.end_lsn > previous_end
        previous_end = commit.end_lsn
    assert previous_end is not None and previous_end <= flush
