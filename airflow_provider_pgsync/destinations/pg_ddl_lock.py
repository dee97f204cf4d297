"""One lock for the DDL pgsync runs in a PostgreSQL destination database.

Baselines of several tables run at once (one task each under a real executor) and each makes
what it needs: the control schema and tables, the table's schema. ``CREATE ... IF NOT EXISTS``
is not safe against a concurrent twin (both see nothing, one fails with a unique violation
on the catalog), so each such transaction first takes this transaction-level advisory lock:
the creations follow one another, each over in moments.
"""

from __future__ import annotations

from typing import Any

import psycopg

DDL_LOCK_CLASS = 0x70677364  # 'pgsd': pgsync's DDL in a destination database
DDL_LOCK_KEY = 0


def lock_ddl(conn: psycopg.Connection[Any]) -> None:
    """Wait for pgsync's DDL lock of this database, held until the current transaction ends."""
    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (DDL_LOCK_CLASS, DDL_LOCK_KEY))
