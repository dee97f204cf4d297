"""A complete pgsync pipeline written by hand with the operators (no DAG factory).

Four DAGs for one pipeline, in the order you run them (docs/hand-written-pipeline.md):

1. ``example_pgsync_setup``     preflight -> publication -> slot          (once, by hand)
2. ``example_pgsync_baseline``  one baseline per table                     (once, after setup)
3. ``example_pgsync_cdc``       capture -> apply                           (every 5 minutes)
4. ``example_pgsync_compact``   fold the lake's segments into its bases    (daily)

Copy it into your DAGs folder. It is configured by Airflow connections and environment
variables only:

- connection ``pgsync_example_source``: the source PostgreSQL database (wal_level=logical,
  a role with REPLICATION, or superuser, that owns the tables);
- connection ``pgsync_example_replica``: the PostgreSQL database the tables are copied to;
- ``PGSYNC_EXAMPLE_TABLES``: the tables, comma-separated (default
  ``public.orders,public.customers``);
- ``PGSYNC_EXAMPLE_CHANGELOG``: where the changelog lives, a folder or a pyarrow filesystem
  URI such as ``s3://bucket/pgsync/example`` (default ``$AIRFLOW_HOME/pgsync/example/changelog``);
- ``PGSYNC_LAKE``: the lake's warehouse folder (default ``$AIRFLOW_HOME/pgsync/lake``).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.operators.capture import PgCaptureOperator
from airflow_provider_pgsync.operators.compact import PgCompactOperator
from airflow_provider_pgsync.operators.replication import (
    PgCreatePublicationOperator,
    PgCreateSlotOperator,
    PgPreflightOperator,
)

SOURCE = "pgsync_example_source"  # the Airflow connection of the source database
REPLICA = "pgsync_example_replica"  # the Airflow connection of the PostgreSQL destination

# One pipeline = one slot + one publication + one state + one changelog. Every task below uses
# the SAME four names: capture writes the changelog and the state under them, and apply,
# baseline and compaction read them from there. An apply with another `pipeline` or
# `changelog_uri` would look at another, empty pipeline and apply nothing.
PIPELINE = "example"
SLOT = "pgsync_example"
PUBLICATION = "pgsync_example"
_home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
CHANGELOG = os.environ.get("PGSYNC_EXAMPLE_CHANGELOG") or f"{_home}/pgsync/example/changelog"

_tables = os.environ.get("PGSYNC_EXAMPLE_TABLES") or "public.orders,public.customers"
TABLES = [t.strip() for t in _tables.split(",") if t.strip()]

# Where the tables go: the lake (Spark tables under $PGSYNC_LAKE, a view per table named
# pgsync.<schema>__<table>) and a PostgreSQL replica. Each destination has its own phase
# and watermark per table; the baseline and apply take the same list.
DESTINATIONS = [
    {"kind": "lake"},
    {"kind": "postgres", "conn_id": REPLICA, "name": "replica"},
]

START = datetime(2026, 1, 1)

# ---- 1. setup: run once, before anything else --------------------------------------------
# Preflight reports every problem of the source at once with its fix; the publication is
# created before the slot, so the slot decodes the DDL trigger it installs. The slot keeps
# every change from the moment it is created: it MUST exist before any baseline runs, or the
# changes made between the baseline's snapshot and the slot's creation would be lost (the
# baseline refuses to run without it).
with DAG("example_pgsync_setup", schedule=None, start_date=START, catchup=False, tags=["pgsync"]):
    (
        PgPreflightOperator(
            task_id="preflight",
            postgres_conn_id=SOURCE,
            slot_name=SLOT,
            publication_name=PUBLICATION,
            tables=TABLES,
        )
        >> PgCreatePublicationOperator(
            task_id="publication", postgres_conn_id=SOURCE, publication_name=PUBLICATION, tables=TABLES
        )
        >> PgCreateSlotOperator(task_id="slot", postgres_conn_id=SOURCE, slot_name=SLOT)
    )

# ---- 2. baseline: once per table, after setup --------------------------------------------
# Each table is copied by a Spark job (local[*] unless the connection `spark_default` exists)
# from one exported snapshot into every destination; the table is then SyncDone and becomes
# Ready when apply has passed the snapshot. `slot_name` is checked before anything is
# written. Writes to the tables may go on meanwhile: nothing is lost or applied twice.
with DAG("example_pgsync_baseline", schedule=None, start_date=START, catchup=False, tags=["pgsync"]):
    for table in TABLES:
        PgBaselineOperator(
            task_id=f"baseline_{table.replace('.', '__')}",
            pipeline=PIPELINE,
            table=table,
            slot_name=SLOT,
            postgres_conn_id=SOURCE,
            destinations=DESTINATIONS,
        )

# ---- 3. cdc: capture, then apply, on a schedule ------------------------------------------
# Capture makes a batch of changes durable in the changelog, records it in the state and only
# then advances the slot; apply brings every destination up to the changelog. Both take the
# same `pipeline` and `changelog_uri`. Apply's `postgres_conn_id` is the SOURCE, which it
# needs even though it writes elsewhere: it locks the pipeline and reads the state there, and
# the replica reads the source's catalog for the tables it creates.
with DAG(
    "example_pgsync_cdc",
    schedule=timedelta(minutes=5),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    tags=["pgsync"],
):
    (
        PgCaptureOperator(
            task_id="capture",
            pipeline=PIPELINE,
            slot_name=SLOT,
            publication_name=PUBLICATION,
            changelog_uri=CHANGELOG,
            postgres_conn_id=SOURCE,
        )
        >> PgApplyOperator(
            task_id="apply",
            pipeline=PIPELINE,
            changelog_uri=CHANGELOG,
            postgres_conn_id=SOURCE,
            destinations=DESTINATIONS,
        )
    )

# ---- 4. compact: fold the lake's segments into a new base version ------------------------
# The lake's view reads base + the segments apply wrote since; compaction (a Spark job) makes
# them the next base, swapped in atomically. The PostgreSQL replica needs none.
with DAG("example_pgsync_compact", schedule="@daily", start_date=START, catchup=False, tags=["pgsync"]):
    PgCompactOperator(
        task_id="compact",
        tables=TABLES,
        destination={"kind": "lake"},
        pipeline=PIPELINE,
        postgres_conn_id=SOURCE,
    )
