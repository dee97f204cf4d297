"""`make demo`: one pipeline end to end through Airflow on the local development server.

1. starts the private PostgreSQL cluster and creates database ``pgsync_demo`` with three
   tables: ``orders`` (a TOASTed ``note`` column, STORAGE EXTERNAL), ``customers``, and
   ``events`` without a primary key (REPLICA IDENTITY FULL);
2. writes the pipeline config ``.dev/demo/pgsync.yaml`` (lake destination, changelog and
   warehouse under ``.dev/demo``) and loads the drop-in ``dags/pgsync.py`` with it;
3. runs the DAGs with ``dag.test()`` in a fresh Airflow home (``.dev/airflow-demo``): setup,
   the baseline of every table while a writer commits inserts, updates and deletes, several
   cdc runs (the writer still busy during the first ones), and the lake's compaction;
4. compares each table of the source with its lake view (row count and a checksum of every
   row's text, computed alike by PostgreSQL and Spark) and prints one line per table.

The terminal shows the demo's steps and pgsync's own log lines (``demo_console``); all other
output goes to ``.dev/demo/demo.log``. The last line is ``demo: in sync, <N> tables, <M> rows``
when every table matches; the exit code is 1 otherwise. ``make ui`` then shows the runs and
the status page.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

import machine_settings
from demo_console import QuietConsole
from pgcluster import REPO, Cluster, dev_cluster

DEMO_DB = "pgsync_demo"
CONN_ID = "pgsync_demo_source"
PIPELINE = "demo"
DEMO = REPO / ".dev" / "demo"
AIRFLOW_HOME = REPO / ".dev" / "airflow-demo"
LOG = DEMO / "demo.log"
CDC_RUNS = 3

SCHEMA = """
CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, country text);
CREATE TABLE orders (
    id bigint PRIMARY KEY,
    customer_id bigint NOT NULL,
    amount numeric(10, 2),
    status text NOT NULL,
    note text
);
ALTER TABLE orders ALTER COLUMN note SET STORAGE EXTERNAL;
CREATE TABLE events (customer_id bigint, kind text, payload text);
ALTER TABLE events REPLICA IDENTITY FULL;
INSERT INTO customers SELECT g, 'customer ' || g, (ARRAY['NL', 'DE', 'FR', NULL])[g % 4 + 1]
  FROM generate_series(1, 5000) g;
INSERT INTO orders SELECT g, g % 5000 + 1, (g % 977) * 1.25, 'new',
  CASE WHEN g % 50 = 0 THEN repeat('long note ' || g || ' ', 1000) ELSE 'note ' || g END
  FROM generate_series(1, 20000) g;
INSERT INTO events SELECT g % 5000 + 1, (ARRAY['view', 'click', 'buy'])[g % 3 + 1], 'payload ' || g
  FROM generate_series(1, 10000) g;
ANALYZE;
"""

# every column's text is the same in PostgreSQL and Spark for these types (bigint, text,
# numeric with a scale), so both sides hash the same string per row
COLUMNS = {
    "public.customers": ["id", "name", "country"],
    "public.orders": ["id", "customer_id", "amount", "status", "note"],
    "public.events": ["customer_id", "kind", "payload"],
}


class Writer(threading.Thread):
    """Commits small transactions of inserts, updates (some leaving the TOASTed note
    unchanged), key changes and deletes on all three tables until stopped."""

    def __init__(self, conninfo: str) -> None:
        super().__init__(name="demo writer", daemon=True)
        self.conninfo = conninfo
        self.stopping = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(2026)
        next_order = 1_000_000
        try:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                while not self.stopping.is_set():
                    with conn.transaction():
                        for _ in range(rng.randint(1, 5)):
                            next_order += 1
                            self._one(conn, rng, next_order)
                    self.transactions += 1
                    self.stopping.wait(0.002)  # a steady stream, not a flood: pacing, not a sync
        except BaseException as exc:  # reported by stop()
            self.error = exc

    @staticmethod
    def _one(conn: psycopg.Connection[Any], rng: random.Random, new_id: int) -> None:
        order = rng.randint(1, 20000)
        choice = rng.random()
        if choice < 0.3:
            conn.execute(
                "INSERT INTO orders VALUES (%s, %s, %s, 'new', repeat('fresh note ', %s))",
                (new_id, rng.randint(1, 5000), rng.randint(1, 9999) / 4, rng.choice([1, 1000])),
            )
        elif choice < 0.6:  # the note stays as it was: unchanged TOAST in the stream
            conn.execute(
                "UPDATE orders SET status = %s, amount = amount + 1 WHERE id = %s",
                (rng.choice(["paid", "sent", "returned"]), order),
            )
        elif choice < 0.65:
            conn.execute("UPDATE orders SET id = %s WHERE id = %s", (new_id, order))
        elif choice < 0.75:
            conn.execute("DELETE FROM orders WHERE id = %s", (order,))
        elif choice < 0.85:
            conn.execute(
                "UPDATE customers SET name = name || '!' WHERE id = %s", (rng.randint(1, 5000),)
            )
        elif choice < 0.95:
            conn.execute(
                "INSERT INTO events VALUES (%s, 'click', %s)", (rng.randint(1, 5000), f"payload {new_id}")
            )
        else:
            conn.execute(
                "DELETE FROM events WHERE ctid = (SELECT ctid FROM events WHERE customer_id = %s LIMIT 1)",
                (rng.randint(1, 5000),),
            )

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=60)
        if self.error is not None:
            raise RuntimeError(f"the demo writer failed: {self.error}") from self.error


def write_config(path: Path, *, cdc: str = "null", compact: str = "null") -> None:
    """The demo pipeline's config; ``cdc`` and ``compact`` are YAML schedules (manual by default)."""
    path.write_text(
        f"""# the demo pipeline (dev/demo.py); passwords live in the Airflow connection
pipelines:
  - name: {PIPELINE}
    source_conn_id: {CONN_ID}
    tables: [{", ".join(COLUMNS)}]
    destinations:
      - kind: lake
        warehouse: {DEMO / "lake"}
    state: {{backend: postgres}}
    changelog: {{uri: {DEMO / "changelog"}}}
    schedules: {{cdc: {cdc}, compact: {compact}}}
"""
    )


def prepare_demo_source(cluster: Cluster, *, keep: bool = False) -> str:
    """Start the cluster and (re)create database ``pgsync_demo`` with the demo's tables and rows;
    with ``keep``, an existing database stays as it is. Its conninfo."""
    cluster.start()
    if not (keep and cluster.has_database(DEMO_DB)):
        cluster.drop_database(DEMO_DB)
        cluster.create_database(DEMO_DB)
        with psycopg.connect(cluster.conninfo(DEMO_DB), autocommit=True) as conn:
            conn.execute(SCHEMA)
    print(f"demo: database {DEMO_DB} at {cluster.url(DEMO_DB)}: customers, orders, events")
    return cluster.conninfo(DEMO_DB)


def fresh_airflow() -> Any:
    """A new Airflow metadata database in ``AIRFLOW_HOME`` and the drop-in DAG file loaded
    into it; returns the DagBag."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.utils.db import initdb

    initdb()
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=str(REPO / "dags"))
    if bag.import_errors:
        raise SystemExit(f"demo: dags/pgsync.py does not import: {bag.import_errors}")
    sync_bag_to_db(bag, "dags-folder", None)
    return bag


def run(console: QuietConsole, bag: Any, kind: str, **kwargs: Any) -> None:
    """Run DAG ``pgsync_demo_<kind>`` with ``dag.test()``; exit when a task failed."""
    dag_id = f"pgsync_{PIPELINE}_{kind}"
    started = time.monotonic()
    dag_run = bag.dags[dag_id].test(**kwargs)
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    seconds = time.monotonic() - started
    if str(dag_run.state) != "success":
        failed = sorted(task for task, state in states.items() if state not in ("success", "skipped"))
        console.say(f"demo: {dag_id}: {dag_run.state} in {seconds:.0f} s; tasks not done: {failed}")
        raise SystemExit(f"demo: {dag_id} failed; its task logs are in {LOG}")
    done = sum(state == "success" for state in states.values())
    console.say(f"demo: {dag_id}: success in {seconds:.0f} s ({done} task(s) ran)")


def source_sums(conninfo: str) -> dict[str, tuple[int, int]]:
    out = {}
    with psycopg.connect(conninfo) as conn:
        for table, columns in COLUMNS.items():
            text = ", ".join(f"{c}::text" for c in columns)
            row_hash = f"('x' || substr(md5(concat_ws('|', {text})), 1, 8))::bit(32)::bigint"
            row = conn.execute(
                f"SELECT count(*), coalesce(sum({row_hash}), 0) FROM {table}"  # noqa: S608 (demo's own names)
            ).fetchone()
            assert row is not None
            out[table] = (int(row[0]), int(row[1]))
    return out


def lake_sums(warehouse: Path = DEMO / "lake") -> dict[str, tuple[int, int]]:
    """The same figures of the lake's views (in ``warehouse``), in a Spark session of this process."""
    from pyspark.sql import SparkSession

    from airflow_provider_pgsync.destinations.lake import LakeDestination, catalog_name
    from airflow_provider_pgsync.source.names import TableRef

    lake = LakeDestination.from_config({"warehouse": str(warehouse)})
    builder = SparkSession.builder.master("local[2]").appName("pgsync demo check")
    for key, value in lake.spark_conf().items():
        builder = builder.config(key, value)
    builder = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    out = {}
    try:
        for table, columns in COLUMNS.items():
            text = ", ".join(f"CAST(`{c}` AS STRING)" for c in columns)
            row_hash = f"CAST(conv(substr(md5(concat_ws('|', {text})), 1, 8), 16, 10) AS BIGINT)"
            view = f"pgsync.{catalog_name(TableRef.parse(table))}"
            row = spark.sql(f"SELECT count(*), coalesce(sum({row_hash}), 0) FROM {view}").collect()[0]  # noqa: S608
            out[table] = (int(row[0]), int(row[1]))
    finally:
        spark.stop()
        logging.getLogger("py4j").setLevel(logging.WARNING)  # its goodbye would follow our last line
    return out


def main() -> int:
    shutil.rmtree(DEMO, ignore_errors=True)
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)
    DEMO.mkdir(parents=True)
    os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
    os.environ["PGSYNC_CONFIG"] = str(DEMO / "pgsync.yaml")
    machine_settings.use()  # the quick JIT and the class archive for the demo's Spark drivers
    print(f"demo: one pipeline end to end (about 5 minutes); Airflow's and Spark's output goes to {LOG}")
    with QuietConsole(LOG) as console:
        code, verdict = run_demo(console)
    print(f"demo: logs: {LOG} ({console.lines:,} lines of Airflow, Spark and PostgreSQL output),")
    print(f"      {REPO / '.dev' / 'logs' / 'pip.log'} (pip); `make ui` shows the runs and the status page")
    print(verdict)
    return code


def run_demo(console: QuietConsole) -> tuple[int, str]:
    """The demo's steps; its exit code and its last line."""
    console.say("demo: [1/7] source database")
    cluster = dev_cluster()
    conninfo = prepare_demo_source(cluster)
    console.say(f"  database {DEMO_DB} at {cluster.url(DEMO_DB)}: {_row_counts(conninfo)}")
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = cluster.url(DEMO_DB, with_password=True)
    write_config(DEMO / "pgsync.yaml")
    console.say(f"demo: [2/7] Airflow home {AIRFLOW_HOME}, pipeline config {DEMO / 'pgsync.yaml'}")
    bag = fresh_airflow()

    console.say("demo: [3/7] setup: preflight, publication, slot, table states")
    run(console, bag, "setup")
    writer = Writer(conninfo)
    writer.start()
    console.say(f"demo: [4/7] baseline of {len(COLUMNS)} tables (Spark) while a writer commits changes")
    run(console, bag, "baseline", run_conf={"tables": list(COLUMNS), "mode": "rebaseline"})
    for n in range(CDC_RUNS):
        if n == CDC_RUNS - 1:
            writer.stop()
            console.say(f"demo: the writer stopped after {writer.transactions:,} transactions")
        console.say(f"demo: [5/7] cdc run {n + 1} of {CDC_RUNS}: capture, then apply to the lake")
        run(console, bag, "cdc")
    console.say("demo: [6/7] compaction of the lake (Spark)")
    run(console, bag, "compact")

    console.say("demo: [7/7] comparing each table of the source with its lake view (Spark)")
    source, lake = source_sums(conninfo), lake_sums()
    matching = 0
    for table in COLUMNS:
        same = source[table] == lake[table]
        matching += same
        console.say(
            f"  {table:18} source {source[table][0]:>7,} rows, checksum {source[table][1]:>16}"
            f" | lake {lake[table][0]:>7,} rows, checksum {lake[table][1]:>16}"
            f"  {'ok' if same else 'DIFFERENT'}"
        )
    if matching != len(COLUMNS):
        return 1, f"demo: NOT in sync: {len(COLUMNS) - matching} of {len(COLUMNS)} tables differ"
    rows = sum(count for count, _ in source.values())
    return 0, f"demo: in sync, {len(COLUMNS)} tables, {rows:,} rows"


def _row_counts(conninfo: str) -> str:
    with psycopg.connect(conninfo) as conn:
        counts = [
            (table, conn.execute(f"SELECT count(*) FROM {table}").fetchone())  # noqa: S608 (demo's own names)
            for table in COLUMNS
        ]
    return ", ".join(f"{table} {row[0] if row else 0:,} rows" for table, row in counts)


if __name__ == "__main__":
    sys.exit(main())
