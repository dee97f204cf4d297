"""PgReplicationHook's publication, slot, peek and advance against a real server."""

from __future__ import annotations

import re
import struct
from typing import Any

import psycopg
import pytest

from airflow_provider_pgsync.errors import ConfigError, SlotError
from airflow_provider_pgsync.hooks.replication import PgReplicationHook, SlotCreation, SlotInfo
from airflow_provider_pgsync.pgoutput.lsn import LSN
from tests.conftest import Database


@pytest.fixture
def hook(source_conn_id: str) -> PgReplicationHook:
    return PgReplicationHook(postgres_conn_id=source_conn_id)


@pytest.fixture
def slot(database: Database) -> str:
    """A slot name of this test's own (slots are cluster-wide, databases are not)."""
    return f"s_{database.name}"


# ---- a minimal reading of pgoutput payloads (independent of the package's decoder) ----------------


def _tag_and_detail(data: bytes) -> tuple[str, Any]:
    """``('I', (text values...))`` for an Insert, ``('C', end_lsn)`` for a Commit, else ``(tag, None)``."""
    tag = chr(data[0])
    if tag == "C":
        _flags, _commit_lsn, end_lsn, _ts = struct.unpack_from("!BQQq", data, 1)
        return tag, LSN(end_lsn)
    if tag == "I":
        _relid, new, ncols = struct.unpack_from("!IcH", data, 1)
        assert new == b"N"
        pos = 8
        values: list[str | None] = []
        for _ in range(ncols):
            kind = chr(data[pos])
            pos += 1
            if kind == "t":
                (size,) = struct.unpack_from("!i", data, pos)
                values.append(data[pos + 4 : pos + 4 + size].decode())
                pos += 4 + size
            else:
                values.append(None)
        assert pos == len(data)
        return tag, tuple(values)
    return tag, None


def _peek(hook: PgReplicationHook, slot: str, **bounds: Any) -> list[tuple[LSN, int, str, Any]]:
    bounds.setdefault("upto_lsn", None)
    bounds.setdefault("upto_nchanges", None)
    with hook.peek(slot, ["pub"], **bounds) as rows:
        return [(lsn, xid, *_tag_and_detail(data)) for lsn, xid, data in rows]


def _inserted(peeked: list[tuple[LSN, int, str, Any]]) -> list[Any]:
    return [detail for _, _, tag, detail in peeked if tag == "I"]


def _commits(peeked: list[tuple[LSN, int, str, Any]]) -> list[LSN]:
    """The end LSN of each Commit, checked against the LSN the server reports for its row."""
    ends = [(lsn, detail) for lsn, _, tag, detail in peeked if tag == "C"]
    assert all(lsn == end for lsn, end in ends)
    return [end for _, end in ends]


def _transaction(database: Database, *statements: str) -> None:
    with database.connect(autocommit=False) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.commit()


# ---- publication -----------------------------------------------------------------------------------


def _published(database: Database) -> list[tuple[object, ...]]:
    return database.execute(
        "SELECT schemaname::text, tablename::text, attnames::text[], rowfilter"
        " FROM pg_publication_tables WHERE pubname = 'pub' ORDER BY 1, 2"
    )


def _publication_rel(database: Database) -> list[tuple[object, ...]]:
    return database.execute(
        "SELECT pr.prrelid::regclass::text, pr.prattrs::text, pg_get_expr(pr.prqual, pr.prrelid)"
        " FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid"
        " WHERE p.pubname = 'pub' ORDER BY 1"
    )


def _publish_flags(database: Database) -> list[tuple[object, ...]]:
    return database.execute(
        "SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication"
        " WHERE pubname = 'pub'"
    )


@pytest.fixture
def tables(database: Database) -> None:
    database.execute("CREATE TABLE orders (id int PRIMARY KEY, region text, total int)")
    database.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
    database.execute('CREATE TABLE "Odd ""T""" (id int PRIMARY KEY)')


@pytest.mark.usefixtures("tables")
def test_ensure_publication_creates_then_alters_to_match(database: Database, hook: PgReplicationHook) -> None:
    assert hook.ensure_publication("pub", ["orders"]) == "created"
    assert _published(database) == [("public", "orders", ["id", "region", "total"], None)]
    assert _publish_flags(database) == [(False, True, True, True, True)]
    assert hook.ensure_publication("pub", ["public.orders"]) == "unchanged"

    assert hook.ensure_publication("pub", ["orders", "items", '"Odd ""T"""']) == "altered"
    assert _published(database) == [
        ("public", 'Odd "T"', ["id"], None),
        ("public", "items", ["id", "name"], None),
        ("public", "orders", ["id", "region", "total"], None),
    ]
    assert hook.ensure_publication("pub", ['"Odd ""T"""', "items", "orders"]) == "unchanged"

    with_columns = [{"table": "orders", "columns": ["total", "id"]}, "items"]
    assert hook.ensure_publication("pub", with_columns) == "altered"
    assert _published(database) == [
        ("public", "items", ["id", "name"], None),
        ("public", "orders", ["id", "total"], None),
    ]
    assert _publication_rel(database) == [("items", None, None), ("orders", "1 3", None)]
    assert hook.ensure_publication("pub", with_columns) == "unchanged"

    with_filter = [{"table": "orders", "columns": ["id", "total"], "row_filter": "total > 10"}, "items"]
    assert hook.ensure_publication("pub", with_filter) == "altered"
    assert _published(database) == [
        ("public", "items", ["id", "name"], None),
        ("public", "orders", ["id", "total"], "(total > 10)"),
    ]
    assert _publication_rel(database) == [("items", None, None), ("orders", "1 3", "(total > 10)")]
    assert hook.ensure_publication("pub", with_filter) == "unchanged"

    other_filter = [{"table": "orders", "columns": ["id", "total"], "row_filter": "(total > 20)"}, "items"]
    assert hook.ensure_publication("pub", other_filter) == "altered"
    assert _publication_rel(database) == [("items", None, None), ("orders", "1 3", "(total > 20)")]

    assert hook.ensure_publication("pub", ["items"]) == "altered"
    assert _publication_rel(database) == [("items", None, None)]
    assert _publish_flags(database) == [(False, True, True, True, True)]


@pytest.mark.usefixtures("tables")
def test_ensure_publication_restores_the_published_operations(
    database: Database, hook: PgReplicationHook
) -> None:
    database.execute("CREATE PUBLICATION pub FOR TABLE orders WITH (publish = 'insert')")
    assert hook.ensure_publication("pub", ["orders"]) == "altered"
    assert _publish_flags(database) == [(False, True, True, True, True)]
    assert _publication_rel(database) == [("orders", None, None)]
    assert hook.ensure_publication("pub", ["orders"]) == "unchanged"


@pytest.mark.usefixtures("tables")
def test_publication_for_all_tables_is_refused(database: Database, hook: PgReplicationHook) -> None:
    database.execute("CREATE PUBLICATION pub FOR ALL TABLES")
    with pytest.raises(ConfigError, match=r"publication pub exists FOR ALL TABLES; .* choose another"):
        hook.ensure_publication("pub", ["orders"])
    assert _publish_flags(database) == [(True, True, True, True, True)]


@pytest.mark.usefixtures("tables")
def test_publication_for_a_schema_is_refused(database: Database, hook: PgReplicationHook) -> None:
    database.execute("CREATE PUBLICATION pub FOR TABLES IN SCHEMA public")
    with pytest.raises(
        ConfigError, match=r"publication pub publishes whole schemas \(FOR TABLES IN SCHEMA\)"
    ):
        hook.ensure_publication("pub", ["orders"])


def test_ensure_publication_of_a_missing_table_fails_and_creates_nothing(
    database: Database, hook: PgReplicationHook
) -> None:
    with pytest.raises(ConfigError, match=r"publication pub: .*missing.* does not exist; create the table"):
        hook.ensure_publication("pub", ["missing"])
    assert _publish_flags(database) == []


@pytest.mark.usefixtures("tables")
def test_drop_publication_is_idempotent(database: Database, hook: PgReplicationHook) -> None:
    hook.ensure_publication("pub", ["orders"])
    assert hook.drop_publication("pub") is True
    assert _publish_flags(database) == []
    assert hook.drop_publication("pub") is False


def test_publication_names_are_validated(hook: PgReplicationHook) -> None:
    with pytest.raises(ConfigError, match="publication name 'Pub' is not allowed"):
        hook.ensure_publication("Pub", ["orders"])
    with pytest.raises(ConfigError, match="publication name 'pub-1' is not allowed"):
        hook.drop_publication("pub-1")


# ---- slot ------------------------------------------------------------------------------------------


def test_ensure_slot_creates_once(database: Database, hook: PgReplicationHook, slot: str) -> None:
    assert hook.slot_info(slot) is None
    created = hook.ensure_slot(slot)
    assert created.name == slot
    assert created.created is True
    assert isinstance(created.consistent_point, LSN)
    assert created.consistent_point.value > 0

    info = hook.slot_info(slot)
    assert info is not None
    assert (info.name, info.plugin, info.slot_type, info.database, info.active) == (
        slot,
        "pgoutput",
        "logical",
        database.name,
        False,
    )
    assert info.wal_status == "reserved"
    assert info.lost is False
    assert info.confirmed_flush_lsn == created.consistent_point
    assert isinstance(info.restart_lsn, LSN)
    assert info.restart_lsn <= info.confirmed_flush_lsn
    assert isinstance(info.retained_bytes, int)
    assert info.retained_bytes >= 0

    assert hook.ensure_slot(slot) == SlotCreation(slot, False, None)
    assert database.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)) == [
        (1,)
    ]


def test_slot_info_shows_the_wal_retained(database: Database, hook: PgReplicationHook, slot: str) -> None:
    hook.ensure_slot(slot)
    database.execute(
        "CREATE TABLE filler AS SELECT g AS id, repeat('x', 100) AS pad FROM generate_series(1, 2000) g"
    )
    info = hook.slot_info(slot)
    assert info is not None
    [(expected,)] = database.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots"
        " WHERE slot_name = %s",
        (slot,),
    )
    assert info.retained_bytes is not None
    assert 200_000 < info.retained_bytes <= expected  # type: ignore[operator]


def test_slot_of_another_plugin_is_refused_by_name(
    database: Database, hook: PgReplicationHook, slot: str
) -> None:
    database.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slot,))
    with pytest.raises(SlotError) as excinfo:
        hook.ensure_slot(slot)
    assert str(excinfo.value).startswith(
        f"replication slot {slot} exists with plugin 'test_decoding' in database {database.name!r}"
    )
    assert f"pg_drop_replication_slot('{slot}')" in str(excinfo.value)


def test_slot_of_another_database_is_refused(database: Database, hook: PgReplicationHook, slot: str) -> None:
    other = f"{database.name}_other"
    database.cluster.create_database(other)
    try:
        with psycopg.connect(database.cluster.conninfo(other), autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        with pytest.raises(
            SlotError, match=f"replication slot {slot} exists with plugin 'pgoutput' in database '{other}'"
        ):
            hook.ensure_slot(slot)
    finally:
        database.cluster.drop_database(other)


def test_drop_slot(hook: PgReplicationHook, slot: str) -> None:
    hook.ensure_slot(slot)
    assert hook.drop_slot(slot) is True
    assert hook.slot_info(slot) is None
    assert hook.drop_slot(slot) is False


def test_slot_names_are_validated(hook: PgReplicationHook) -> None:
    for call in (hook.ensure_slot, hook.drop_slot, hook.slot_info):
        with pytest.raises(ConfigError, match="replication slot name 'Slot' is not allowed"):
            call("Slot")


# ---- peek, advance, positions ----------------------------------------------------------------------


@pytest.fixture
def pipeline(database: Database, hook: PgReplicationHook, slot: str) -> str:
    """A table ``t`` in publication ``pub`` and a fresh pgoutput slot; returns the slot name."""
    database.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    database.execute("CREATE TABLE unpublished (id int)")
    hook.ensure_publication("pub", ["t"])
    hook.ensure_slot(slot)
    return slot


def _three_transactions(database: Database) -> None:
    _transaction(database, "INSERT INTO t VALUES (1, 'a'), (2, 'b')", "INSERT INTO t VALUES (3, 'c')")
    _transaction(database, "INSERT INTO t VALUES (4, 'd'), (5, 'e'), (6, 'f')")
    _transaction(database, "INSERT INTO t VALUES (7, 'g'), (8, 'h'), (9, 'i')")


def test_peek_returns_whole_transactions_up_to_the_change_limit(
    database: Database, hook: PgReplicationHook, pipeline: str
) -> None:
    _three_transactions(database)
    first = _peek(hook, pipeline, upto_nchanges=1)
    assert [tag for _, _, tag, _ in first] == ["B", "R", "I", "I", "I", "C"]
    assert _inserted(first) == [("1", "a"), ("2", "b"), ("3", "c")]
    assert len({xid for _, xid, _, _ in first}) == 1

    # a limit inside the second transaction still returns it whole
    two = _peek(hook, pipeline, upto_nchanges=7)
    assert _inserted(two) == [(str(i), v) for i, v in enumerate("abcdef", 1)]
    assert len(_commits(two)) == 2

    everything = _peek(hook, pipeline)
    assert _inserted(everything) == [(str(i), v) for i, v in enumerate("abcdefghi", 1)]
    assert len(_commits(everything)) == 3


def test_peek_stops_at_upto_lsn(database: Database, hook: PgReplicationHook, pipeline: str) -> None:
    _transaction(database, "INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    flush = hook.wal_positions().flush
    _transaction(database, "INSERT INTO t VALUES (3, 'c'), (4, 'd')")
    _transaction(database, "INSERT INTO t VALUES (5, 'e')")

    bounded = _peek(hook, pipeline, upto_lsn=flush)
    assert _inserted(bounded) == [("1", "a"), ("2", "b")]
    (end,) = _commits(bounded)
    assert end <= flush
    assert len(_inserted(_peek(hook, pipeline, upto_lsn=hook.wal_positions().flush))) == 5


def test_peek_does_not_consume(database: Database, hook: PgReplicationHook, pipeline: str) -> None:
    _three_transactions(database)
    once = _peek(hook, pipeline)
    twice = _peek(hook, pipeline)
    assert len(once) == 3 + 1 + 9 + 3  # Begin and Commit each, one Relation, nine Inserts
    assert twice == once


def test_peek_of_a_missing_slot_is_a_slot_error(hook: PgReplicationHook) -> None:
    missing = r"replication slot no_such_slot does not exist .*run the pipeline's setup DAG: it creates"
    with pytest.raises(SlotError, match=missing):
        _peek(hook, "no_such_slot")


def test_peek_arguments_are_validated(hook: PgReplicationHook, slot: str) -> None:
    with pytest.raises(ConfigError, match="upto_nchanges must be positive, not 0"):
        _peek(hook, slot, upto_nchanges=0)
    with pytest.raises(ConfigError, match="protocol_version must be 1 or 2, not 3"):
        _peek(hook, slot, protocol_version=3)
    with (
        pytest.raises(ConfigError, match="publication name 'Pub' is not allowed"),
        hook.peek(slot, ["Pub"], upto_lsn=None, upto_nchanges=None),
    ):
        pass


class _ConnectionRecordingHook(PgReplicationHook):
    """The real hook, keeping the connections it opens so a test can look into their session."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connections: list[psycopg.Connection[Any]] = []

    def connect(self, *, autocommit: bool = True) -> psycopg.Connection[Any]:
        conn = super().connect(autocommit=autocommit)
        self.connections.append(conn)
        return conn


def test_peek_streams_through_a_server_side_cursor(
    database: Database, source_conn_id: str, pipeline: str
) -> None:
    database.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 5000) g")
    hook = _ConnectionRecordingHook(postgres_conn_id=source_conn_id)
    ids: list[int] = []
    tags: list[str] = []
    cursors: list[tuple[Any, ...]] = []
    activity: list[tuple[Any, ...]] = []
    with (
        database.connect() as observer,
        hook.peek(pipeline, ["pub"], upto_lsn=None, upto_nchanges=None, fetch_size=100) as rows,
    ):
        for n, (_lsn, _xid, data) in enumerate(rows):
            tag, detail = _tag_and_detail(data)
            tags.append(tag)
            if tag == "I":
                ids.append(int(detail[0]))
            if n == 2500:
                # a second connection sees the peek's session fetching 100 rows at a time
                activity = observer.execute(
                    "SELECT state, query FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend'"
                ).fetchall()
                # pg_cursors lists the cursors of its own session only: ask the peek's session too
                (peek_conn,) = hook.connections
                cursors = peek_conn.execute("SELECT name, is_holdable FROM pg_cursors").fetchall()
    assert ids == list(range(1, 5001))
    assert tags == ["B", "R", *["I"] * 5000, "C"]
    [(name, is_holdable)] = cursors
    assert re.fullmatch(r"pgsync_peek_[0-9a-f]{12}", name), name
    assert is_holdable is False
    [(state, query)] = activity
    assert state == "idle in transaction"
    assert query == f'FETCH FORWARD 100 FROM "{name}"'
    assert hook.connections[0].closed


def test_wal_positions(database: Database, hook: PgReplicationHook) -> None:
    before = hook.wal_positions()
    database.execute("CREATE TABLE w AS SELECT g FROM generate_series(1, 1000) g")
    after = hook.wal_positions()
    for positions in (before, after):
        assert isinstance(positions.flush, LSN)
        assert isinstance(positions.insert, LSN)
        assert positions.flush <= positions.insert
    assert after.insert > before.insert
    assert after.flush > before.flush
    # the current snapshot's 64-bit xmax: past the xid of the transaction committed between
    written = database.transaction("INSERT INTO w VALUES (1)")
    latest = hook.wal_positions()
    assert before.xmax <= written < latest.xmax
    [(xmax,)] = database.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
    assert latest.xmax <= int(xmax)  # type: ignore[call-overload]


def test_advance_slot_moves_to_a_commit_and_never_back(
    database: Database, hook: PgReplicationHook, pipeline: str
) -> None:
    start = hook.slot_info(pipeline)
    assert start is not None and start.confirmed_flush_lsn is not None
    _transaction(database, "INSERT INTO t VALUES (1, 'a')")
    _transaction(database, "INSERT INTO t VALUES (2, 'b')")
    first_end, second_end = _commits(_peek(hook, pipeline))
    assert start.confirmed_flush_lsn < first_end < second_end

    assert hook.advance_slot(pipeline, first_end) == first_end
    assert _confirmed(hook, pipeline) == first_end
    assert _inserted(_peek(hook, pipeline)) == [("2", "b")]

    # a repeat is a no-op, and an older position never moves the slot back
    assert hook.advance_slot(pipeline, first_end) == first_end
    assert hook.advance_slot(pipeline, start.confirmed_flush_lsn) == first_end
    assert _confirmed(hook, pipeline) == first_end
    assert _inserted(_peek(hook, pipeline)) == [("2", "b")]

    assert hook.advance_slot(pipeline, second_end) == second_end
    assert _confirmed(hook, pipeline) == second_end
    assert _peek(hook, pipeline) == []


class _StaleSlotInfoHook(PgReplicationHook):
    """The real hook, but its first look at the slot is a stale one taken earlier.

    That is what ``advance_slot`` sees when another run advances the slot between its
    check and its ``pg_replication_slot_advance`` call.
    """

    def __init__(self, stale: SlotInfo, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stale: SlotInfo | None = stale

    def slot_info(self, slot_name: str) -> SlotInfo | None:
        stale, self.stale = self.stale, None
        return stale if stale is not None else super().slot_info(slot_name)


def test_advance_that_lost_a_race_is_not_an_error(
    database: Database, hook: PgReplicationHook, source_conn_id: str, pipeline: str
) -> None:
    stale = hook.slot_info(pipeline)
    assert stale is not None
    _transaction(database, "INSERT INTO t VALUES (1, 'a')")
    _transaction(database, "INSERT INTO t VALUES (2, 'b')")
    first_end, second_end = _commits(_peek(hook, pipeline))
    assert hook.advance_slot(pipeline, second_end) == second_end  # the other run, further ahead

    racing = _StaleSlotInfoHook(stale, postgres_conn_id=source_conn_id)
    assert racing.advance_slot(pipeline, first_end) == second_end
    assert _confirmed(hook, pipeline) == second_end


def test_advance_past_unpublished_writes(database: Database, hook: PgReplicationHook, pipeline: str) -> None:
    database.execute("INSERT INTO unpublished SELECT generate_series(1, 100)")
    flush = hook.wal_positions().flush
    assert _peek(hook, pipeline, upto_lsn=flush, upto_nchanges=10) == []
    assert hook.advance_slot(pipeline, flush) == flush
    assert _confirmed(hook, pipeline) == flush


def test_advance_of_a_missing_slot_is_a_slot_error(hook: PgReplicationHook) -> None:
    with pytest.raises(
        SlotError, match="replication slot no_such_slot does not exist: it cannot be advanced"
    ):
        hook.advance_slot("no_such_slot", LSN(1))


def _confirmed(hook: PgReplicationHook, slot: str) -> LSN | None:
    info = hook.slot_info(slot)
    assert isinstance(info, SlotInfo)
    return info.confirmed_flush_lsn
