"""Benchmarks of pgsync's data paths; the last line of each is its ratio to the physical limit.

dev/bench capture    changes/s of capture (peek -> durable segments -> advance) over
                     the server's own decoding rate of the same backlog
dev/bench baseline   rows/s of a baseline (Spark, snapshot -> durable lake base) over
                     rows/s of COPY (SELECT * FROM t) TO STDOUT of the same table
dev/bench apply      changes/s of apply (changelog -> PostgreSQL destination) over rows/s
                     of COPY FROM STDIN of as many rows; also the lake's apply and the
                     compaction of its base plus those changes; --keyless: of a table
                     without a key (REPLICA IDENTITY FULL), 80 % inserts (dev/bench_apply_keyless.py)
dev/bench compact    rows/s of a lake compaction (1M-row base plus 1M changes) over rows/s of
                     COPY FROM STDIN of the result's rows; --scenario few: 1,000 changes on
                     a 5M-row base, with the files rewritten (dev/bench_compact.py)
dev/bench freshness  seconds from commit until each destination has it, under ~1,000 tx/s,
                     on a real Airflow deployment, for cron and event-driven cdc runs
                     (dev/bench_freshness.py)
"""

from __future__ import annotations

import argparse
import sys

import machine_settings
from pgcluster import REPO, Cluster, default_base_dir, free_port, server_user

BENCH = REPO / ".dev" / "bench"


def bench_cluster(name: str = "bench") -> Cluster:
    """A fresh private cluster for one benchmark, so nothing else retains WAL or competes
    (its own folder and a free port: benchmarks of different paths may run side by side)."""
    cluster = Cluster(root=default_base_dir(server_user()) / f"{name}-pg", port=free_port())
    cluster.destroy()
    cluster.start()
    return cluster


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dev/bench", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["capture", "baseline", "apply", "compact", "freshness"])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--partition-mb", type=float, default=256)
    parser.add_argument("--keyless", action="store_true", help="apply: a table without a key")
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration of the baseline job (repeatable)",
    )
    parser.add_argument("--driver-memory", help="spark-submit --driver-memory of the baseline job")
    parser.add_argument("--minutes", type=float, default=10, help="freshness: minutes of load per phase")
    parser.add_argument("--rate", type=float, default=1000, help="freshness: target transactions/s")
    parser.add_argument("--writers", type=int, default=4, help="freshness: writer threads")
    parser.add_argument("--sample-every", type=int, default=100, help="freshness: 1 commit in N is probed")
    parser.add_argument(
        "--phases", default="cron,event", help="freshness: the phases to run, in order: cron, event"
    )
    parser.add_argument("--cron", help="freshness: the cron phase's cdc schedule (YAML; '* * * * *')")
    parser.add_argument(
        "--event", help="freshness: the event-driven cdc schedule (YAML; {on_changes: 1000, max_wait: 60s})"
    )
    parser.add_argument(
        "--scenario",
        choices=["full", "few", "both"],
        default="full",
        help="compact: full (--changes base rows plus as many changes), few (1,000 changes on --rows), both",
    )
    parser.add_argument("--few-changes", type=int, default=1000, help="compact: changes of the few scenario")
    args = parser.parse_args(argv)
    machine_settings.use()  # the quick JIT and the class archive, as in make demo and the tests
    if args.what == "freshness":
        from bench_freshness import CRON, EVENTS, bench_freshness

        schedules = {"cron": ("cron", args.cron or CRON), "event": ("event-driven", args.event or EVENTS)}
        phases = [schedules[p.strip()] for p in args.phases.split(",")]
        return bench_freshness(args.minutes, args.rate, args.writers, args.sample_every, phases)
    if args.what == "capture":
        from bench_capture import bench_capture

        bench_capture(args.changes)
    if args.what == "apply" and args.keyless:
        from bench_apply_keyless import bench_apply_keyless

        bench_apply_keyless(args.changes)
    elif args.what == "apply":
        from bench_apply import bench_apply

        bench_apply(args.changes)
    if args.what == "compact":
        from bench_compact import bench_compact

        bench_compact(args.changes, args.rows, args.scenario, args.few_changes)
    if args.what == "baseline":
        from bench_baseline import bench_baseline

        conf = dict(item.split("=", 1) for item in args.spark_conf)
        options = {"driver_memory": args.driver_memory} if args.driver_memory else {}
        bench_baseline(args.rows, args.partition_mb, conf, options)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
