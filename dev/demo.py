"""`make demo`: the source side of pgsync, end to end, on the local development server.

Starts the private PostgreSQL cluster, creates a demo database with one table, runs
preflight, creates the publication and the slot, makes a few changes and prints them
as the slot delivers them, decoded, one line per change.
"""

from __future__ import annotations

import os
import sys

import psycopg

from pgcluster import REPO, dev_cluster

DEMO_DB = "pgsync_demo"
SLOT = "pgsync_demo_slot"
PUBLICATION = "pgsync_demo_pub"
CONN_ID = "pgsync_demo_source"

SCHEMA = """
CREATE TABLE public.orders (
    id bigint PRIMARY KEY,
    customer text NOT NULL,
    amount numeric(10, 2),
    note text
);
ALTER TABLE public.orders ALTER COLUMN note SET STORAGE EXTERNAL;
"""

CHANGES = [
    "INSERT INTO orders VALUES (1, 'ada', 12.50, repeat('long note ', 1000)), (2, 'grace', 7.25, NULL)",
    "UPDATE orders SET amount = 13.00 WHERE id = 1",
    "UPDATE orders SET id = 20 WHERE id = 2",
    "DELETE FROM orders WHERE id = 20",
    "TRUNCATE orders",
]


def main() -> int:
    # Airflow must not write into ~/airflow for a demo
    os.environ.setdefault("AIRFLOW_HOME", str(REPO / ".dev" / "airflow-demo"))
    from airflow_provider_pgsync.hooks.replication import PgReplicationHook
    from airflow_provider_pgsync.pgoutput import PgOutputDecoder
    from airflow_provider_pgsync.pgoutput.describe import ChangeDescriber

    cluster = dev_cluster()
    cluster.start()
    print(f"demo: PostgreSQL running at {cluster.url('postgres')}")
    cluster.drop_database(DEMO_DB)
    cluster.create_database(DEMO_DB)
    with psycopg.connect(cluster.conninfo(DEMO_DB), autocommit=True) as conn:
        conn.execute(SCHEMA)
    print(f"demo: created database {DEMO_DB} with table public.orders")

    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = cluster.url(DEMO_DB, with_password=True)
    hook = PgReplicationHook(postgres_conn_id=CONN_ID)
    hook.preflight(slot_name=SLOT, tables=["public.orders"], publication_name=PUBLICATION)
    print("demo: preflight passed")
    hook.ensure_publication(PUBLICATION, ["public.orders"])
    hook.ensure_slot(SLOT)
    print(f"demo: publication {PUBLICATION} and slot {SLOT} ready")

    with psycopg.connect(cluster.conninfo(DEMO_DB), autocommit=True) as conn:
        for statement in CHANGES:
            conn.execute(statement)
    print(f"demo: made {len(CHANGES)} changes; the slot delivers:")

    upto = hook.wal_positions().flush
    decoder = PgOutputDecoder()
    describer = ChangeDescriber()
    lines = 0
    with hook.peek(SLOT, [PUBLICATION], upto_lsn=upto, upto_nchanges=None) as rows:
        for lsn, _xid, data in rows:
            line = describer.describe(decoder.decode(data))
            if line:
                print(f"  {lsn!s:>12}  {line}")
                lines += 1
    advanced = hook.advance_slot(SLOT, upto)
    print(f"demo: {lines} lines decoded; slot advanced to {advanced}")
    return 0 if lines else 1


if __name__ == "__main__":
    sys.exit(main())
