"""Capture golden pgoutput payloads from the real development server.

    python dev/capture_golden.py

Runs a scenario that makes the server send every message of protocol versions 1 and 2
(including streamed transactions, a type message and an origin) and writes one file
per distinct payload shape to ``tests/pgoutput/golden/``: ``NN_<tag>.bin`` holds the
raw payload, ``manifest.json`` the decoder's reading of each, checked by
``tests/pgoutput/test_golden.py``. Review the manifest by eye before committing it.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import psycopg

from airflow_provider_pgsync.pgoutput import Message, PgOutputDecoder, StreamAbort
from pgcluster import REPO, dev_cluster

OUT = REPO / "tests" / "pgoutput" / "golden"

SETUP = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE items (id int PRIMARY KEY, name text, big text, mood mood);
ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE full_rows (a int, b text);
ALTER TABLE full_rows REPLICA IDENTITY FULL;
CREATE TABLE bulk (id int, pad text);
CREATE PUBLICATION golden_pub FOR TABLE items, full_rows, bulk;
"""

CHANGES = [
    "INSERT INTO items VALUES (1, 'a', repeat('x', 9000), 'ok'), (2, NULL, 'small', NULL)",
    "UPDATE items SET name = 'a2' WHERE id = 1",
    "UPDATE items SET id = 20 WHERE id = 2",
    "DELETE FROM items WHERE id = 20",
    "INSERT INTO full_rows VALUES (1, 'one')",
    "UPDATE full_rows SET b = 'uno'",
    "DELETE FROM full_rows",
    "SELECT pg_logical_emit_message(true, 'golden', 'transactional')",
    "SELECT pg_logical_emit_message(false, 'golden', '\\x00ff'::bytea)",
    "TRUNCATE full_rows, bulk RESTART IDENTITY CASCADE",
]


def run_scenario(conninfo: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(SETUP)
        conn.execute("SELECT pg_create_logical_replication_slot('golden', 'pgoutput')")
        for statement in CHANGES:
            conn.execute(statement)
        # a transaction from a replication origin: the server sends an Origin message
        conn.execute("SELECT pg_replication_origin_create('golden_origin')")
        with conn.transaction():
            conn.execute("SELECT pg_replication_origin_session_setup('golden_origin')")
            conn.execute("SELECT pg_replication_origin_xact_setup('0/ABCDEF', now())")
            conn.execute("INSERT INTO items VALUES (3, 'from origin', NULL, 'happy')")
        conn.execute("SELECT pg_replication_origin_session_reset()")
        # large transactions are streamed (Stream Start/Stop/Commit) or aborted (Stream Abort)
        conn.execute("INSERT INTO bulk SELECT g, repeat('p', 200) FROM generate_series(1, 3000) g")
        with conn.transaction():
            conn.execute("INSERT INTO bulk SELECT g, repeat('q', 200) FROM generate_series(1, 3000) g")
            conn.execute("SELECT pg_logical_emit_message(true, 'golden', 'in a stream')")
            conn.execute("INSERT INTO bulk SELECT g, repeat('q', 200) FROM generate_series(1, 3000) g")
            try:
                with conn.transaction():  # a streamed subtransaction that rolls back
                    conn.execute("INSERT INTO bulk SELECT g, 'r' FROM generate_series(1, 30000) g")
                    conn.execute("SELECT 1/0")
            except psycopg.errors.DivisionByZero:
                pass
        try:
            with conn.transaction():  # a streamed transaction that rolls back
                conn.execute("INSERT INTO bulk SELECT g, repeat('s', 200) FROM generate_series(1, 3000) g")
                conn.execute("SELECT 1/0")
        except psycopg.errors.DivisionByZero:
            pass


def peek_all(conninfo: str, *, binary: bool) -> list[bytes]:
    """Every payload, streaming large transactions; values in binary format if asked."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SET logical_decoding_work_mem = '64kB'")
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes('golden', NULL, NULL,"
            " 'proto_version', '2', 'publication_names', 'golden_pub', 'messages', 'true',"
            " 'streaming', 'on', 'binary', %s)",
            (str(binary).lower(),),
        ).fetchall()
    return [bytes(r[0]) for r in rows]


def main() -> None:
    cluster = dev_cluster()
    cluster.start()
    dbname = f"golden_{uuid.uuid4().hex[:8]}"
    cluster.create_database(dbname)
    try:
        run_scenario(cluster.conninfo(dbname))
        payloads = peek_all(cluster.conninfo(dbname), binary=False)
        payloads += peek_all(cluster.conninfo(dbname), binary=True)
    finally:
        cluster.drop_database(dbname)
        with psycopg.connect(cluster.conninfo("postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin"
                         " WHERE roname = 'golden_origin'")

    decoder = PgOutputDecoder(protocol_version=2)
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    manifest: dict[str, dict[str, object]] = {}
    seen: set[tuple[str, bool, str]] = set()
    for payload in payloads:
        in_stream = decoder.in_stream
        message = decoder.decode(payload)
        shape = (chr(payload[0]), in_stream, _shape(message))
        if shape in seen:
            continue
        seen.add(shape)
        name = f"{len(manifest):02d}_{type(message).__name__}.bin"
        (OUT / name).write_bytes(payload)
        manifest[name] = {"in_stream": in_stream, "decoded": repr(message)}
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(manifest)} golden payloads of {len(payloads)} to {OUT.relative_to(Path.cwd())}")


def _shape(message: Message) -> str:
    """What makes two payloads of one tag worth keeping both (tuple kinds, flags, sub-tags)."""
    parts = [type(message).__name__]
    for attr in ("old_tuple", "key_tuple", "new_tuple"):
        value = getattr(message, attr, None)
        if value is not None:
            parts.append(f"{attr}={value.kinds!r}")
    for attr in ("flags", "options", "first_segment", "relation_name"):
        if hasattr(message, attr):
            parts.append(f"{attr}={getattr(message, attr)!r}")
    if isinstance(message, StreamAbort):
        parts.append(f"whole={message.subxid == message.xid}")
    return ",".join(parts)


if __name__ == "__main__":
    main()
