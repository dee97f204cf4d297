"""``dev/bench freshness``: how fresh the destinations are under a steady write load, on a real
Airflow deployment (scheduler, dag-processor, triggerer, API server, LocalExecutor).

A private cluster holds the source (the demo's ``customers``, ``orders`` and keyless ``events``),
the PostgreSQL replica and Airflow's metadata; pipeline ``fresh`` streams the source into a lake
and the replica. Per phase (cron ``* * * * *``, then the event-driven schedule): writer threads
commit about ``--rate`` transactions per second for ``--minutes``; a probe records for 1 commit
in ``--sample-every`` how long after its commit each destination's own watermark is past it
(``freshness_probe`` says exactly what that means); then the writer stops, the bench waits
until both destinations hold its last commit, pauses the cdc DAG and compares each destination
with the source (row count and a checksum of every row per table). Last line:
``freshness_p50_s=<p50 of the event-driven phase, worst destination>``; exit 1 when a
destination differs from the source.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from deployment import Deployment, DeploymentError
from freshness_load import LoadWriter
from freshness_probe import Probe, Tracker, percentiles

from pgcluster import REPO, Cluster, default_base_dir, free_port, server_user

FRESH = REPO / ".dev" / "bench" / "freshness"
PIPELINE = "fresh"
CDC_DAG = f"pgsync_{PIPELINE}_cdc"
SOURCE_DB, REPLICA_DB = "fresh_source", "fresh_replica"
SOURCE_CONN, REPLICA_CONN = "fresh_source", "fresh_replica"
DESTINATIONS = ("lake", "replica")
CRON = "'* * * * *'"
EVENTS = "{on_changes: 1000, max_wait: 60s}"
"""The event-driven schedule. A run starts once 1,000 changes wait in the slot: at 1,000 tx/s (about
3,000 changes/s) that is right after the previous run ends (one cdc run at a time), so the runs go
back to back and nothing waits for a tick; a larger N would only add waiting at this load, while at
a trickle of writes N keeps runs from starting for every few rows, and max_wait bounds the delay."""
DRAIN_SECONDS = 900.0
API_PATIENCE = 300.0


@dataclass
class PhaseResult:
    name: str
    schedule: str
    tracker: Tracker
    transactions: int
    changes: int
    writer_seconds: float
    drain_seconds: float
    in_sync: bool


def write_config(path: Path, cdc: str) -> None:
    """Pipeline ``fresh``: the demo's tables into a lake and the replica; ``cdc`` is YAML."""
    from demo import COLUMNS

    path.write_text(
        f"""# dev/bench freshness (written by dev/bench_freshness.py)
pipelines:
  - name: {PIPELINE}
    source_conn_id: {SOURCE_CONN}
    tables: [{", ".join(COLUMNS)}]
    destinations:
      - kind: lake
        warehouse: {FRESH / "lake"}
      - kind: postgres
        conn_id: {REPLICA_CONN}
        name: replica
    state: {{backend: postgres}}
    changelog: {{uri: {FRESH / "changelog"}, retention: 1h}}
    spark:
      submit_options: {{driver_memory: 1g}}
    schedules: {{cdc: {cdc}, compact: null}}
"""
    )


def prepare(cluster: Cluster) -> None:
    """The source database with the demo's tables and rows (and an index for the keyless
    table's deletes), and an empty replica database."""
    from demo import SCHEMA

    for db in (SOURCE_DB, REPLICA_DB):
        cluster.create_database(db)
    with psycopg.connect(cluster.conninfo(SOURCE_DB), autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute("CREATE INDEX events_customer ON events (customer_id)")


def run_dag(deployment: Deployment, kind: str, timeout: float) -> None:
    """Unpause DAG ``kind`` of the pipeline, trigger it and wait for its success."""
    dag_id = f"pgsync_{PIPELINE}_{kind}"
    deployment.wait_dag(dag_id, timeout=300)
    deployment.unpause(dag_id)
    _succeeded(deployment, dag_id, deployment.trigger(dag_id), timeout)


def _succeeded(deployment: Deployment, dag_id: str, run_id: str, timeout: float) -> None:
    state = deployment.wait_run(dag_id, run_id, timeout)
    if state != "success":
        raise DeploymentError(f"{dag_id} run {run_id} ended {state}; see {deployment.logs}")


def wait_baseline(deployment: Deployment, timeout: float) -> None:
    """Wait for the baseline run that setup triggered."""
    dag_id = f"pgsync_{PIPELINE}_baseline"
    deadline = time.monotonic() + timeout
    while not (found := deployment.runs(dag_id)):
        if time.monotonic() > deadline:
            raise DeploymentError(f"setup triggered no run of {dag_id} within {timeout:.0f} s")
        time.sleep(2)
    _succeeded(deployment, dag_id, found[-1]["dag_run_id"], timeout)


def watermark_reader(cluster: Cluster) -> Any:
    """A function reading each destination's own watermark of each table (``freshness_probe.Marks``)."""
    from demo import COLUMNS

    from airflow_provider_pgsync.destinations.lake_changes import LakeChanges
    from airflow_provider_pgsync.destinations.postgres import PostgresDestination
    from airflow_provider_pgsync.source.names import TableRef

    destinations = {
        "lake": LakeChanges.from_config({"kind": "lake", "warehouse": str(FRESH / "lake")}),
        "replica": PostgresDestination(cluster.conninfo(REPLICA_DB), name="replica"),
    }
    tables = {key: TableRef.parse(key) for key in COLUMNS}

    def read() -> dict[str, dict[str, int | None]]:
        marks: dict[str, dict[str, int | None]] = {}
        for name, destination in destinations.items():
            keys = {key: destination.watermark(table) for key, table in tables.items()}
            marks[name] = {key: None if mark is None else mark[0] for key, mark in keys.items()}
        return marks

    return read


def compare(cluster: Cluster) -> bool:
    """Print each table of the source, the replica and the lake (rows, checksum); all equal?"""
    from demo import COLUMNS, lake_sums, source_sums

    sums = {
        "source": source_sums(cluster.conninfo(SOURCE_DB)),
        "replica": source_sums(cluster.conninfo(REPLICA_DB)),
        "lake": lake_sums(FRESH / "lake"),
    }
    same = True
    for table in COLUMNS:
        line = " | ".join(f"{name} {s[table][0]:>8,} rows {s[table][1]:>16}" for name, s in sums.items())
        equal = sums["replica"][table] == sums["source"][table] == sums["lake"][table]
        same &= equal
        print(f"  {table:18} {line}  {'ok' if equal else 'DIFFERENT'}", flush=True)
    return same


def run_phase(
    deployment: Deployment,
    cluster: Cluster,
    name: str,
    schedule: str,
    *,
    minutes: float,
    rate: float,
    writers: int,
    sample_every: int,
) -> PhaseResult:
    probe = Probe(watermark_reader(cluster), DESTINATIONS)
    writer = LoadWriter(
        cluster.conninfo(SOURCE_DB),
        rate=rate,
        threads=writers,
        sample_every=sample_every,
        on_sample=probe.add,
    )
    probe.start()
    writer.start()
    dag_id = CDC_DAG
    deployment.unpause(dag_id)
    print(f"{name}: cdc {schedule}; {writers} writer(s) at {rate:,.0f} tx/s for {minutes:g} min", flush=True)
    deadline = time.monotonic() + minutes * 60
    shown = time.monotonic()
    while time.monotonic() < deadline and not writer.stopping.is_set():  # set: a writer failed
        deployment.check_alive()
        if probe.error is not None:
            raise RuntimeError(f"the freshness probe failed: {probe.error}") from probe.error
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        if time.monotonic() - shown >= 30:
            shown = time.monotonic()
            print(f"  {progress(writer, probe)}", flush=True)
    writer.stop()
    marker = writer.marker()
    probe.add(marker, counted=False)
    transactions, changes = sum(writer.transactions), sum(writer.changes) + 3
    print(f"{name}: writer stopped; waiting for both destinations to pass its last commit", flush=True)
    while not probe.wait_passed(marker, 30):
        deployment.check_alive()
        if time.monotonic() - writer.stopped > DRAIN_SECONDS:
            raise DeploymentError(f"{name}: the destinations did not catch up within {DRAIN_SECONDS:.0f} s")
        print(f"  {progress(writer, probe)}", flush=True)
    drain = time.monotonic() - writer.stopped
    tracker = probe.stop()
    deployment.pause_between_runs(CDC_DAG)
    in_sync = compare(cluster)
    return PhaseResult(name, schedule, tracker, transactions, changes, writer.seconds, drain, in_sync)


def progress(writer: LoadWriter, probe: Probe) -> str:
    """One line: the writer's rate so far, and per destination the samples passed and waiting."""
    done = sum(writer.transactions)
    with probe.lock:
        tracker = probe.tracker
        per = ", ".join(
            f"{name} {len(tracker.fresh[name])} passed"
            + (f" (last {tracker.fresh[name][-1]:.0f} s)" if tracker.fresh[name] else "")
            + f" {len(tracker.waiting[name])} waiting"
            for name in DESTINATIONS
        )
    return f"{writer.seconds:4.0f} s: {done:,} tx ({done / writer.seconds:,.0f} tx/s); {per}"


def report(result: PhaseResult) -> float:
    """Print a phase's figures; the p50 of its worst destination."""
    secs = result.writer_seconds
    print(
        f"{result.name} (cdc {result.schedule}): writer {result.transactions:,} tx in {secs:.0f} s"
        f" = {result.transactions / secs:,.0f} tx/s, {result.changes:,} row changes = "
        f"{result.changes / secs:,.0f} rows/s; both destinations caught up {result.drain_seconds:.0f} s "
        f"after it stopped: {result.changes / (secs + result.drain_seconds):,.0f} rows/s sustained"
    )
    worst = 0.0
    for name in DESTINATIONS:
        values = result.tracker.fresh[name]
        p = percentiles(values)
        left = len(result.tracker.waiting[name])
        if not p:
            print(f"  {name:8} no sample passed ({left} waiting)")
            continue
        worst = max(worst, p[50])
        print(
            f"  {name:8} {len(values):,} samples: freshness p50 {p[50]:.1f} s, p95 {p[95]:.1f} s,"
            f" p99 {p[99]:.1f} s, max {max(values):.1f} s" + (f" ({left} never passed)" if left else "")
        )
    print(f"  destinations {'equal' if result.in_sync else 'DIFFER FROM'} the source", flush=True)
    return worst


def bench_freshness(
    minutes: float, rate: float, writers: int, sample_every: int, phases: list[tuple[str, str]]
) -> int:
    shutil.rmtree(FRESH, ignore_errors=True)
    (FRESH / "airflow").mkdir(parents=True)
    cluster = Cluster(
        root=default_base_dir(server_user()) / "bench-freshness-pg",
        port=free_port(),
        settings={"max_wal_size": "4GB", "checkpoint_timeout": "15min"},
    )
    cluster.destroy()
    cluster.start()
    prepare(cluster)
    config = FRESH / "pgsync.yaml"
    write_config(config, phases[0][1])
    deployment = Deployment(
        home=FRESH / "airflow",
        cluster=cluster,
        dags_folder=REPO / "dags",
        port=free_port(),
        env={
            "PGSYNC_CONFIG": str(config),
            f"AIRFLOW_CONN_{SOURCE_CONN.upper()}": cluster.url(SOURCE_DB, with_password=True),
            f"AIRFLOW_CONN_{REPLICA_CONN.upper()}": cluster.url(REPLICA_DB, with_password=True),
        },
    )
    results: list[PhaseResult] = []
    worst: list[float] = []
    try:
        started = time.monotonic()
        deployment.start()
        took = time.monotonic() - started
        print(f"airflow: healthy in {took:.0f} s at {deployment.base_url} (logs: {deployment.logs})")
        started = time.monotonic()
        deployment.wait_dag(f"pgsync_{PIPELINE}_baseline", timeout=300)
        deployment.unpause(f"pgsync_{PIPELINE}_baseline")  # setup triggers it
        run_dag(deployment, "setup", 600)
        wait_baseline(deployment, 1200)
        print(f"setup and baseline of both destinations: {time.monotonic() - started:.0f} s", flush=True)
        schedule = deployment.wait_schedule(CDC_DAG, lambda summary: True)  # as parsed now
        for n, (name, cdc) in enumerate(phases):
            if n:
                write_config(config, cdc)
                schedule = deployment.wait_schedule(CDC_DAG, schedule.__ne__)
            result = run_phase(
                deployment,
                cluster,
                name,
                cdc,
                minutes=minutes,
                rate=rate,
                writers=writers,
                sample_every=sample_every,
            )
            results.append(result)
            worst.append(report(result))
    finally:
        deployment.stop()
        with contextlib.suppress(Exception):
            cluster.stop()
    print("(a 2-core machine shared with other work: the figures are noisy)")
    if not all(r.in_sync for r in results):
        print("freshness: a destination differs from the source")
        return 1
    if results[-1].name != "event-driven":
        print(f"(no event-driven phase ran: the figure below is the {results[-1].name} phase's)")
    print(f"freshness_p50_s={worst[-1]:.1f}")
    return 0
